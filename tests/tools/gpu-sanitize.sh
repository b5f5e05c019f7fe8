#!/usr/bin/env bash
# gpu-sanitize.sh — compute-sanitizer (memcheck, then racecheck) over the
# tests that run kernels on a GPU: the GPU layer (test_cugpu with
# PSBENCH_CUGPU=cuda), the cuda device (test_device with
# PSBENCH_CUDA_DEVICE=cuda: every job, batches of small folds, big buffers)
# and the trainer's cuda compute layer (test_compute with
# PSBENCH_COMPUTE=cuda: every op, the staging ring; test_model_device:
# DummyModel and the HybridModel's dense part trained on it);
# then memcheck over the servers of the integration suites of every kind on
# the GPU (psb.py starts each server under it: $PSBENCH_SERVER_WRAP; a
# report fails the test that started it, through its stderr).
#
#   tests/tools/gpu-sanitize.sh BUILD_DIR
#
# Exit 0 when every run is clean; 1 when a tool reports an error (its
# report is printed); 77 (ctest's skip) with the reason when no GPU answers
# or compute-sanitizer is not installed (CUDA's toolkit has it in
# <cuda>/bin; $COMPUTE_SANITIZER names another).
set -uo pipefail
BUILD=${1:?usage: gpu-sanitize.sh BUILD_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
[[ -z $cs && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
if [[ -z $cs ]]; then
    echo "skipped: compute-sanitizer not found (install CUDA's toolkit, or set COMPUTE_SANITIZER)"
    exit 77
fi
if ! /usr/bin/python3 "$HERE/if_gpu.py" /bin/true; then
    echo "skipped: no GPU answers here"
    exit 77
fi
rc=0
for tool in memcheck racecheck; do
    for t in "PSBENCH_CUGPU=cuda $BUILD/tests/test_cugpu" "PSBENCH_CUDA_DEVICE=cuda $BUILD/tests/test_device" \
             "PSBENCH_COMPUTE=cuda $BUILD/tests/test_compute" "PSBENCH_COMPUTE=cuda $BUILD/tests/test_model_device"; do
        echo "== compute-sanitizer --tool $tool: $t"
        # test_device's test_cuda_out_of_memory makes cudaMallocAsync fail on
        # purpose (and checks the device's answer): not an error to report.
        api=()
        [[ $t == *test_device ]] && api=(--report-api-errors no)
        # shellcheck disable=SC2086  # "VAR=value program": env splits it
        if ! env ${t%% *} "$cs" --tool "$tool" "${api[@]}" --error-exitcode 99 ${t#* }; then
            echo "FAILED: $tool on ${t#* }"
            rc=1
        fi
    done
done
src=$(cd "$HERE/../.." && pwd)
for t in test_server_kinds test_embedding_server test_batch_update test_cuda_server; do
    echo "== compute-sanitizer --tool memcheck: the servers of $t (--device cuda)"
    if ! (cd "$BUILD" && PSBENCH_BIN="$BUILD" PSBENCH_SERVER_DEVICE=cuda \
            PSBENCH_SERVER_WRAP="$cs --tool memcheck --error-exitcode 99" \
            /usr/bin/python3 "$src/tests/integration/$t.py"); then
        echo "FAILED: memcheck over the servers of $t"
        rc=1
    fi
done
exit $rc
