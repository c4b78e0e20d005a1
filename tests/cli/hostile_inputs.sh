#!/usr/bin/env bash
# Hostile input files (issue 27), launched like a user would: each gives exactly one line on
# stderr in valid UTF-8, naming the file and what is wrong, and exit 2. Before: SIGFPE (a zero
# head count), the OOM killer (an absurd layer count), minutes of regex backtracking ending in an
# internal error (exit 1), raw file bytes and newlines in the error line.
#   hostile_inputs.sh BIN_DIR        (the inputs are in hostile/ beside this script)
set -u
BIN=$1
HOSTILE="$(cd "$(dirname "$0")" && pwd)/hostile"
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
source "$(dirname "$0")/expect_one_line_error.sh"
train=("$BIN/hlp-train" --steps 1 --threads 1 --loader-threads 1)

# 1, 2. config.json sizes that divided by zero or allocated for minutes: refused before MPI starts,
# so also one line under mpiexec.
for launch in "" "$MPIEXEC -n 2"; do
  tag=${launch:+mpi2-}
  expect_one_line_error "${tag}zero-heads" 2 "zero_heads.json: field 'num_attention_heads' = 0 must be" \
    -- $launch "${train[@]}" --model-config "$HOSTILE/zero_heads.json"
  expect_one_line_error "${tag}zero-kv-heads" 2 "zero_kv_heads.json: field 'num_key_value_heads' = 0" \
    -- $launch "${train[@]}" --model-config "$HOSTILE/zero_kv_heads.json"
  expect_one_line_error "${tag}absurd-layers" 2 "absurd_layers.json: field 'num_hidden_layers' = 1000000000 must be a whole number in [1, 4096]" \
    -- $launch "${train[@]}" --model-config "$HOSTILE/absurd_layers.json"
  expect_one_line_error "${tag}absurd-parameters" 2 "exceed HLP's limit of 2^40 bytes (1 TiB)" \
    -- $launch "${train[@]}" --model-config "$HOSTILE/absurd_parameters.json"
done
expect_one_line_error "print-config-zero-heads" 2 "'num_attention_heads' = 0" \
  -- "$BIN/hlp-train" --model-config "$HOSTILE/zero_heads.json" --print-config
pattern=$(printf 'G%.0s' $(seq 5000))
expect_one_line_error "pattern-too-many-layers" 2 "5000 layers exceed HLP's limit of 4096" \
  -- "${train[@]}" --pattern "$pattern"

# 3. A pre-tokenizer regex that backtracks catastrophically: the tokenizer file is named, within
# seconds (PCRE2's default budget took 36 s on this document before failing as an internal error).
python3 -c "import json; print(json.dumps({'text': 'abcdefghijklmnopqrstuv ' * 2000 + 'a' * 40 + '!'}))" \
  > "$tmp/words.jsonl"
want="backtracking_tokenizer.json': the pre-tokenizer regex"
expect_one_line_error "regex-hlp-tokenize" 2 "$want" \
  -- timeout 10 "$BIN/hlp-tokenize" --tokenizer "$HOSTILE/backtracking_tokenizer.json" "$tmp/words.jsonl"
grep -qF "hit PCRE2's match limit (catastrophic backtracking)" "$tmp/err" \
  || { echo "FAIL regex-hlp-tokenize: no reason in: $(cat "$tmp/err")"; fail=1; }
expect_one_line_error "regex-hlp-train" 2 "$want" \
  -- timeout 30 "${train[@]}" --tokenizer "$HOSTILE/backtracking_tokenizer.json" --data "$tmp/words.jsonl" \
     --global-batch 1 --micro-batch 1

# 4. Bytes of a bad file quoted in the error line are escaped (\xNN): it stays one line of valid
# UTF-8 (expect_one_line_error checks that for every case above too).
expect_one_line_error "control-chars-in-key" 2 "field 'colour\\x1B[31m\\x0Ared' is not implemented" \
  -- "${train[@]}" --model-config "$HOSTILE/control_key.json"
printf '{"model_type": "qwen2", "hidden_size": \xff\xfe}' > "$tmp/not_json.json"
expect_one_line_error "invalid-utf8-json" 2 "not_json.json' is not JSON" \
  -- "${train[@]}" --model-config "$tmp/not_json.json"
mkdir -p "$tmp/bad_header"
python3 -c "import struct, sys; h = b'{\"w\": {\"dtype\": \"F32\", \xff\xfe\n'
sys.stdout.buffer.write(struct.pack('<Q', len(h)) + h)" > "$tmp/bad_header/model.safetensors"
expect_one_line_error "safetensors-header" 2 "model.safetensors' has a corrupted header (not JSON" \
  -- "${train[@]}" --model-config "$HOSTILE/tiny_qwen2.json" --init-from "$tmp/bad_header"
printf 'strategy = dd\xffp\x1b[2J\n' > "$tmp/value.ini"
expect_one_line_error "ini-value" 2 "--strategy: unknown value 'dd\\xFFp\\x1B[2J'" \
  -- "$BIN/hlp-train" --config "$tmp/value.ini"
printf 'steps = 1\xff\n' > "$tmp/number.ini"
expect_one_line_error "ini-number" 2 "number.ini: the argument ('1\\xFF')" \
  -- "$BIN/hlp-train" --config "$tmp/number.ini"

# 5. A run that cannot fit (issue 24): --seq-len 10^8 was killed by the OOM killer after taking
# the machine's memory. Refused before the first step with the prediction and the limit, exit 2,
# on 1 and 2 ranks (MPICH adds its own MPI_Abort line after ours on 2 ranks).
expect_one_line_error "over-memory" 2 "exceeds the" \
  -- "${train[@]}" --model small --seq-len 100000000
grep -qE "predicted peak [0-9]+ MiB on rank 0 \(activations [0-9]+ MiB at --seq-len 100000000, --micro-batch [0-9]+\) exceeds the [0-9]+ MiB it may use \((MemAvailable|cgroup memory limit)" "$tmp/err" \
  || { echo "FAIL over-memory: no prediction and limit in: $(cat "$tmp/err")"; fail=1; }
timeout 120 $MPIEXEC -n 2 "${train[@]}" --model tiny --strategy ddp --seq-len 20000000 \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 2 ] || [ "$(grep -c "^hlp-train: error: predicted peak" "$tmp/err")" -ne 1 ] ||
   ! grep -q "/ 2 rank(s) on this node\|cgroup memory limit" "$tmp/err" ||
   [ "$(grep -vc "MPI_Abort\|^hlp-train: error: predicted peak" "$tmp/err")" -ne 0 ]; then
  echo "FAIL mpi2-over-memory: exit $rc:"; cat "$tmp/err"; fail=1
else
  echo "ok   mpi2-over-memory: $(head -1 "$tmp/err")"
fi
exit $fail
