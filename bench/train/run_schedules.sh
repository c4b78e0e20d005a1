#!/usr/bin/env bash
# Pipeline schedules against their theory (issue 26), from real result files in one run:
#   hlp-train --strategy pp on P ranks (default 2; small model, T 128, micro-batch 1, --trace)
#   for every schedule (gpipe, 1f1b, interleaved V = 2, zb-h1) at m = 4 and 8 micro-batches,
#   with LoRA (r 8) and with full finetuning (--lora-rank 0). Then one table: the bubble
#   measured from the trace against the schedule's own theory two ways: the closed form
#   (docs/strategies.md; equal stages and chunks; zero bubble's at the run's mean F, B and W) and
#   the schedule's table on the ideal clock at the run's measured per-chunk F, B, W
#   (bubble_fraction_simulated: the stages as unbalanced as they were, no message latency), and
#   the replay of every step's own span durations through the tables (bubble_fraction_replay:
#   the duration jitter too; trace / replay is what message latency adds), and the step theory:
#   the tables on the ideal clock at each step's own mean F, B, W per chunk
#   (bubble_fraction_step_theory: the stages as unequal as they were in that step, every action
#   of a chunk equal; the criterion the benchmark is judged by, within 10 %); the measured W share
#   of the backward, tokens/s, and each stage's activation peak measured against its prediction.
#
# usage: bench/train/run_schedules.sh [BUILD_DIR] [OUT_DIR] [RANKS]
#   BUILD_DIR  holds bin/hlp-train and bin/hlp-analyze (default: <repo>/build)
#   OUT_DIR    result files and table.md (default: BUILD_DIR/bench-schedules)
#   RANKS      pipeline size (default 2: one rank per core on a 2-core machine)
# Environment: HLP_BENCH_STEPS=6 HLP_BENCH_SEQ=128 HLP_BENCH_SPLIT=balanced (the closed forms
# assume equal stages: balanced evens the modelled cost of the stages, or of the p V chunks, as
# far as whole blocks allow) HLP_BENCH_PATTERN= (small's own pattern; GGGGGGGGGGGG: equal blocks)
# HLP_BENCH_TABLE_ONLY=1 (the table again from OUT_DIR's files) MPIEXEC=BUILD_DIR/hlp-mpiexec PYTHON=/usr/bin/python3
# One compute thread and one OpenBLAS thread per rank (OPENBLAS_NUM_THREADS=1 is set here).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-schedules}
P=${3:-2}
STEPS=${HLP_BENCH_STEPS:-6}
SEQ=${HLP_BENCH_SEQ:-128}
SPLIT=${HLP_BENCH_SPLIT:-balanced}
PATTERN=${HLP_BENCH_PATTERN:-}  # e.g. GGGGGGGGGGGG: equal blocks, so equal stages and chunks
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}  # the build's launcher, whatever the alternatives say
PYTHON=${PYTHON:-/usr/bin/python3}
export OPENBLAS_NUM_THREADS=1

for exe in hlp-train hlp-analyze; do
  [[ -x $BUILD/bin/$exe ]] || { echo "error: $BUILD/bin/$exe not found; build it: cmake --build $BUILD --target $exe" >&2; exit 2; }
