#!/usr/bin/env bash
# gpu-sanitize.sh — compute-sanitizer (memcheck, then racecheck) over the
# tests that run kernels on a GPU: the GPU layer (test_cugpu with
# PSBENCH_CUGPU=cuda) and the cuda device (test_device with
# PSBENCH_CUDA_DEVICE=cuda: every job, batches of small folds, big buffers).
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
    for t in "PSBENCH_CUGPU=cuda $BUILD/tests/test_cugpu" "PSBENCH_CUDA_DEVICE=cuda $BUILD/tests/test_device"; do
        echo "== compute-sanitizer --tool $tool: $t"
        # shellcheck disable=SC2086  # "VAR=value program": env splits it
        if ! env ${t%% *} "$cs" --tool "$tool" --error-exitcode 99 ${t#* }; then
            echo "FAILED: $tool on ${t#* }"
            rc=1
        fi
    done
done
exit $rc
