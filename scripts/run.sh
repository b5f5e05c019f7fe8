#!/usr/bin/env bash
# One command from a fresh clone to a benchmark result: install what
# building and running need (not the test suite's packages: scripts/test.sh
# adds those), build the three binaries in build/, and run the default local
# job (`psbench-master --local`: the seed's shortest experiment — 2 trainers,
# 1 server, 10 epochs, batch size 10). Progress lines while it runs, the
# processed-metrics tables at the end, results under ./psbench-out/.
#
#   scripts/run.sh [psbench-master options...]   e.g. --ntrainer 4 --nserver 2
#
# build/ is this script's own: the system compiler ($CC, else cc),
# RelWithDebInfo, no tests (the three binaries and bench/'s bare-floor and
# mem-floor, so that the benchmarks run from it). scripts/test.sh builds in
# build-test/ (and build-asan/, build-tsan/), so the two never reconfigure
# each other's folder. PSBENCH_CONFIGURE_ONLY=1 stops after configuring (no
# packages, no build, no run: tests/integration/test_scripts.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/configure.sh
. scripts/configure.sh

if [ "${PSBENCH_CONFIGURE_ONLY:-0}" != 1 ]; then
  scripts/install-deps.sh run
fi
psb_configure build "${CC:-cc}" RelWithDebInfo -DPSBENCH_TESTS=OFF
if [ "${PSBENCH_CONFIGURE_ONLY:-0}" = 1 ]; then
  exit 0
fi
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target psbench-master psbench-server psbench-trainer bare-floor mem-floor

exec build/psbench-master --local --out psbench-out "$@"
