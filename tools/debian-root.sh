#!/usr/bin/env bash
# Build and test HLP in a Debian root made with debootstrap on this (Debian 12) machine: one
# script for every suite (Debian release) HLP is checked against. Needs root (chroot, mount) and
# the Debian package mirror; no GPU.
#
#   tools/debian-root.sh SUITE [cpu|cuda] [--root-only] [--build-only] [--shell] [--run CMD] [-- CTEST_ARGS...]
#     SUITE       trixie (Debian 13) or sid (unstable)
#     --run CMD   run CMD (bash, in /hlp/build) in the root after the build, instead of ctest
#   make test-debian13 (trixie cpu)   make test-debian13-cuda (trixie cuda)   make test-sid (sid cpu)
#   tools/debian13.sh ARGS is tools/debian-root.sh trixie ARGS (kept for old command lines).
#
# Suites and flavours (each its own root, made once and cached: BUILD_DIR/debian-<suite>/<flavour>/root):
#   trixie cpu   libtorch-dev 2.6 (CPU), g++ 14, Catch2 3.7. Builds every target, runs the whole suite.
#   trixie cuda  libtorch-cuda-dev 2.6 + nvidia-cuda-toolkit 12.4 + libnccl-dev 2.22 (contrib/non-free;
#                ~2.8 GB to download, ~7.5 GB installed). Configures with -DHLP_WITH_CUDA=ON, links every
#                target, writes BUILD_DIR/debian-trixie/cuda/ldd.txt (which binary loads which
#                libtorch_cuda / libcudart / libnccl) and runs the same suite on this GPU-less machine:
#                the CUDA parts must find no device and say so, everything else must pass.
#   sid cpu      libtorch-dev 2.14 (CPU), C++20 (LibTorch >= 2.12 headers need it). Builds every
#                target, runs the whole suite. Also holds Python's torch 2.14 and transformers 5.x
#                (+ safetensors, tokenizers): the reference for model families HLP does not have yet.
#   sid cuda     refused: sid's libtorch-cuda-dev is still 2.6, which trixie cuda already covers.
# What each root installs is the package lists below, and nothing else. A changed list is
# installed into the existing root on the next run (apt-get install is idempotent).
#
# The source tree is bind-mounted read-write at /hlp/src; the build lives inside the root
# (/hlp/build, so BUILD_DIR/debian-<suite>/<flavour>/root/hlp/build here) with its own ccache.
# Mounts are undone on exit. Environment: BUILD_DIR (default build), JOBS (default nproc),
# HLP_DEBIAN_MIRROR (default: the first Debian mirror in this machine's apt sources).
set -euo pipefail

# ---- the one place that lists what the roots install (the same names in trixie and sid) ----
COMMON_PACKAGES=(
  build-essential cmake make pkg-config git ccache ca-certificates procps
  libopenblas0-pthread
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools python3-h5py python3-numpy python3-pandas
  libboost-program-options-dev catch2 nlohmann-json3-dev
  libsentencepiece-dev sentencepiece libpcre2-dev libicu-dev gnuplot-nox
  slurm-wlm munge
)
CPU_PACKAGES=(libtorch-dev python3-torch)
CUDA_PACKAGES=(libtorch-cuda-dev python3-torch-cuda nvidia-cuda-toolkit libnccl-dev)
# sid's libsentencepiece-dev 0.2.2 headers include <absl/...> but the package does not depend on
# libabsl-dev (trixie's 0.2.0 headers do not use Abseil)
SID_PACKAGES=(libabsl-dev)
# sid cpu also serves as the Python reference for new model families (transformers 5.x)
SID_CPU_PACKAGES=(python3-transformers python3-safetensors python3-tokenizers)

here="$(cd "$(dirname "$0")/.." && pwd)"
suite=""
flavour=cpu
root_only=0
build_only=0
shell=0
run_cmd=""
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    trixie|sid) suite="$1" ;;
    cpu|cuda) flavour="$1" ;;
    --root-only) root_only=1 ;;
    --build-only) build_only=1 ;;
    --shell) shell=1 ;;
    --run) shift; run_cmd="${1:?--run needs a command}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "debian-root.sh: unknown argument '$1' (trixie|sid, cpu|cuda, --root-only, --build-only, --shell, --run CMD, -- CTEST_ARGS; --help)" >&2; exit 2 ;;
  esac
  shift
done

