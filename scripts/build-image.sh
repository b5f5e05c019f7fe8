#!/usr/bin/env bash
# build-image.sh — build psbench's container image (deploy/container/
# Containerfile: psbench installed from its .deb) with podman, with no
# container registry: the base image is Debian bookworm made here with
# debootstrap (--variant=minbase) from the machine's Debian mirror and
# imported with `podman import` (localhost/psbench-base:bookworm, made once
# and reused). Installs podman, runc and debootstrap where missing
# (scripts/install-deps.sh container). docs/operations.md, "The container
# image".
#
#   scripts/build-image.sh [--build-dir DIR | --deb FILE] [--base IMAGE] [--tag NAME]
#
#   --build-dir DIR  a configured and built psbench build folder: its .deb is
#                    made with cpack (default: build, scripts/run.sh's)
#   --deb FILE       use this psbench_<v>_<arch>.deb instead
#   --base IMAGE     build on IMAGE instead of the debootstrap'd base (one that
#                    has apt and the .deb's dependencies' sources)
#   --tag NAME       the image's name (default localhost/psbench:<the .deb's version>)
#
# podman runs with runc and fixed limits (--runtime runc, --ulimit
# nofile=1024:1024, --ulimit nproc=4096:4096; the same in
# deploy/container/containers.conf, exported as CONTAINERS_CONF unless set)
# and the host's network (apt inside the build reaches the mirror).
# $PSBENCH_DEBIAN_MIRROR overrides the mirror (default: the one the host's
# apt uses for bookworm), $PSBENCH_DEBIAN_SECURITY the security archive.
# The last line names the image and the seconds each step took.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

build_dir=$repo/build
deb=""
base=""
tag=""
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build_dir=$(cd "${2:?--build-dir needs a folder}" && pwd); shift 2 ;;
    --deb) deb=$(realpath "${2:?--deb needs a file}"); shift 2 ;;
    --base) base=${2:?--base needs an image}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

"$repo/scripts/install-deps.sh" container
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/container/containers.conf}
podman_opts=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096)

tmp=$(mktemp -d /var/tmp/psbench-image.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
started=$(date +%s)
timings=()

# The URIs the host's apt takes SUITE from, the first first (deb822 .sources files and
# one-line .list files), for Debian's own archive.
apt_uri() { # suite
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$1" '
      function flush() { if (deb && hit && uri != "") { print uri; found = 1; exit } deb = 0; hit = 0; uri = "" }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/ { deb = ($0 ~ /[[:space:]]deb([[:space:]]|$)/) }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
      END { if (!found) flush() }' "$f"
  done
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
    awk -v suite="$1" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) print $i }'
}

# ---- the base: bookworm from debootstrap, imported ----------------------
if [ -z "$base" ]; then
  base=localhost/psbench-base:bookworm
  if podman image exists "$base"; then
    echo "build-image: base $base present"
  else
    mirror=${PSBENCH_DEBIAN_MIRROR:-$(apt_uri bookworm | sed -n 1p)}
    security=${PSBENCH_DEBIAN_SECURITY:-$(apt_uri bookworm-security | sed -n 1p)}
    if [ -z "$mirror" ]; then
      echo "build-image: no Debian mirror for bookworm in the host's apt sources: set PSBENCH_DEBIAN_MIRROR" >&2
      exit 1
    fi
    echo "build-image: debootstrap --variant=minbase bookworm from $mirror"
    t0=$(date +%s)
    debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 || {
      tail -n 30 "$tmp/debootstrap.log" >&2
      exit 1
    }
    {
      echo "deb $mirror bookworm main"
      echo "deb $mirror bookworm-updates main"
      [ -z "$security" ] || echo "deb $security bookworm-security main"
    } >"$tmp/rootfs/etc/apt/sources.list"
    rm -rf "$tmp/rootfs"/var/cache/apt/archives/*.deb "$tmp/rootfs"/var/lib/apt/lists/*
    tar -C "$tmp/rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
    rm -rf "$tmp/rootfs"
    timings+=("base $(($(date +%s) - t0)) s")
  fi
fi

# ---- the .deb ------------------------------------------------------------
mkdir "$tmp/context"
if [ -z "$deb" ]; then
  if [ ! -x "$build_dir/psbench-node" ] || [ ! -f "$build_dir/CPackConfig.cmake" ]; then
    echo "build-image: $build_dir is not a built psbench folder (cmake --build it first, or give --deb)" >&2
    exit 1
  fi
  t0=$(date +%s)
  (cd "$build_dir" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || {
    tail -n 30 "$tmp/cpack.log" >&2
    exit 1
  }
  deb=$(ls "$tmp"/pkg/psbench_*.deb)
  timings+=(".deb $(($(date +%s) - t0)) s")
fi
cp "$deb" "$tmp/context/psbench.deb"
cp "$repo/deploy/container/Containerfile" "$tmp/context/Containerfile"
version=$(dpkg-deb -f "$deb" Version)
tag=${tag:-localhost/psbench:$version}

# ---- the image -------------------------------------------------------------
t0=$(date +%s)
podman build "${podman_opts[@]}" --network host --build-arg "BASE=$base" \
  -f "$tmp/context/Containerfile" -t "$tag" "$tmp/context"
timings+=("image $(($(date +%s) - t0)) s")
echo "build-image: $tag built from $(basename "$deb") on $base in $(($(date +%s) - started)) s (${timings[*]})"
