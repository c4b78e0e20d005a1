#!/usr/bin/env bash
# hlp-plan's time model against measured CPU runs (issue 24): every strategy and mesh that two
# ranks allow (and the 1-rank reference), `small` at T = HLP_BENCH_SEQ, from real result files.
# hlp-train writes the planner's prediction for its own run into /model before the first step
# (plan_tokens_per_s: executed FLOPs at the planner's CPU efficiency of the sgemm peak the rank
# measured, alpha-beta links, the schedule's bubble; src/train/plan.h), and hlp-analyze puts it
# beside the measured median (column predicted_over_measured_tokens_per_s). No calibration: the
# table is the uncalibrated model.
#
# usage: bench/plan/run_plan_time.sh [BUILD_DIR] [OUT_DIR]
#   BUILD_DIR  holds bin/hlp-train and bin/hlp-analyze (default: <repo>/build)
#   OUT_DIR    result files and table.md (default: BUILD_DIR/bench-plan-time)
# Environment: HLP_BENCH_STEPS=6 HLP_BENCH_SEQ=512 HLP_BENCH_RANKS=2 MPIEXEC=BUILD_DIR/hlp-mpiexec
#   HLP_BENCH_TABLE_ONLY=1 (the table again from OUT_DIR's files)
# One compute thread and one OpenBLAS thread per rank (OPENBLAS_NUM_THREADS=1 is set here): two
# ranks are one rank per core of a 2-core machine.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-plan-time}
STEPS=${HLP_BENCH_STEPS:-6}
SEQ=${HLP_BENCH_SEQ:-512}
N=${HLP_BENCH_RANKS:-2}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}  # the build's launcher, whatever the alternatives say
export OPENBLAS_NUM_THREADS=1
mkdir -p "$OUT/results"
COMMON=(--model small --seq-len "$SEQ" --global-batch 8 --micro-batch 1 --lora-rank 8
        --lora-dropout 0 --threads 1 --loader-threads 1 --steps "$STEPS" --seed 3)
run() {  # name ranks options...
  local name=$1 ranks=$2; shift 2
  local out="$OUT/results/$name.h5"
  [ -n "${HLP_BENCH_TABLE_ONLY:-}" ] && return 0
  echo "[bench] $name ($ranks rank(s))"
  if [ "$ranks" = 1 ]; then "$BUILD/bin/hlp-train" "${COMMON[@]}" "$@" --out "$out" > "$OUT/$name.log" 2>&1
  else "$MPIEXEC" -n "$ranks" "$BUILD/bin/hlp-train" "${COMMON[@]}" "$@" --out "$out" > "$OUT/$name.log" 2>&1
  fi || { echo "[bench] $name failed: $(tail -1 "$OUT/$name.log")"; return 1; }
}
run single 1 --strategy single
run ddp "$N" --strategy ddp
run fsdp "$N" --strategy fsdp
run fsdp2 "$N" --strategy fsdp2
for s in gpipe 1f1b interleaved zb-h1; do run "pp-$s" "$N" --strategy pp --pp-schedule "$s" --pp-virtual $([ $s = interleaved ] && echo 2 || echo 1); done
run tp "$N" --strategy tp
run cp "$N" --strategy cp
run ddp-ckpt "$N" --strategy ddp --activation-checkpointing true
"$BUILD/bin/hlp-analyze" table "$OUT/results" --csv > "$OUT/table.csv"
/usr/bin/python3 - "$OUT/table.csv" <<'PY' | tee "$OUT/table.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| strategy | world | schedule | ckpt | measured tok/s | predicted tok/s | predicted / measured | peak predicted / measured |")
print("|---|---|---|---|---|---|---|---|")
worst = 0
for r in rows:
    ratio = float(r["predicted_over_measured_tokens_per_s"] or "nan")
    worst = max(worst, abs(ratio - 1))
    print(f"| {r['strategy']} | {r['world_size']} | {r['pp_schedule']} | {r['act_ckpt']} | "
          f"{float(r['tokens_per_s_median']):.0f} | {float(r['predicted_tokens_per_s']):.0f} | {ratio:.2f} | "
          f"{float(r['predicted_over_measured_peak']):.3f} |")
print(f"\nlargest |predicted / measured - 1| of tokens/s: {worst:.2f} ({len(rows)} configurations)")
PY
