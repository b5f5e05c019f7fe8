#!/usr/bin/env bash
# One command from a fresh clone to a green test run:
#   dependencies → configure → build (warnings are errors) → ctest,
# then the same tests again under AddressSanitizer + UBSan.
#
#   scripts/test.sh              everything
#   PSBENCH_NO_SANITIZE=1 scripts/test.sh   skip the sanitizer pass
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # build-dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DPSBENCH_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  (cd "$dir" && ctest --output-on-failure -j 1)
}

echo "== release build + tests (build/)"
# clang when present, so that the fuzz target is built and run too.
if command -v clang >/dev/null 2>&1; then cc=clang; else cc=cc; fi
CC=$cc run_suite build

if [ "${PSBENCH_NO_SANITIZE:-0}" != 1 ]; then
  echo "== ASan + UBSan build + tests (build-asan/)"
  # The fuzz target already runs under ASan in the first pass.
  CC=$cc ASAN_OPTIONS=detect_leaks=1 run_suite build-asan -DPSBENCH_SANITIZE=ON -DPSBENCH_FUZZ=OFF
fi
echo "scripts/test.sh: all tests passed"