[ -n "$suite" ] || { echo "debian-root.sh: name the suite: trixie or sid (--help)" >&2; exit 2; }
tag="debian-$suite:$flavour"
say() { echo "[$tag] $*"; }
die() { echo "[$tag] error: $*" >&2; exit 2; }
[ "$suite:$flavour" != sid:cuda ] \
  || die "no sid cuda root: sid's libtorch-cuda-dev is still 2.6, which 'trixie cuda' already builds against"

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount): run it with sudo"
command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"

build="$(cd "$here" && realpath -m "${BUILD_DIR:-build}")"
base="$build/debian-$suite/$flavour"
root="$base/root"
jobs="${JOBS:-$(nproc)}"

mirror="${HLP_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  # the mirror this machine already uses for Debian (deb822 .sources or one-line .list)
  mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *//p' \
              | tr ' ' '\n' | grep -E '/debian/?$' | head -n1 || true)"
  [ -n "$mirror" ] || mirror="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
              | awk '$1=="deb" {print $2}' | grep -E '/debian/?$' | head -n1 || true)"
fi
[ -n "$mirror" ] || die "no Debian mirror found in /etc/apt: set HLP_DEBIAN_MIRROR=<mirror URL>"

packages=("${COMMON_PACKAGES[@]}")
if [ "$flavour" = cpu ]; then packages+=("${CPU_PACKAGES[@]}"); else packages+=("${CUDA_PACKAGES[@]}"); fi
[ "$suite" = sid ] && packages+=("${SID_PACKAGES[@]}")
[ "$suite:$flavour" = sid:cpu ] && packages+=("${SID_CPU_PACKAGES[@]}")
case "$suite" in
  trixie) apt_suites="trixie trixie-updates" ;;
  sid) apt_suites="sid" ;;
esac

# ---- mounts (undone on any exit) ----
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_in() {  # mount_in TARGET mount-args...
  local target="$1"; shift
  mkdir -p "$target"
  mountpoint -q "$target" && umount -l "$target"
  mount "$@" "$target"
  mounted+=("$target")
}
in_root() {  # a clean environment: nothing of this machine's PATH, Python or compilers leaks in
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CCACHE_DIR=/hlp/ccache CCACHE_MAXSIZE=5G CCACHE_BASEDIR=/hlp/src \
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime \
    DEBIAN_FRONTEND=noninteractive "$@"
}

# ---- 1. the root ----
if [ ! -x "$root/usr/bin/apt-get" ] || [ ! -f "$base/.debootstrap-done" ]; then
  [ "$suite" = trixie ] && [ -d "$build/debian13/$flavour/root" ] \
    && say "note: $build/debian13/$flavour is the root of the old tools/debian13.sh; to reuse it instead of a new debootstrap: mv $build/debian13 $build/debian-trixie"
  say "debootstrap $suite (minbase) into $root from $mirror"
  rm -rf "$root" && mkdir -p "$base"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$base/debootstrap.log" 2>&1 \
    || { tail -n 20 "$base/debootstrap.log" >&2; die "debootstrap failed (log: $base/debootstrap.log)"; }
  touch "$base/.debootstrap-done"
fi
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $apt_suites
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
rm -f "$root/etc/apt/sources.list"
if [ "$suite" = sid ]; then
  # sid's Release file is valid for a week only (Valid-Until); a mirror that is a snapshot older
  # than that (this machine's is) makes apt refuse the whole index ("Release file ... is expired").
  # The packages are still checked against the signed Release file's hashes.
  echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99hlp-snapshot-mirror"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

mount_in "$root/proc" -t proc proc
mount_in "$root/sys" --rbind /sys   # hwloc's and UCX's topology (MPICH aborts discovery without)
mount_in "$root/dev" --bind /dev
mount_in "$root/dev/shm" -t tmpfs -o size=4g tmpfs   # MPICH's shared-memory segments
mount_in "$root/hlp/src" --bind "$here"

