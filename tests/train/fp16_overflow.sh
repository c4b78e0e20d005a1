#!/usr/bin/env bash
# --precision fp16 with a forced overflow, end to end: 2 real ranks (ddp) start at loss scale
# 2^24, so the first updates overflow. hlp-train must exit 0, print the skips, and record per
# step loss_scale (halving while skipped) and step_skipped = 1 in the result file; hlp-analyze's
# CSV and Markdown tables then show the skipped steps; a resumed fp16 run continues bit for bit.
# Usage: fp16_overflow.sh HLP_TRAIN HLP_ANALYZE
set -u
HLP_TRAIN=$1
HLP_ANALYZE=$2
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
PY=/usr/bin/python3
dir=$(mktemp -d /tmp/hlp_fp16.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy ddp --model tiny --seq-len 32 --micro-batch 2 \
    --global-batch 8 --steps 14 --threads 1 --loader-threads 1 --precision fp16 \
    --loss-scale-init 16777216 --lr 5e-3 --eval-every 1 --out "$dir/fp16.h5" > "$dir/out.log" 2>&1 \
  || { cat "$dir/out.log"; fail "fp16 run with an overflowing loss scale exited non-zero"; }
cat "$dir/out.log"
grep -q "loss scale 1.67772e+07 SKIPPED" "$dir/out.log" || fail "progress line does not show the skip"
skipped=$(sed -n 's/^\[hlp-train\] fp16 loss scaling: \([0-9]*\) of 14 steps skipped.*/\1/p' "$dir/out.log")
[ -n "$skipped" ] && [ "$skipped" -ge 1 ] && [ "$skipped" -lt 14 ] \
  || fail "want some but not all of the 14 steps skipped (got '$skipped')"

"$PY" - "$dir/fp16.h5" "$skipped" <<'PYEOF' || fail "result file"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
n = int(sys.argv[2])
scale = f["/steps/loss_scale"][()]      # [ranks, steps]
skip = f["/steps/step_skipped"][()]
loss = f["/steps/loss"][()]
assert f.attrs["complete"] == 1, "run not complete"
assert (scale == scale[0]).all() and (skip == skip[0]).all(), "ranks disagree"
scale, skip = scale[0], skip[0]
lead = int(np.argmin(skip)) if (skip == 0).any() else len(skip)
assert 1 <= lead < len(skip), f"step_skipped {skip}: want leading skips, then training"
assert skip.sum() == n, f"{skip.sum()} skipped in the file, {n} in the log"
assert scale[0] == 2.0 ** 24, scale
# x 0.5 after each skipped step, unchanged after a clean one (growth needs 2000 clean steps)
want = scale[0] * np.concatenate([[1.0], np.cumprod(np.where(skip[:-1] > 0, 0.5, 1.0))])
assert (scale == want).all(), f"loss_scale {scale}, want {want}"
assert not np.isfinite(f["/steps/grad_norm"][0][skip > 0]).any(), "skipped step with a finite norm"
assert np.isfinite(f["/steps/grad_norm"][0][skip == 0]).all(), "clean step with a non-finite norm"
assert np.isfinite(loss).all(), "a loss is not finite"
ev = f["/steps/eval_loss"][0]  # held-out loss after each step: moves only on clean steps
assert (ev[1:][skip[1:] > 0] == ev[:-1][skip[1:] > 0]).all(), f"a skipped step moved the weights: {ev}"
assert ev[-1] < ev[lead - 1], f"held-out loss did not go down after the skips: {ev}"
print(f"ok: {n} steps skipped ({lead} leading), loss_scale {scale[0]:g} -> {scale[-1]:g}, "
      f"held-out loss {ev[lead - 1]:.4f} -> {ev[-1]:.4f}")
PYEOF

"$HLP_ANALYZE" table "$dir" --csv --warmup 0 > "$dir/table.csv" || fail "hlp-analyze table --csv"
"$PY" - "$dir/table.csv" "$skipped" <<'PYEOF' || fail "analysis CSV"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1, rows
assert rows[0]["precision"] == "fp16", rows[0]["precision"]
assert float(rows[0]["skipped_steps"]) == float(sys.argv[2]), rows[0]["skipped_steps"]
print("ok: CSV skipped_steps", rows[0]["skipped_steps"])
PYEOF
"$HLP_ANALYZE" table "$dir" --warmup 0 > "$dir/table.md" || fail "hlp-analyze table"
grep -q "skipped steps" "$dir/table.md" || { cat "$dir/table.md"; fail "Markdown lacks 'skipped steps'"; }

# Resume: the loss scale, its clean-step count and AdamW's step count (skipped steps do not
# advance it) are in the checkpoint, so a run resumed after step 4 (all 4 skipped) continues
# exactly as the uninterrupted one.
common=(--strategy ddp --model tiny --seq-len 32 --micro-batch 2 --global-batch 8 --steps 10
        --threads 1 --loader-threads 1 --precision fp16 --loss-scale-init 16777216 --lr 5e-3
        --trace false --checkpoint-dir "$dir/ck")
"$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --checkpoint-every 4 --out "$dir/a.h5" \
    > "$dir/a.log" 2>&1 || { cat "$dir/a.log"; fail "fp16 run with checkpoints"; }
grep -q "^loss_scale 1048576$" "$dir/ck/step_4/rank_0.txt" \
  || { cat "$dir/ck/step_4/rank_0.txt"; fail "checkpoint lacks the halved loss scale"; }
echo step_4 > "$dir/ck/latest"
"$MPIEXEC" -n 2 "$HLP_TRAIN" "${common[@]}" --resume --out "$dir/b.h5" > "$dir/b.log" 2>&1 \
  || { cat "$dir/b.log"; fail "fp16 resume"; }
"$PY" - "$dir/a.h5" "$dir/b.h5" <<'PYEOF' || fail "resumed fp16 run differs"
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
for m in ("loss", "loss_scale", "step_skipped"):
    assert (a["/steps/" + m][0][4:] == b["/steps/" + m][0]).all(), (m, a["/steps/" + m][0], b["/steps/" + m][0])
print("ok: resumed at step 4, losses and loss scales equal the uninterrupted run's bit for bit")
PYEOF
echo "PASS"
