# configure.sh — sourced by run.sh and test.sh: configure one build folder
# for one compiler and build type, so that each script keeps its own build
# and neither inherits the other's choices.
#
# CMake ignores CC and CMAKE_BUILD_TYPE changes once a folder is configured:
# a folder configured by someone else (an older script, a hand-made build,
# another compiler) would silently keep its compiler, its options and so its
# outputs. psb_configure compares what the folder's cache holds with what is
# asked and, when the compiler or the build type differ, configures it from
# scratch (its cache and CMakeFiles/ removed: everything is built again).
#
#   psb_configure DIR COMPILER BUILD_TYPE [cmake -D... args]
#
# $PSBENCH_CMAKE_ARGS: more CMake arguments for every folder either script
# configures, after the script's own (e.g. -DPSBENCH_CUDA=OFF for a CPU-only
# build where the CUDA toolkit is installed; it also saves the toolkit's
# detection, about 10 s a folder on 2 cores).
# shellcheck shell=bash

# A cache entry's value ("" when absent).
psb_cache_value() { # file key
  sed -n "s/^$2:[A-Z]*=//p" "$1" 2>/dev/null | head -n 1
}

psb_configure() {
  local dir=$1 cc=$2 type=$3
  shift 3
  local cc_path
  cc_path=$(command -v "$cc") || { echo "configure: compiler '$cc' not found" >&2; return 1; }
  if [ -f "$dir/CMakeCache.txt" ]; then
    local have_cc have_type
    have_cc=$(psb_cache_value "$dir/CMakeCache.txt" CMAKE_C_COMPILER)
    have_type=$(psb_cache_value "$dir/CMakeCache.txt" CMAKE_BUILD_TYPE)
    if [ "$(readlink -f "$have_cc" 2>/dev/null)" != "$(readlink -f "$cc_path")" ] || [ "$have_type" != "$type" ]; then
      echo "configure: $dir was configured with ${have_cc:-?} ($have_type); configuring it again with $cc_path ($type)"
      rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
    fi
  fi
  local extra=()
  # shellcheck disable=SC2206  # words, as a user writes them
  [ -n "${PSBENCH_CMAKE_ARGS:-}" ] && extra=(${PSBENCH_CMAKE_ARGS})
  cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc_path" -DCMAKE_BUILD_TYPE="$type" "$@" "${extra[@]}" >/dev/null
}