done
mkdir -p "$OUT"
TABLE_ONLY=${HLP_BENCH_TABLE_ONLY:-0}  # 1: no runs, the table of the files already in OUT_DIR
[[ $TABLE_ONLY == 1 ]] || rm -f "$OUT"/*.h5

COMMON=(--strategy pp --pp "$P" --model small --data "$SRC/datasets/sample/corpus.txt"
        --seq-len "$SEQ" --micro-batch 1 --threads 1 --loader-threads 1 --steps "$STEPS"
        --seed 1234 --pp-split "$SPLIT" --trace)
[[ -n $PATTERN ]] && COMMON+=(--pattern "$PATTERN")
[[ $TABLE_ONLY == 1 ]] || echo "[bench-schedules] $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; pp $P, T $SEQ, split $SPLIT, pattern ${PATTERN:-small}, $STEPS steps, 1 thread + 1 OpenBLAS thread per rank -> $OUT"
for tune in lora full; do
  [[ $TABLE_ONLY == 1 ]] && break
  if [[ $tune == lora ]]; then ft=(--lora-rank 8 --lora-alpha 16); else ft=(--lora-rank 0); fi
  for m in 4 8; do
    for sched in gpipe 1f1b interleaved zb-h1; do
      extra=()
      [[ $sched == interleaved ]] && extra=(--pp-virtual 2)
      name=${tune}_${sched}_m$m
      echo "[bench-schedules] $name"
      "$MPIEXEC" -n "$P" "$BUILD/bin/hlp-train" "${COMMON[@]}" "${ft[@]}" --global-batch "$m" \
        --pp-schedule "$sched" "${extra[@]}" --out "$OUT/$name.h5" > "$OUT/$name.log" 2>&1 \
        || { echo "error: hlp-train $name failed; see $OUT/$name.log" >&2; tail -5 "$OUT/$name.log" >&2; exit 1; }
    done
  done
done

"$BUILD/bin/hlp-analyze" table "$OUT" --warmup 1 --csv > "$OUT/table.csv"
"$PYTHON" - "$OUT" <<'PY' | tee "$OUT/table.md"
import csv, glob, os, sys
import h5py, numpy as np
out = sys.argv[1]
rows = {}
with open(os.path.join(out, "table.csv")) as f:
    for r in csv.DictReader(f):
        rows[(r["lora_rank"], r["pp_schedule"], r["micro_batches"])] = r
print("| finetune | schedule | m | bubble trace % | closed form % | trace / closed form | step theory % | trace / step theory | simulated % | trace / simulated | replay % | trace / replay | W / (B+W) | tokens/s | activation peak MiB (max stage) | predicted MiB | measured / predicted (worst stage) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
within = {"closed form": 0, "step theory": 0, "simulated": 0, "replay": 0}
cells = 0
for path in sorted(glob.glob(os.path.join(out, "*.h5"))):
    name = os.path.basename(path)[:-3]
    tune, rest = name.split("_", 1)
    sched, m = rest.rsplit("_m", 1)
    with h5py.File(path, "r") as f:
        steps = f["steps"]
        measured = np.asarray(steps["activation_bytes"][()], dtype=float)[:, 1:]
        predicted = np.asarray(steps["activation_predicted_bytes"][()], dtype=float)[:, 1:]
        ratio = measured.max(axis=1) / predicted.max(axis=1)  # per rank = per stage
        worst = ratio[np.argmax(np.abs(ratio - 1))]
        # W share: trace spans of backward_weight over all backward spans (zb-h1 only)
        w = b = 0.0
        for rank in f["trace"]:
            ev = f["trace"][rank][()]
            names = [n.decode() if isinstance(n, bytes) else n for n in ev["name"]]
            d = ev["end_s"] - ev["start_s"]
            for n_, d_ in zip(names, d):
                if n_ == "backward_weight": w += d_
                if n_ in ("backward_weight", "backward_input", "backward"): b += d_
    r = next(v for k, v in rows.items() if k[1] == sched and k[2] == m and (k[0] == "0") == (tune == "full"))
    bt, th = float(r["bubble_fraction_trace"]), float(r["bubble_fraction_theory"])
    sm, rp = float(r["bubble_fraction_simulated"]), float(r["bubble_fraction_replay"])
    st = float(r["bubble_fraction_step_theory"])
    cells += 1
    for key, ref in (("closed form", th), ("step theory", st), ("simulated", sm), ("replay", rp)):
        within[key] += abs(bt / ref - 1) <= 0.10
    print(f"| {tune} | {sched} | {m} | {100*bt:.1f} | {100*th:.1f} | {bt/th:.3f} | {100*st:.1f} | {bt/st:.3f} | "
          f"{100*sm:.1f} | {bt/sm:.3f} | "
          f"{100*rp:.1f} | {bt/rp:.3f} | "
          f"{(w / b if sched == 'zb-h1' and b > 0 else float('nan')):.3f} | {float(r['tokens_per_s_median']):.0f} | "
          f"{measured.max() / 2**20:.1f} | {predicted.max() / 2**20:.1f} | {worst:.3f} |")
print()
print("trace within 10 % of: " + ", ".join(f"{k} {v} of {cells}" for k, v in within.items()))
PY
