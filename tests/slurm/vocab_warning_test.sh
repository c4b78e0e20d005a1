#!/bin/bash
# A job file that names a real model without its tokenizer is caught: hlp-sweep warns once per
# (model, tokenizer), naming the configurations; with the model's own tokenizer, or vocab = model,
# it does not; and the shipped sweeps that name a real model (jet-nemotron-2b, qwen3.5-9b with
# vocab = model) render without the warning from the repository root (where their tokenizer path
# is relative to).
# usage: vocab_warning_test.sh HLP_SWEEP
set -euo pipefail
: "${HLP_SOURCE_DIR:?set by ctest}" "${HLP_QWEN3_TOKENIZER:?set by ctest}"
sweep=$1
work=$(mktemp -d /tmp/hlp-vocab.XXXXXX); trap 'rm -rf "$work"' EXIT
fail() { echo "vocab_warning_test: FAIL: $*" >&2; exit 1; }
job() {  # job FILE [tokenizer line]
  printf '%s\n' "[fixed]" "model = jet-nemotron-2b" "$2" "[sweep]" "strategy = ddp, fsdp2" \
      "ranks = 2" > "$1"
}

job "$work/byte.ini" ""
"$sweep" "$work/byte.ini" --site local --list > "$work/out" 2> "$work/err" || fail "hlp-sweep failed"
cat "$work/err"
grep -q "^hlp-sweep: warning: 2 configuration(s) (ddp-n2, ...): --model jet-nemotron-2b has a vocabulary of 151936 ids but --tokenizer byte has 257" "$work/err" ||
  fail "no warning for jet-nemotron-2b with the byte tokenizer"
[ "$(grep -c warning "$work/err")" = 1 ] || fail "the warning is not said once"
[ "$(wc -l < "$work/out")" = 2 ] || fail "the configurations are not listed"

job "$work/kept.ini" "vocab = model"  # the byte tokenizer's ids into the model's own 151936 rows
"$sweep" "$work/kept.ini" --site local --list > "$work/out" 2> "$work/err" || fail "hlp-sweep failed"
[ ! -s "$work/err" ] || { cat "$work/err"; fail "a warning with vocab = model"; }

job "$work/qwen.ini" "tokenizer = $HLP_QWEN3_TOKENIZER"
"$sweep" "$work/qwen.ini" --site local --list > "$work/out" 2> "$work/err" || fail "hlp-sweep failed"
[ ! -s "$work/err" ] || { cat "$work/err"; fail "a warning with the model's own tokenizer"; }

# the shipped sweeps name the tokenizer as build/datasets/qwen3/tokenizer.json, relative to the
# repository root: where the build directory is elsewhere, link it there for the check
root=$work/root
mkdir -p "$root/build/datasets/qwen3"
ln -s "$HLP_SOURCE_DIR/jobs" "$root/jobs"
ln -s "$HLP_QWEN3_TOKENIZER" "$root/build/datasets/qwen3/tokenizer.json"
for j in report-psc report-psc-v100 ablation-pipeline ablation-schedules qwen35-psc; do
  (cd "$root" && "$sweep" "jobs/$j.ini" --site local --list > "$work/out" 2> "$work/err") ||
    { cat "$work/err"; fail "jobs/$j.ini does not render"; }
  [ ! -s "$work/err" ] || { cat "$work/err"; fail "jobs/$j.ini runs its model without its vocabulary"; }
done
echo "vocab_warning_test: the warning where it belongs, and none in the shipped sweeps"