# cuDNN. libtorch-cuda-2.6 needs libcudnn.so.9, which Debian ships only as nvidia-cudnn: a package
# whose install script downloads cuDNN from NVIDIA's site, out of this machine's reach (its
# postinst fails, and with it every package that depends on it). In its place the cuda root gets
# a local package of the same name holding a stub libcudnn.so.9: every cudnn* function that
# libtorch_cuda / libtorch_python import, each returning CUDNN_STATUS_NOT_INITIALIZED (1).
# It exists so that the real CUDA LibTorch links and loads on this GPU-less machine; cuDNN is
# never called here (no device). On a GPU machine use a real cuDNN (PyTorch's wheel brings one).
install_cudnn_stub() {
  local have
  have="$(in_root dpkg-query -W -f='${db:Status-Abbrev} ${Version}' nvidia-cudnn 2>/dev/null || true)"
  case "$have" in "ii "*hlpstub*) return 0 ;; esac
  say "cuDNN: building the link stub package (nvidia-cudnn's download cannot run here)"
  in_root apt-get update -qq
  # libc6-dev: the C start files (crti.o) that linking a shared library needs; gcc only
  # recommends it, and a minbase root has no recommends
  if ! in_root sh -c 'command -v gcc && command -v nm && command -v dpkg-deb &&
                      test -f /usr/lib/x86_64-linux-gnu/crti.o' >/dev/null; then
    in_root apt-get install -y -qq --no-install-recommends gcc binutils libc6-dev \
      >>"$base/apt.log" 2>&1 || die "apt-get install gcc binutils libc6-dev failed (log: $base/apt.log)"
  fi
  if ! in_root bash -euo pipefail -c '
    work=/hlp/cudnn-stub; rm -rf "$work"; mkdir -p "$work/x" && cd "$work"
    apt-get download -qq libtorch-cuda-2.6 python3-torch-cuda >/dev/null 2>&1
    for deb in *.deb; do dpkg-deb -x "$deb" x; done
    for lib in $(find x -name "*.so*" -type f); do
      if readelf -d "$lib" 2>/dev/null | grep -F "libcudnn.so.9" >/dev/null; then
        nm -D --undefined-only "$lib"
      fi
    done | awk "{print \$2}" | sed "s/@.*//" | grep -E "^cudnn[A-Za-z0-9_]*$" | sort -u >symbols.txt
    [ -s symbols.txt ] || { echo "no cudnn symbols found in libtorch-cuda-2.6" >&2; exit 1; }
    {
      echo "/* HLP link stub of cuDNN 9 (tools/debian-root.sh): no GPU here, never called. */"
      echo "#include <stddef.h>"
      while read -r sym; do
        case "$sym" in
          cudnnGetErrorString) echo "const char* cudnnGetErrorString(int s) { (void)s; return \"cuDNN stub: no cuDNN on this machine\"; }" ;;
          cudnnGetVersion|cudnnGetCudartVersion|cudnnGetMaxDeviceVersion) echo "size_t $sym(void) { return 0; }" ;;
          *) echo "int $sym(void) { return 1; /* CUDNN_STATUS_NOT_INITIALIZED */ }" ;;
        esac
      done <symbols.txt
    } >stub.c
    mkdir -p pkg/DEBIAN pkg/usr/lib/x86_64-linux-gnu
    # libtorch_cuda imports them versioned (cudnnCreate@libcudnn.so.9): the same version node
    echo "libcudnn.so.9 { global: cudnn*; local: *; };" >stub.map
    gcc -shared -fPIC -O1 -Wl,-soname,libcudnn.so.9 -Wl,--version-script=stub.map \
        -o pkg/usr/lib/x86_64-linux-gnu/libcudnn.so.9 stub.c
    ln -sf libcudnn.so.9 pkg/usr/lib/x86_64-linux-gnu/libcudnn.so
    cat >pkg/DEBIAN/control <<CTRL
Package: nvidia-cudnn
Version: 9.0.0.312~cuda12+hlpstub1
Architecture: amd64
Maintainer: HLP <hlp@localhost>
Description: HLP link stub of cuDNN 9 for a GPU-less Debian 13 build check
 Stands in for nvidia-cudnn, whose install script downloads cuDNN from NVIDIA.
 Every function returns CUDNN_STATUS_NOT_INITIALIZED. Not for GPU use.
CTRL
    dpkg-deb --build --root-owner-group pkg nvidia-cudnn-hlpstub.deb >/dev/null
    dpkg -i nvidia-cudnn-hlpstub.deb >/dev/null
    echo "$(wc -l <symbols.txt) cudnn functions stubbed"
  ' 2>&1 | sed "s/^/[$tag] cudnn stub: /"; then
    die "cuDNN stub package failed"
  fi
  in_root dpkg --configure -a >>"$base/apt.log" 2>&1 || true  # packages left half-configured before
}
[ "$flavour" = cuda ] && install_cudnn_stub

