#!/usr/bin/env bash
# hlp-eval against transformers 5.12 (tests/hf/transformers5/fixtures: checkpoints written by its
# save_pretrained in the transformers-5 config dialect, and its losses; make_reference.py).
# Every sequence's loss within 1e-5 relative of transformers' fp32 loss, alone and under mpiexec
# with ddp, fsdp2, pp, tp (2 ranks) and cp 2 (the 201-token sequence: the context split needs one
# length); the strategies agree with single within 1e-6 relative. The fp64 difference is printed.
# Models: Qwen2 (two), Qwen3.5's text model (qwen3_5_text: a non-default layer_types, partial
# rotary factor and conv width, 2 key / 4 value heads; and a tied one) and its vision-language
# checkpoint (qwen3_5: the text model under model.language_model., the vision tower left out).
# and Qwen3-Next with dense MLPs (qwen3_next: in_proj_qkvz / in_proj_ba fused per key head).
# tp 2 splits their Gated DeltaNet's q | k | v blocks block by block (qwen3_5_text_a, and
# qwen3_next_dense whose in_proj_qkvz is per key head); the tied and VL fixtures have 3 attention
# heads and 1 KV head, which tp 2 refuses with one line, as it does 1 key head. Qwen3-Next with
# sparse MoE layers (qwen3_next_moe_a: 8 experts, top 2 renormalised, shared expert, layer 1
# dense by mlp_only_layers; _b: 6 experts, top 3 not renormalised, decoder_sparse_step 2): every
# strategy but tp, which refuses MoE layers with one line, and ddp and fsdp2 with --ep 2 (each
# rank loads only its half of the experts).
# Then --sequences (the corpus) under single, cp and pp, and bad token files.
#   eval_test.sh HLP_EVAL FIXTURES_DIR
set -euo pipefail
HLP_EVAL=$1
FIX=$2
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
work=$(mktemp -d /tmp/hlp-eval-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
for name in qwen2_v5 qwen2_v5_tied qwen3_5_text_a qwen3_5_text_tied qwen3_5_vl qwen3_next_dense \
            qwen3_next_moe_a qwen3_next_moe_b; do
  dir="$FIX/$name"
  common=(--model-config "$dir" --init-from "$dir" --threads 1)
  "$HLP_EVAL" "${common[@]}" --tokens "$dir/tokens.txt" > "$work/$name.single.jsonl" \
    2> "$work/$name.single.err"
  strategies="ddp fsdp2 pp tp"
  case "$name" in qwen3_5_text_tied|qwen3_5_vl|qwen3_next_moe_*) strategies="ddp fsdp2 pp" ;; esac
  for strategy in $strategies; do
    "$MPIEXEC" -n 2 "$HLP_EVAL" "${common[@]}" --strategy "$strategy" --tokens "$dir/tokens.txt" \
      > "$work/$name.$strategy.jsonl"
  done
  case "$name" in qwen3_next_moe_*)  # expert parallelism: each rank reads and holds half the experts
    for strategy in ddp fsdp2; do
      "$MPIEXEC" -n 2 "$HLP_EVAL" "${common[@]}" --strategy "$strategy" --ep 2 \
        --tokens "$dir/tokens.txt" > "$work/$name.$strategy+ep2.jsonl" 2> "$work/$name.$strategy+ep2.err"
      strategies="$strategies $strategy+ep2"
      # each rank filled only its experts' tensors: single's count less, per sparse layer, the
      # other rank's E / 2 experts' gate / up / down_proj (the per-rank --init-from line; fsdp2
      # no more: a one-row tensor has no rows on its second rank), and fewer bytes than single
      /usr/bin/python3 - "$dir/config.json" "$work/$name.single.err" "$work/$name.$strategy+ep2.err" <<'PY'
import json, re, sys
cfg = json.load(open(sys.argv[1]))
L, E = cfg["num_hidden_layers"], cfg["num_experts"]
sparse = [i for i in range(L) if i not in cfg.get("mlp_only_layers", [])
          and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0]
line = re.compile(r"rank (\d+): --init-from .*?: (\d+) tensors, ([\d.]+) MiB read")
def counts(path):
    return {int(m.group(1)): (int(m.group(2)), float(m.group(3)))
            for m in map(line.search, open(path)) if m}
