#!/usr/bin/env bash
# Install the Debian packages psbench needs — only those that are missing.
# Idempotent; works as root or through sudo.
#
#   scripts/install-deps.sh [run]      what building and running need (scripts/run.sh)
#   scripts/install-deps.sh test       that, plus what the tests need (scripts/test.sh),
#                                      then the npm packages that validate deploy/kubernetes/
#                                      (scripts/install-k8s-validate.sh)
#   scripts/install-deps.sh container  what scripts/build-image.sh needs to build and run the
#                                      container image (podman, runc, debootstrap)
#   scripts/install-deps.sh --list run|test|container
#                                      print the packages of a set, one per line, and
#                                      install nothing (tests/integration/test_scripts.py)
#
# Where a package goes: `run` is what a user who only builds and runs the
# benchmark needs; everything that only the test suite, the fuzzer, the
# .deb packaging or the benchmarks' reference measurements use is `test`.
set -euo pipefail

run_pkgs=(
  build-essential cmake pkg-config
  libevent-dev libmsgpack-dev libjansson-dev libmicrohttpd-dev libopenblas-dev libssl-dev
  libgloo-dev g++              # CPU collectives among trainers (trainer/coll_gloo.cpp)
)
test_pkgs=(
  dpkg-dev                     # dpkg-shlibdeps: the .deb's Depends (cpack -G DEB, test_install.py)
  libcmocka-dev                # unit tests
  clang libclang-rt-14-dev     # the test build's compiler and libFuzzer for tests/fuzz
  python3 python3-msgpack      # integration tests (run by /usr/bin/python3)
  iperf3                       # bench/: loopback reference
  procps                       # pgrep/pkill in tests
  iproute2 curl                # tests/multihost: namespace hosts (ip, tc), HTTP asked from a host
  prometheus                   # promtool + a real server for the /metrics tests
  chromium chromium-driver python3-selenium   # dashboard and sweep report tests in a headless browser
  slurm-wlm munge              # test_slurm.py: slurmctld, slurmd, sbatch/srun/scontrol (slurm-wlm pulls
                               # slurmctld, slurmd, slurm-client) and munged, run as a private single-host
                               # cluster under a temp dir (the system's services are not used)
  nodejs npm                   # tests/deploy: deploy/kubernetes/ checked against Kubernetes' schemas
                               # (npm's kubernetes-models; not installed where node and npm already are)
)
# scripts/build-image.sh and the container test (ctest -L container): podman
# with runc (crun is refused on some hosts), debootstrap for the base image.
container_pkgs=(podman runc debootstrap)

list=0
if [ "${1:-}" = "--list" ]; then
  list=1
  shift
fi
set_name=${1:-run}
case "$set_name" in
  run) pkgs=("${run_pkgs[@]}") ;;
  test) pkgs=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  container) pkgs=("${container_pkgs[@]}") ;;
  *) echo "install-deps: unknown set '$set_name' (run, test or container)" >&2; exit 2 ;;
esac
if [ "$list" = 1 ]; then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi

# After the Debian packages, the test set's npm packages (into tests/deploy/,
# git-ignored).
finish() {
  if [ "$set_name" = test ]; then
    "$(dirname "$0")/install-k8s-validate.sh"
  fi
}

missing=()
for p in "${pkgs[@]}"; do
  # node and npm from elsewhere (NodeSource's nodejs carries its own npm,
  # which Debian's npm would conflict with) are taken as they are.
  case $p in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages of '$set_name' present"
  finish
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "install-deps: installing (${set_name}) ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# iperf3 asks whether to start a daemon; answer no.
echo "iperf3 iperf3/start_daemon boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
finish
