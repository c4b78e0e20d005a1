#!/usr/bin/env bash
# Pipeline benchmark of issue 7 from real result files, in one run:
#   hlp-train --strategy pp on P ranks (small model, LoRA r8, T 128, micro-batch 1, 1f1b) for
#   m = 1, 2, 4, 8 micro-batches with the uniform split, then m = 4 with uniform, balanced and
#   profiled splits, each on the small pattern and on a Jet-like 28-layer pattern; then
#   `hlp-analyze table` (tokens/s, peak bytes, bubble in-process / from the trace / theory) and
#   the stage balance read from each file's /pipeline (max/mean of the measured stage compute,
#   wall clock and thread CPU, against the split's modelled max/mean).
#
# usage: bench/train/run_pipeline.sh [BUILD_DIR] [OUT_DIR] [RANKS...]
#   BUILD_DIR  holds bin/hlp-train and bin/hlp-analyze (default: <repo>/build)
#   OUT_DIR    result files and table.md (default: BUILD_DIR/bench-pipeline)
#   RANKS      pipeline sizes to run (default: 2 4)
# Environment: HLP_BENCH_STEPS=6 MPIEXEC=BUILD_DIR/hlp-mpiexec PYTHON=/usr/bin/python3
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-pipeline}
shift $(( $# < 2 ? $# : 2 ))
RANKS=("$@")
[[ ${#RANKS[@]} -gt 0 ]] || RANKS=(2 4)
STEPS=${HLP_BENCH_STEPS:-6}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}  # the build's launcher, whatever the alternatives say
PYTHON=${PYTHON:-/usr/bin/python3}
JET_PATTERN=GGGGGGGGGGGGGGAGGGGASSGGGGGG

for exe in hlp-train hlp-analyze; do
  [[ -x $BUILD/bin/$exe ]] || { echo "error: $BUILD/bin/$exe not found; build it: cmake --build $BUILD --target $exe" >&2; exit 2; }
done
mkdir -p "$OUT"
rm -f "$OUT"/*.h5

COMMON=(--strategy pp --model small --tokenizer "$SRC/datasets/sample/spm.model"
        --data "$SRC/datasets/sample/corpus.txt" --seq-len 128 --micro-batch 1
        --lora-rank 8 --lora-alpha 16 --threads 1 --steps "$STEPS" --seed 1234 --pp-schedule 1f1b)
echo "[bench-pipeline] $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; pp ${RANKS[*]}, $STEPS steps -> $OUT"
run() {  # $1 ranks, $2 name, rest: extra hlp-train options
  local p=$1 name=$2
  shift 2
  echo "[bench-pipeline] pp$p $name"
  "$MPIEXEC" -n "$p" "$BUILD/bin/hlp-train" "${COMMON[@]}" "$@" --out "$OUT/pp${p}_$name.h5" \
    > "$OUT/pp${p}_$name.log" 2>&1 \
    || { echo "error: hlp-train pp$p $name failed; see $OUT/pp${p}_$name.log" >&2; tail -5 "$OUT/pp${p}_$name.log" >&2; exit 1; }
}
for p in "${RANKS[@]}"; do
  for m in 1 2 4 8; do run "$p" "uniform_m$m" --global-batch "$m" --pp-split uniform; done
  for split in uniform balanced profiled; do
    run "$p" "small_${split}_m4" --global-batch 4 --pp-split "$split"
    run "$p" "jet_${split}_m4" --global-batch 4 --pp-split "$split" --pattern "$JET_PATTERN"
  done
done

"$BUILD/bin/hlp-analyze" table "$OUT" --warmup 1 > "$OUT/table.md"
cat "$OUT/table.md"
echo
echo "## Stage balance (max/mean over stages of the per-step means after the first step)"
"$PYTHON" - "$OUT" <<'EOF'
import glob, os, sys
import h5py
print("| file | split | first layers | wall | thread CPU | model |")
print("|---|---|---|---|---|---|")
def mm(v):
    v = list(v)
    return max(v) / (sum(v) / len(v)) if v and sum(v) > 0 else float("nan")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.h5"))):
    with h5py.File(path, "r") as f:
        p = f["pipeline"].attrs
        split = p["split"].decode() if isinstance(p["split"], bytes) else p["split"]
        cpu = p["stage_cpu_measured_s"] if "stage_cpu_measured_s" in p else []
        print(f"| {os.path.basename(path)} | {split} | {list(p['stage_first_layer'])} | "
              f"{mm(p['stage_cost_measured_s']):.3f} | {mm(cpu):.3f} | {mm(p['stage_cost']):.3f} |")
EOF
