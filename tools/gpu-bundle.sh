#!/usr/bin/env bash
# Downloads (apt-get download, no install) the Debian bookworm packages that HLP needs besides
# LibTorch and CUDA, for a GPU machine that has CUDA, PyTorch, CMake and a compiler but no MPI,
# HDF5, Boost, ... and no network. tools/gpu-check.sh unpacks them there (dpkg -x) into a
# private prefix. Run here, on Debian 12 with apt sources (network):
#   tools/gpu-bundle.sh [DIR]          (default build-gpu-bundle/, ignored by git: /build*/)
# Prints each package, the bundle's size, and the shared libraries its programs and libraries
# need that the bundle does not provide (the GPU machine must have those: glibc, libstdc++,
# zlib, OpenSSL, curl, udev, ...; gpu-check.sh checks them with ldd before building).
# The bundle must travel with the `run` device tool (64 MiB for the whole working tree).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(realpath -m "${1:-$here/build-gpu-bundle}")"
limit_mib="${HLP_BUNDLE_LIMIT_MIB:-60}"

# What HLP links or runs, as Debian bookworm names it (docs/toolchain.md, "GPU machines without
# MPI, HDF5 or network").
packages=(
  # MPI: MPICH 4.0 (ch4:ucx), its launcher (hydra links libslurm and hwloc) and fabrics
  mpich libmpich12 libmpich-dev libucx0 libhwloc15 libslurm38
  libibverbs1 librdmacm1 libnuma1 libfabric1 libpsm2-2
  # parallel HDF5 1.10 (mpich flavour) and its compression libraries
  libhdf5-mpich-103-1 libhdf5-mpich-dev libaec0 libsz2
  # Boost.Program_options 1.74 (runtime, dev, the headers)
  libboost-program-options1.74.0 libboost-program-options1.74-dev libboost1.74-dev
  # tests, JSON, tokenizers
  catch2 nlohmann-json3-dev libsentencepiece0 libsentencepiece-dev
  # the Hugging Face tokenizer's pre-tokenizer regex (PCRE2) and NFC (ICU 72)
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libicu72 libicu-dev
  # pkg-config, which CMake's pkg_check_modules needs (sentencepiece, pcre2)
  pkgconf pkgconf-bin libpkgconf3
  # libraries of the above that a minimal CUDA image may lack (udev: hwloc; netlink: ibverbs)
  libudev1 libnl-3-200 libnl-route-3-200
)

command -v apt-get >/dev/null || { echo "gpu-bundle: apt-get not found (run this on Debian 12)" >&2; exit 2; }
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
  echo "gpu-bundle: warning: this is ${PRETTY_NAME:-?}, not Debian 12 (bookworm): package names/versions may differ" >&2

mkdir -p "$dir"
rm -f "$dir"/*.deb "$dir/MANIFEST"
echo "gpu-bundle: downloading ${#packages[@]} packages into $dir"
(cd "$dir" && apt-get download -q "${packages[@]}" 2>&1 | grep -v '^Get:' || true)
missing=()
for p in "${packages[@]}"; do
  ls "$dir/${p}_"*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-bundle: not downloaded: ${missing[*]} (apt-get update? sources?)" >&2
  exit 1
fi

# HLP links the shared libraries, so the static archives of the MPICH, HDF5 and ICU -dev
# packages (libmpich.a 57 MB, ICU's 44 MB, HDF5's 10 MB unpacked; 18.7 of the bundle's 53.9
# MiB as downloaded) only cost the device tool's 64 MiB, which the whole working tree shares
# (13.4 MiB tracked, 2026-11-27). Those three are repacked without them (dpkg-deb -R, then -b
# with xz; md5sums rewritten; file times kept). Nothing else changes: FindMPI, FindHDF5 (whose
# settings gpu-check.sh marks static-unavailable) and FindICU pick the shared libraries.
# (Measured: 53.9 -> 35.2 MiB.)
repack="$(mktemp -d)"
for p in libmpich-dev libhdf5-mpich-dev libicu-dev; do
  deb="$(ls "$dir/${p}_"*.deb)"
  r="$repack/$p"
  dpkg-deb -R "$deb" "$r"
  # (but libhdf5_mpich_hl.a: h5pcc links -lhdf5_hl, whose .so is in a package not bundled)
  find "$r/usr" -type f -name '*.a' ! -name libhdf5_mpich_hl.a -print -delete |
    sed "s#^$r#  $p: without #"
  (cd "$r" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort |
     xargs -r -d '\n' md5sum >DEBIAN/md5sums)
  dpkg-deb --root-owner-group -Zxz -b "$r" "$deb" >/dev/null
done
rm -rf "$repack"

# manifest: package version size sha256 (gpu-check.sh verifies the files against it)
for deb in "$dir"/*.deb; do
  printf '%s %s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
done >"$dir/MANIFEST"
column -t "$dir/MANIFEST" | awk '{printf "  %-36s %-24s %9.1f KiB\n", $1, $2, $3 / 1024}'

# sonames the bundle needs but does not provide: what the GPU machine must have
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for deb in "$dir"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
provided="$(find "$tmp/root" -name 'lib*.so*' -printf '%f\n' | sort -u)"
needed="$(find "$tmp/root" -type f \( -name 'lib*.so*' -o -path '*/bin/*' \) -exec sh -c \
  'for f; do objdump -p "$f" 2>/dev/null | awk "/NEEDED/ {print \$2}"; done' sh {} + | sort -u)"
external="$(comm -23 <(echo "$needed") <(echo "$provided") | tr '\n' ' ')"
unpacked_kib="$(du -sk "$tmp/root" | cut -f1)"

bytes="$(cat "$dir"/*.deb | wc -c)"
mib="$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')"
echo "gpu-bundle: ${#packages[@]} packages, $(ls "$dir"/*.deb | wc -l) .deb files, $mib MiB" \
     "($bytes bytes; unpacked $((unpacked_kib / 1024)) MiB) in $dir"
echo "gpu-bundle: the GPU machine must provide: $external"
echo "$external" >"$dir/HOST-LIBS"
if awk -v m="$mib" -v l="$limit_mib" 'BEGIN {exit !(m > l)}'; then
  echo "gpu-bundle: error: $mib MiB is over the ${limit_mib} MiB budget (the device tool carries 64 MiB in all)" >&2
  exit 1
fi
echo "gpu-bundle: carry it with the device tool as \"$(realpath --relative-to="$here" "$dir")\""