single, ep = counts(sys.argv[2]), counts(sys.argv[3])
want = single[0][0] - len(sparse) * (E - E // 2) * 3
exact = sys.argv[3].endswith(".ddp+ep2.err")
assert sorted(ep) == [0, 1] and all(n == want if exact else n <= want for n, _ in ep.values()), \
    (single, ep, want)
assert all(mib < single[0][1] for _, mib in ep.values()), (single, ep)
print(f"{sys.argv[3].split('/')[-1][:-4]}: ranks filled {[ep[r][0] for r in (0, 1)]} of the "
      f"{single[0][0]} tensors ({'=' if exact else '<='} {want}: {len(sparse)} sparse layers x "
      f"{E - E // 2} experts x 3 left to the other rank)")
PY
    done ;;
  esac
  tail -n 1 "$dir/tokens.txt" > "$work/$name.long.txt"  # 201 tokens: T = 200, cp 2 zigzag
  "$MPIEXEC" -n 2 "$HLP_EVAL" "${common[@]}" --strategy cp --tokens "$work/$name.long.txt" \
    > "$work/$name.cp.jsonl"
  /usr/bin/python3 - "$dir/reference.json" "$work" "$name" "$strategies cp" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
work, name, kinds = sys.argv[2], sys.argv[3], sys.argv[4].split()
def losses(kind):
    rows = [json.loads(l) for l in open(f"{work}/{name}.{kind}.jsonl")]
    return [r["loss"] for r in rows if "loss" in r], rows[-1]
r32, r64 = ref["loss_fp32"], ref["loss_fp64"]
single, last = losses("single")
assert len(single) == len(r32), (single, r32)
worst32 = max(abs(a - b) / abs(b) for a, b in zip(single, r32))
worst64 = max(abs(a - b) / abs(b) for a, b in zip(single, r64))
assert worst32 <= 1e-5, f"{name}: hlp-eval {single} vs transformers fp32 {r32}: {worst32:.2e} relative"
tokens = sum(n - 1 for n in ref["lengths"])
mean = sum(l * (n - 1) for l, n in zip(single, ref["lengths"])) / tokens
assert last["tokens"] == tokens and abs(last["mean_loss"] - mean) <= 1e-12 * mean, last
for kind in kinds:
    got, _ = losses(kind)
    want = single[-1:] if kind == "cp" else single
    assert len(got) == len(want), (kind, got)
    d = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    assert d <= 1e-6, f"{name} {kind}: {got} vs single {want}: {d:.2e} relative"
print(f"{name}: {len(single)} sequences (T {[n - 1 for n in ref['lengths']]}), largest relative "
      f"difference from transformers {ref['transformers']} fp32 {worst32:.1e}, from fp64 "
      f"{worst64:.1e}; {', '.join(kinds)} (cp 2) agree with single within 1e-6")
PY
done
# tp that does not divide the heads, and tp on a qwen3_next with MoE layers: one line, exit 2.
refused() {  # refused EXPECTED_TEXT LAUNCH...
  local want=$1; shift
  set +e
  "$@" > "$work/refused.out" 2> "$work/refused.err"
  local rc=$?
  set -e
  [ "$rc" -ne 0 ] && grep -qF -- "$want" "$work/refused.err" && [ ! -s "$work/refused.out" ] ||
    { echo "FAIL: $*: exit $rc, want a refusal with '$want'"; cat "$work/refused.err"; exit 1; }
}
dir="$FIX/qwen3_5_vl"
refused "--tp 2 does not divide the model's attention KV heads (1)" \
  "$MPIEXEC" -n 2 "$HLP_EVAL" --model-config "$dir" --init-from "$dir" --threads 1 --strategy tp \
  --tokens "$dir/tokens.txt"
mkdir -p "$work/onekey"
/usr/bin/python3 -c "import json; c = json.load(open('$FIX/qwen3_5_text_a/config.json')); c['linear_num_key_heads'] = 1; json.dump(c, open('$work/onekey/config.json', 'w'))"
refused "--tp 2 does not divide the model's gated-delta key heads (1)" \
  "$MPIEXEC" -n 2 "$HLP_EVAL" --model-config "$work/onekey" --threads 1 --strategy tp \
  --tokens "$FIX/qwen3_5_text_a/tokens.txt"
dir="$FIX/qwen3_next_moe_a"
refused "--tp does not split mixture-of-experts layers" \
  "$MPIEXEC" -n 2 "$HLP_EVAL" --model-config "$dir" --init-from "$dir" --threads 1 --strategy tp \
  --tokens "$dir/tokens.txt"
echo "ok: tp 2 with 1 KV head or 1 key head, and tp on MoE layers, refused with one line"
# Broken configs: one line naming the problem, exit 2, before anything is allocated.
badcfg_of() {  # badcfg_of FIXTURE EXPECTED_TEXT PYTHON_EDIT (of the dict c): FIXTURE's config, edited
  mkdir -p "$work/badcfg"
  /usr/bin/python3 -c "import json, sys; c = json.load(open('$FIX/$1/config.json')); $3; json.dump(c, open('$work/badcfg/config.json', 'w'))"
  set +e
  "$HLP_EVAL" --model-config "$work/badcfg" --threads 1 --tokens "$FIX/$1/tokens.txt" \
    > "$work/badcfg.out" 2> "$work/badcfg.err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] && [ "$(grep -c 'error:' "$work/badcfg.err")" -eq 1 ] &&
    grep -qF -- "$2" "$work/badcfg.err" && [ ! -s "$work/badcfg.out" ] ||
    { echo "FAIL: $1 config edit '$3': exit $rc, want one line with '$2'"; cat "$work/badcfg.err"; exit 1; }
}
badcfg() { badcfg_of qwen3_5_text_a "$@"; }
badcfg "layer_types has 3 entries but num_hidden_layers is 4" "c['layer_types'] = c['layer_types'][:3]"
badcfg "layer_types[1] = 'sliding_attention' is not implemented" "c['layer_types'][1] = 'sliding_attention'"
badcfg "gdn_key_heads 2 does not divide gdn_heads 3" "c['linear_num_value_heads'] = 3"
badcfg "attn_kv_heads 3 does not divide attn_heads 4" "c['num_key_value_heads'] = 3"
badcfg "field 'moe_intermediate_size' is not implemented" "c['moe_intermediate_size'] = 32"
badcfg "attention_bias' = true is not implemented" "c['attention_bias'] = True"
badcfg "field 'mamba_ssm_dtype' = \"bfloat16\" is not implemented" "c['mamba_ssm_dtype'] = 'bfloat16'"
badcfg "field 'mlp_only_layers' = [0] is not implemented" "c['mlp_only_layers'] = [0]"
echo "ok: broken Qwen3.5 configs refused (exit 2, one line naming the field)"
# Broken Qwen3-Next MoE configs likewise (the moe_a fixture's config, edited).
badmoe() { badcfg_of qwen3_next_moe_a "$@"; }
badmoe "moe_top_k (num_experts_per_tok) 9 must be between 1 and the 8 experts" "c['num_experts_per_tok'] = 9"
badmoe "field 'router_aux_loss_coef' = -0.5 must be a finite number >= 0" "c['router_aux_loss_coef'] = -0.5"
badmoe "field 'moe_intermediate_size' = 0 must be a whole number" "c['moe_intermediate_size'] = 0"
badmoe "field 'norm_topk_prob' has the wrong type" "c['norm_topk_prob'] = 'yes'"
echo "ok: broken Qwen3-Next MoE configs refused (exit 2, one line naming the field)"
# The published checkpoints' extra fields (Qwen/Qwen3.5-*: attn_output_gate, mamba_ssm_dtype,
# mlp_only_layers, the multi-token-prediction head's) read, and the same loss.
mkdir -p "$work/published"
cp "$FIX/qwen3_5_text_a/model.safetensors" "$work/published/"
/usr/bin/python3 -c "import json; c = json.load(open('$FIX/qwen3_5_text_a/config.json')); c.update(attn_output_gate=True, mamba_ssm_dtype='float32', mlp_only_layers=[], mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, full_attention_interval=4); json.dump(c, open('$work/published/config.json', 'w'))"
want=$(tail -n 1 "$work/qwen3_5_text_a.single.jsonl")
got=$("$HLP_EVAL" --model-config "$work/published" --init-from "$work/published" --threads 1 \
      --tokens "$FIX/qwen3_5_text_a/tokens.txt" 2>/dev/null | tail -n 1)
[ "$got" = "$want" ] || { echo "FAIL: with the published fields: $got, want $want"; exit 1; }
echo "ok: the published checkpoints' extra config fields are read (same loss)"
# --sequences: the corpus through hlp-train's loader (the tiny preset, bytes), the same numbers
# alone and split by cp 2 and pp 2.
for how in single cp pp; do
  launch=("$HLP_EVAL"); [ "$how" = single ] || launch=("$MPIEXEC" -n 2 "$HLP_EVAL" --strategy "$how")
  "${launch[@]}" --model tiny --sequences 3 --seq-len 64 --threads 1 > "$work/corpus.$how.jsonl"
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
rows = {h: [json.loads(l) for l in open(f"{sys.argv[1]}/corpus.{h}.jsonl")] for h in ("single", "cp", "pp")}
single = rows["single"]
assert len(single) == 4 and single[-1]["sequences"] == 3 and single[-1]["tokens"] == 192, single
for h in ("cp", "pp"):
    for a, b in zip(rows[h], single):
        key = "loss" if "loss" in b else "mean_loss"
        assert abs(a[key] - b[key]) <= 1e-6 * abs(b[key]), (h, a, b)
print("ok: --sequences 3 of the corpus: single, cp 2, pp 2 agree within 1e-6")
PY

# Bad input: one line naming it, exit 2, nothing printed on stdout.
dir="$FIX/qwen2_v5"
bad() {  # bad EXPECTED_TEXT TOKENS_LINE
  printf '%s\n' "$2" > "$work/bad.txt"
  set +e
  "$HLP_EVAL" --model-config "$dir" --init-from "$dir" --threads 1 --tokens "$work/bad.txt" \
    > "$work/bad.out" 2> "$work/bad.err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: '$2': exit $rc, want 2"; cat "$work/bad.err"; exit 1; }
  [ "$(grep -c 'hlp-eval: error:' "$work/bad.err")" -eq 1 ] && grep -qF -- "$1" "$work/bad.err" \
    || { echo "FAIL: '$2': want one line with '$1'"; cat "$work/bad.err"; exit 1; }
  [ ! -s "$work/bad.out" ] || { echo "FAIL: '$2' printed results"; exit 1; }
}
bad "is outside the model's vocabulary [0, 384)" "1 2 384"
bad "'x7' is not a token id" "1 x7 3"
bad "a sequence needs 2 or more" "5"
echo "ok: bad token files refused (exit 2, one line)"
echo "ok"