want="$(printf '%s\n' "${packages[@]}" | sort)"
if [ "$(cat "$base/.packages" 2>/dev/null)" != "$want" ]; then
  say "apt-get install ${#packages[@]} packages (list in tools/debian-root.sh)"
  t0=$(date +%s)
  in_root apt-get update -qq
  in_root apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$base/apt.log" 2>&1 \
    || { tail -n 30 "$base/apt.log" >&2; die "apt-get install failed (log: $base/apt.log)"; }
  in_root apt-get clean
  echo "$want" >"$base/.packages"
  say "installed in $(( $(date +%s) - t0 )) s; root is $(du -sh "$root" 2>/dev/null | cut -f1)"
fi
in_root dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' libtorch-dev libtorch-cuda-dev \
  catch2 libmpich-dev libhdf5-mpich-dev libboost-program-options-dev nlohmann-json3-dev g++ cmake \
  nvidia-cuda-toolkit libnccl-dev python3 python3-torch python3-transformers 2>/dev/null \
  | awk -v t="$tag" '$1 == "ii" {print "[" t "] package: " $2 " " $3}' || true
[ "$root_only" = 1 ] && exit 0
if [ "$shell" = 1 ]; then
  say "shell in the root (source at /hlp/src, build at /hlp/build); exit to unmount"
  in_root bash -i || true
  exit 0
fi

# ---- 2. configure + build every target ----
cmake_flags=(-DCMAKE_BUILD_TYPE=Release)
if [ "$flavour" = cuda ]; then cmake_flags+=(-DHLP_WITH_CUDA=ON); else cmake_flags+=(-DHLP_WITH_CUDA=OFF); fi
say "configure: cmake ${cmake_flags[*]}"
in_root cmake -S /hlp/src -B /hlp/build "${cmake_flags[@]}" >"$base/configure.log" 2>&1 \
  || { tail -n 30 "$base/configure.log" >&2; die "configure failed (log: $base/configure.log)"; }
grep -E '^-- HLP' "$base/configure.log" | sed "s/^/[$tag] /"
say "build -j $jobs (log: $base/build.log)"
t0=$(date +%s)
in_root cmake --build /hlp/build -j "$jobs" >"$base/build.log" 2>&1 \
  || { grep -E 'error|Error' "$base/build.log" | sed -n 1,30p >&2; die "build failed (log: $base/build.log)"; }
say "built in $(( $(date +%s) - t0 )) s"

if [ "$flavour" = cuda ]; then
  # which binary loads which CUDA library (the record the issue asks for)
  {
    echo "# ldd of every HLP executable in the Debian $suite CUDA build: libtorch_cuda, libcudart, libnccl, libcudnn (the stub)"
    for exe in "$root"/hlp/build/bin/*; do
      [ -x "$exe" ] && [ -f "$exe" ] || continue
      [ "$(head -c4 "$exe" | tail -c3)" = ELF ] || continue
      lines="$(in_root ldd "/hlp/build/bin/$(basename "$exe")" | grep -E 'libtorch_cuda|libcudart|libnccl|libcudnn' || true)"
      if [ -n "$lines" ]; then sed "s|^[[:space:]]*|$(basename "$exe"): |" <<<"$lines"
      else echo "$(basename "$exe"): (none of them)"; fi
    done
  } >"$base/ldd.txt"
  say "ldd: $base/ldd.txt ($(grep -c libcudart "$base/ldd.txt" || true) lines with libcudart)"
fi
[ "$build_only" = 1 ] && exit 0
if [ -n "$run_cmd" ]; then
  in_root bash -c "cd /hlp/build && $run_cmd"
  exit $?
fi

# ---- 3. the whole suite ----
say "ctest ${ctest_args[*]} (log: $base/ctest.log)"
set +e
in_root bash -c 'cd /hlp/build && ctest --output-on-failure -j 1 "$@"' ctest "${ctest_args[@]}" 2>&1 | tee "$base/ctest.log"
rc=${PIPESTATUS[0]}
set -e
# ctest prints nothing of a skipped test: show each one's own SKIP line (they exit at once)
skipped="$(sed -n '/The following tests did not run:/,/^$/p' "$base/ctest.log" \
             | sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' | sort -u)"
while IFS= read -r name; do
  [ -n "$name" ] || continue
  why="$(in_root bash -c 'cd /hlp/build && ctest -V -R "^$1\$" 2>&1' ctest "$name" | grep -m1 -o 'SKIP.*' || true)"
  say "skipped: $name: ${why:-no SKIP line}"
done <<<"$skipped"
grep -E 'tests passed|tests failed' "$base/ctest.log" | sed "s/^/[$tag] /" || true
exit "$rc"
