#!/bin/bash
# hlp-train with Hugging Face inputs and PEFT outputs, end to end (2 MPI ranks):
#  1. each defective checkpoint: exit 2 and exactly one error line naming the defect (no hang);
#  2. an unimplemented config.json field: exit 2 naming the field; --print-config provenance;
#  3. LoRA 5 steps from the fixture with --save-adapter (and in each checkpoint) and
#     --save-merged; the files open in Python (json + torch) with PEFT's names, the merged
#     weights equal base + alpha/r B A; fresh runs start from --load-adapter and from the merge.
set -u
train=$1
fx=$HLP_HF_FIXTURE
mpi=${HLP_MPIEXEC:-mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model-config "$fx/config.json" --seq-len 16 --global-batch 2 --micro-batch 1
        --lora-rank 4 --lora-alpha 8 --threads 1 --loader-threads 1 --warmup-steps 0)

expect_error() {  # name, expected text, args...
  local name=$1 text=$2; shift 2
  out=$(timeout -k 5 120 "$mpi" -n 2 "$train" "$@" 2>&1); rc=$?
  echo "[$name] exit $rc: $(printf '%s\n' "$out" | grep 'error' | head -3)"
  [ "$rc" -eq 2 ] || fail "$name: expected exit 2, got $rc"
  printf '%s\n' "$out" | grep -qF -- "$text" || fail "$name: output lacks '$text'"
  n=$(printf '%s\n' "$out" | grep -c 'hlp-train: error')
  [ "$n" -eq 1 ] || fail "$name: $n error lines, expected 1"
}

expect_error corrupted_header "corrupted header" --strategy fsdp2 "${common[@]}" --steps 1 --init-from "$fx/broken/corrupted_header"
expect_error truncated "is truncated" --strategy fsdp2 "${common[@]}" --steps 1 --init-from "$fx/broken/truncated"
expect_error wrong_dtype "model.embed_tokens.weight I32" --strategy fsdp2 "${common[@]}" --steps 1 --init-from "$fx/broken/wrong_dtype"
expect_error missing_shard "model-00002-of-00002.safetensors" --strategy fsdp2 "${common[@]}" --steps 1 --init-from "$fx/broken/missing_shard"
expect_error shape_mismatch "wrong shape 4: model.layers.0.mlp.up_proj.weight [63, 32] (expected [64, 32])" --strategy fsdp2 "${common[@]}" --steps 1 --init-from "$fx/broken/shape_mismatch"

sed 's/"use_mrope": false/"use_mrope": false, "qk_layernorm": true/' "$fx/config.json" > "$tmp/config.json"
out=$("$train" --model-config "$tmp/config.json" --print-config 2>&1); rc=$?
[ "$rc" -eq 2 ] && printf '%s\n' "$out" | grep -qF "field 'qk_layernorm' is not implemented" \
  || fail "unknown config field: exit $rc: $out"
out=$("$train" --model-config "$fx/config.json" --print-config) || fail "--print-config"
printf '%s\n' "$out" | grep -F "model.gdn_norm_eps = 1e-05  <- config.json: efficient_attention_config.jet: norm_eps" \
  || fail "--print-config lacks the provenance of gdn_norm_eps: $out"

out=$(timeout -k 5 300 "$mpi" -n 2 "$train" --strategy fsdp2 "${common[@]}" --steps 5 --lr 1e-2 \
      --init-from "$fx" --save-adapter "$tmp/adapter" --checkpoint-dir "$tmp/ckpt" \
      --checkpoint-every 3 --save-merged "$tmp/merged" 2>&1) || fail "training run: $out"
printf '%s\n' "$out" | grep -E "init-from|PEFT|step 5/5"
/usr/bin/python3 "$(dirname "$0")/check_adapter.py" "$tmp/adapter" 4 || fail "adapter files"
for k in 3 5; do  # the adapter beside each checkpoint
  /usr/bin/python3 "$(dirname "$0")/check_adapter.py" "$tmp/ckpt/step_$k/adapter" 4 || fail "checkpoint $k adapter"
done
/usr/bin/python3 "$(dirname "$0")/check_merged.py" "$tmp/merged" "$fx" "$tmp/adapter" || fail "merged weights"
out=$(timeout -k 5 300 "$mpi" -n 2 "$train" --strategy tp --model-config "$tmp/merged" --seq-len 16 \
      --global-batch 2 --micro-batch 1 --steps 1 --threads 1 --loader-threads 1 \
      --init-from "$tmp/merged" 2>&1) || fail "--init-from the merged weights: $out"
cmp "$tmp/adapter/adapter_model.safetensors" "$tmp/ckpt/step_5/adapter/adapter_model.safetensors" \
  || fail "final adapter differs from the step-5 checkpoint's"
out=$(timeout -k 5 300 "$mpi" -n 2 "$train" --strategy pp "${common[@]}" --steps 1 \
      --init-from "$fx" --load-adapter "$tmp/adapter" 2>&1) || fail "--load-adapter run: $out"
printf '%s\n' "$out" | grep -F -- "--load-adapter $tmp/adapter: r 4" || fail "no load line: $out"
echo PASS
