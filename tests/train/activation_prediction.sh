#!/usr/bin/env bash
# hlp-train's activation prediction (src/train/activation_model.h) against the measured
# activation_bytes of real runs of `small` (issue #15). The probe measures each layer kind at
# T = 128 and 256 (384 too for naive attention) and extrapolates, so T = 1024 is a 4x
# extrapolation. Usage: activation_prediction.sh HLP_TRAIN CASE
#   single   1 rank, blocked attention, checkpointing off and on, and naive attention
#   ranks    ddp (checkpointing), pp (1F1B: stage 0 holds 2 micro-batches, stage 1 one),
#            fsdp2 and fsdp (their gathered units; flat fsdp's frozen weights train)
#   tp       tensor parallelism is not modelled: the prediction is NaN, not a made-up number
set -u
HLP_TRAIN=$1
CASE=$2
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
PY=/usr/bin/python3
dir=$(mktemp -d /tmp/hlp_activation_${CASE}.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model small --seq-len 1024 --micro-batch 1 --steps 2 --threads 1 --loader-threads 1
        --trace false)

# check FILE LOW HIGH: every rank's measured / predicted activation bytes in [LOW, HIGH]
check() {
  "$PY" - "$@" <<'PYEOF'
import sys, h5py, numpy as np
path, low, high = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
with h5py.File(path, "r") as f:
    steps = f["steps"]
    measured = np.asarray(steps["activation_bytes"][()], dtype=float)
    predicted = np.asarray(steps["activation_predicted_bytes"][()], dtype=float)
    kinds = f["model"].attrs["activation_kinds"]
    kinds = kinds.decode() if isinstance(kinds, bytes) else str(kinds)
    if not kinds.endswith("head"):
        sys.exit(f"{path}: /model activation_kinds = {kinds!r}")
ratio = measured / predicted
print(f"{path}: measured MiB {np.round(measured[:, -1] / 2**20, 1)}, predicted MiB "
      f"{np.round(predicted[:, -1] / 2**20, 1)}, ratio {np.round(ratio[:, -1], 3)}")
if not np.all(np.isfinite(ratio)) or ratio.min() < low or ratio.max() > high:
    sys.exit(f"measured / predicted outside [{low}, {high}]")
PYEOF
}

case "$CASE" in
single)
  for ck in false true; do
    "$HLP_TRAIN" "${common[@]}" --strategy single --global-batch 1 --activation-checkpointing $ck \
        --out "$dir/single_$ck.h5" > "$dir/single_$ck.log" 2>&1 || { cat "$dir/single_$ck.log"; fail "single ckpt $ck"; }
    grep -q "activation probe" "$dir/single_$ck.log" || fail "no activation probe line"
    check "$dir/single_$ck.h5" 0.9 1.1 || fail "single, checkpointing $ck"
  done
  "$HLP_TRAIN" "${common[@]}" --strategy single --global-batch 1 --attn-impl naive \
      --out "$dir/naive.h5" > "$dir/naive.log" 2>&1 || { cat "$dir/naive.log"; fail "naive"; }
  check "$dir/naive.h5" 0.9 1.1 || fail "single, naive attention (quadratic fit)"
  ;;
ranks)
  "$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --strategy ddp --global-batch 2 \
      --activation-checkpointing true --out "$dir/ddp.h5" > "$dir/ddp.log" 2>&1 \
      || { cat "$dir/ddp.log"; fail "ddp"; }
  check "$dir/ddp.h5" 0.9 1.1 || fail "ddp with checkpointing"
  "$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --strategy pp --global-batch 2 \
      --out "$dir/pp.h5" > "$dir/pp.log" 2>&1 || { cat "$dir/pp.log"; fail "pp"; }
  check "$dir/pp.h5" 0.9 1.1 || fail "pp (1F1B in-flight micro-batches per stage)"
  # fsdp2 / fsdp: the gathered units are part of the measured activation bytes
  # (Strategy::working_set_bytes); flat fsdp's frozen weights require grad, so autograd keeps
  # the inputs of their weight gradients too (probed with every parameter training)
  for s in fsdp2 fsdp; do
    "$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --strategy $s --global-batch 2 \
        --activation-checkpointing true --out "$dir/$s.h5" > "$dir/$s.log" 2>&1 \
        || { cat "$dir/$s.log"; fail "$s"; }
    check "$dir/$s.h5" 0.9 1.1 || fail "$s with checkpointing"
  done
  "$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --strategy fsdp --global-batch 2 \
      --out "$dir/fsdp_nockpt.h5" > "$dir/fsdp_nockpt.log" 2>&1 || { cat "$dir/fsdp_nockpt.log"; fail "fsdp"; }
  check "$dir/fsdp_nockpt.h5" 0.9 1.1 || fail "fsdp without checkpointing"
  ;;
schedules)
  # issue 26: interleaved (V = 2: two chunks per stage, composed over the schedule table) and
  # zb-h1 (alive from F to W; between B and W also the output gradients W needs, probed)
  for sched in "interleaved --pp-virtual 2" "zb-h1" "gpipe"; do
    name=${sched%% *}
    "$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --strategy pp --global-batch 4 --pp-schedule $sched \
        --out "$dir/$name.h5" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; fail "$name"; }
    check "$dir/$name.h5" 0.9 1.1 || fail "pp $name"
  done
  ;;
tp)
  # a tp rank probes its slice of the heads and the MLP (tp_rank_config); tp x pp composes the
  # stage's chunks as without tp
  "$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --strategy tp --global-batch 1 --lora-dropout 0 \
      --out "$dir/tp.h5" > "$dir/tp.log" 2>&1 || { cat "$dir/tp.log"; fail "tp"; }
  check "$dir/tp.h5" 0.9 1.1 || fail "tp 2"
  "$MPIEXEC" -n 4 "$HLP_TRAIN" "${common[@]}" --strategy pp --tp 2 --global-batch 2 \
      --lora-dropout 0 --out "$dir/tp_pp.h5" > "$dir/tp_pp.log" 2>&1 \
      || { cat "$dir/tp_pp.log"; fail "tp x pp"; }
  check "$dir/tp_pp.h5" 0.9 1.1 || fail "tp 2 x pp 2"
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "PASS: $CASE"
