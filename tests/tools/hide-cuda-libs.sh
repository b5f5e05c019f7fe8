#!/bin/sh
# hide-cuda-libs.sh CMD [ARGS...] — run CMD where the dynamic loader finds no
# CUDA runtime, cuBLAS or NCCL, as on a host without CUDA: in a private
# mount namespace, an empty tmpfs over every folder that holds one of them
# (the folders ld.so's cache names, and those on LD_LIBRARY_PATH). The rest
# of the system is untouched, and so is everything outside CMD.
#
# Needs root, mount(8) and mount namespaces: exits 77 (ctest's SKIP_RETURN_CODE) with
# the reason on stderr where any is missing, and where no CUDA library
# is installed to hide (nothing to show).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
pattern='lib(cudart|cublas|cublasLt|nccl)\.so'
dirs=$( {
  ldconfig -p 2>/dev/null | sed -n 's/.*=> //p' | grep -E "/$pattern" || true
  IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do
    [ -n "$d" ] && ls "$d" 2>/dev/null | grep -E "^$pattern" | sed "s|^|$d/|" || true
  done
} | while read -r f; do dirname "$(readlink -f "$f")"; dirname "$f"; done | sort -u)
if [ -z "$dirs" ]; then
  echo "hide-cuda-libs: no CUDA library installed here: nothing to hide" >&2
  exit 77
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "hide-cuda-libs: needs root (a private mount namespace hides the CUDA libraries)" >&2
  exit 77
fi
if ! command -v mount >/dev/null 2>&1; then
  echo "hide-cuda-libs: no mount command here (util-linux's mount hides the CUDA libraries)" >&2
  exit 77
fi
if ! unshare -m --propagation private true 2>/dev/null; then
  echo "hide-cuda-libs: mount namespaces are refused here (unshare -m)" >&2
  exit 77
fi
export PSBENCH_HIDDEN_DIRS="$dirs"
exec unshare -m --propagation private sh -c '
  for d in $PSBENCH_HIDDEN_DIRS; do
    if [ -d "$d" ] && ! mount -t tmpfs -o size=64k,mode=755 psbench-no-cuda "$d"; then
      echo "hide-cuda-libs: cannot mount a tmpfs over $d" >&2
      exit 77
    fi
  done
  unset PSBENCH_HIDDEN_DIRS
  exec "$@"' hide-cuda-libs "$@"
