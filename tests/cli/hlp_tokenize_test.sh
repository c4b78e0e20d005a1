#!/usr/bin/env bash
# hlp-tokenize end to end: the reference ids for every hard case (tests/data/hf_bpe), decode of
# encode gives the NFC text back for byte-level and tokenizer.json, SentencePiece runs, and bad
# tokenizer files / inputs give one line on stderr and exit 2 (hlp-tokenize and hlp-train).
#   hlp_tokenize_test.sh BIN_DIR SOURCE_DIR QWEN3_TOKENIZER_JSON
set -u
BIN=$1 SRC=$2 QWEN=$3
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

# 1. Every case of cases.json, one jsonl record each, against the JavaScript reference ids.
$PY - "$SRC/tests/data/hf_bpe" "$tmp" <<'PYEOF'
import json, sys
src, tmp = sys.argv[1], sys.argv[2]
cases = json.load(open(f"{src}/cases.json", encoding="utf-8"))
ref = json.load(open(f"{src}/reference.json", encoding="utf-8"))
with open(f"{tmp}/cases.jsonl", "w", encoding="utf-8") as f, open(f"{tmp}/want.ids", "w") as w, \
     open(f"{tmp}/want_nfc.jsonl", "w", encoding="utf-8") as n:
    for name, text in cases.items():
        f.write(json.dumps({"text": text, "name": name}) + "\n")
        w.write(json.dumps(ref["cases"][name]["ids"], separators=(",", ":")) + "\n")
        n.write(json.dumps({"text": ref["cases"][name]["nfc"]}, ensure_ascii=False, separators=(",", ":")) + "\n")
PYEOF
"$BIN/hlp-tokenize" --tokenizer "$QWEN" "$tmp/cases.jsonl" > "$tmp/got.ids" \
  && cmp -s "$tmp/got.ids" "$tmp/want.ids" && ok "reference ids for $(wc -l < "$tmp/want.ids") cases" \
  || { bad "reference ids differ:"; diff "$tmp/got.ids" "$tmp/want.ids" | head -5; }
"$BIN/hlp-tokenize" --decode --tokenizer "$QWEN" "$tmp/got.ids" > "$tmp/got_nfc.jsonl"
$PY - "$tmp/got_nfc.jsonl" "$tmp/want_nfc.jsonl" <<'PYEOF' && ok "decode(encode(x)) == NFC(x) for every case" || bad "decode(encode(x)) != NFC(x)"
import json, sys
got = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
want = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
sys.exit(0 if got == want else 1)
PYEOF

# 2. Every tokenizer HLP has, on the sample corpus (another field name): one line per record.
$PY -c "
import json, sys
for l in open('$SRC/datasets/sample/corpus.jsonl', encoding='utf-8'):
    print(json.dumps({'body': json.loads(l)['text']}))" > "$tmp/body.jsonl"
records=$(wc -l < "$tmp/body.jsonl")
for tok in byte "$SRC/datasets/sample/spm.model" "$QWEN"; do
  name=$(basename "$tok")
  if "$BIN/hlp-tokenize" --tokenizer "$tok" --jsonl-field body "$tmp/body.jsonl" > "$tmp/$name.ids" \
     && [ "$(wc -l < "$tmp/$name.ids")" -eq "$records" ]; then
    ok "$name: $records records, $($PY -c "import json;print(sum(len(json.loads(l)) for l in open('$tmp/$name.ids')))") tokens"
  else
    bad "$name: encode failed or wrong line count"
  fi
  "$BIN/hlp-tokenize" --decode --tokenizer "$tok" --jsonl-field body "$tmp/$name.ids" > "$tmp/$name.dec"
  if [ "$name" != spm.model ]; then  # SentencePiece normalizes whitespace; the others are exact
    cmp -s <($PY -c "import json,sys;[print(json.loads(l)['body']) for l in open('$tmp/body.jsonl')]") \
           <($PY -c "import json,sys;[print(json.loads(l)['body']) for l in open('$tmp/$name.dec')]") \
      && ok "$name: decode(encode(corpus)) == corpus" || bad "$name: round trip differs"
  fi
done

# 3. Bad tokenizer files and inputs: exactly one stderr line naming the problem, exit 2.
head -c 1000000 "$QWEN" > "$tmp/truncated.json"
sed '0,/"type": "BPE"/s//"type": "Unigram"/' "$QWEN" > "$tmp/unigram.json"
$PY - "$QWEN" "$tmp/unknown-merge.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["model"]["merges"][5] = ["Ġt", "no-such-token"]
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
printf '{"text": "fine"}\n{"txt": "no text field"}\n' > "$tmp/badfield.jsonl"
printf '[1, 2, 200000]\n' > "$tmp/badid.ids"
expect() {  # NAME WANT -- command...
  local name=$1 want=$2; shift 3
  timeout 120 "$@" > /dev/null 2> "$tmp/err"; local rc=$?
  if [ "$rc" -ne 2 ]; then bad "$name: exit $rc (want 2)"; cat "$tmp/err"
  elif [ "$(grep -c . "$tmp/err")" -ne 1 ]; then bad "$name: not one stderr line:"; cat "$tmp/err"
  elif ! grep -qF -- "$want" "$tmp/err"; then bad "$name: stderr lacks '$want':"; cat "$tmp/err"
  else ok "$name: $(cat "$tmp/err")"; fi
}
for f in truncated unigram unknown-merge; do
  want="not valid JSON"; [ $f = unigram ] && want="model type 'Unigram' is not supported"
  [ $f = unknown-merge ] && want="names 'no-such-token', which is not in the vocabulary"
  expect "hlp-tokenize $f" "$want" -- "$BIN/hlp-tokenize" --tokenizer "$tmp/$f.json" "$tmp/cases.jsonl"
  expect "hlp-train $f" "$want" -- env OPENBLAS_NUM_THREADS=1 "$BIN/hlp-train" --tokenizer "$tmp/$f.json" --steps 1
done
expect "hlp-train 2 ranks truncated" "not valid JSON" -- ${HLP_MPIEXEC:-mpiexec} -n 2 \
  env OPENBLAS_NUM_THREADS=1 "$BIN/hlp-train" --strategy ddp --tokenizer "$tmp/truncated.json" --steps 1
expect "missing field" "badfield.jsonl:2: no string field \"text\"" -- "$BIN/hlp-tokenize" "$tmp/badfield.jsonl"
expect "id outside the vocabulary" "id 200000 is not in [0, 151669)" -- \
  "$BIN/hlp-tokenize" --decode --tokenizer "$QWEN" "$tmp/badid.ids"
exit $fail
