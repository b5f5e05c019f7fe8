#!/usr/bin/env bash
# One command from a fresh clone to a benchmark result: install what is
# missing, build, and run the default local job (`psbench-master --local`:
# the seed's shortest experiment — 2 trainers, 1 server, 10 epochs, batch
# size 10). Progress lines while it runs, the processed-metrics tables at
# the end, results under ./psbench-out/.
#
#   scripts/run.sh [psbench-master options...]   e.g. --ntrainer 4 --nserver 2
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target psbench-master psbench-server psbench-trainer

exec build/psbench-master --local --out psbench-out "$@"
