#!/usr/bin/env bash
# Install the Debian packages psbench needs to build and test — only those
# that are missing. Idempotent; works as root or through sudo.
#
#   scripts/install-deps.sh            build + test dependencies
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  dpkg-dev                     # dpkg-shlibdeps: the .deb's Depends (cpack -G DEB)
  libevent-dev libmsgpack-dev libjansson-dev libmicrohttpd-dev libopenblas-dev libssl-dev
  libcmocka-dev
  libgloo-dev g++              # CPU collectives among trainers (trainer/coll_gloo.cpp)
  clang libclang-rt-14-dev     # libFuzzer for tests/fuzz
  python3 python3-msgpack      # integration tests (run by /usr/bin/python3)
  iperf3                       # bench/: loopback reference
  procps                       # pgrep/pkill in tests
  iproute2 curl                # tests/multihost: namespace hosts (ip, tc), HTTP asked from a host
  prometheus                   # promtool + a real server for the /metrics tests
  chromium chromium-driver python3-selenium   # dashboard test in a headless browser
  slurm-wlm munge              # test_slurm.py: slurmctld, slurmd, sbatch/srun/scontrol (slurm-wlm pulls
                               # slurmctld, slurmd, slurm-client) and munged, run as a private single-host
                               # cluster under a temp dir (the system's services are not used)
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
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
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# iperf3 asks whether to start a daemon; answer no.
echo "iperf3 iperf3/start_daemon boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
