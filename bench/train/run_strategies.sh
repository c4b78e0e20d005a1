#!/usr/bin/env bash
# Strategy benchmark of issue 6, in one run:
#   hlp-train single (1 rank, the baseline), ddp, fsdp, fsdp2 (2 ranks) on the same LoRA
#   configuration, then the PyTorch DDP peer (bench/peer/peer_ddp.py: same architecture, same
#   initial weights and batches exported by hlp-export-init, gloo, 2 processes), then one table
#   (bench/peer/compare.py): tokens/s global and per device, peak / param / grad / optimizer
#   bytes, exposed-communication fraction, HLP ddp / PyTorch DDP throughput ratio, and the two
#   loss curves side by side with their max relative difference.
#
# usage: bench/train/run_strategies.sh [BUILD_DIR] [OUT_DIR]
#   BUILD_DIR  holds bin/hlp-train and bin/hlp-export-init (default: <repo>/build)
#   OUT_DIR    result files, peer JSON, summary.json, loss_curves.csv (default: BUILD_DIR/bench-train)
# Environment overrides (defaults = the configuration the README numbers use):
#   HLP_BENCH_MODEL=small HLP_BENCH_SEQ=256 HLP_BENCH_MICRO=2 HLP_BENCH_GLOBAL=8 HLP_BENCH_STEPS=5
#   HLP_BENCH_PAIRS=2: hlp ddp and the peer run alternately this many times each (ddp, peer, ddp,
#     peer): on a shared machine the load drifts, and interleaving gives both the same drift
#   HLP_BENCH_RANK=8 HLP_BENCH_ALPHA=16 HLP_BENCH_TOKENIZER=<repo>/datasets/sample/spm.model
#   HLP_BENCH_STRATEGIES="single ddp fsdp fsdp2" HLP_BENCH_PEER=1 MPIEXEC=BUILD_DIR/hlp-mpiexec PYTHON=/usr/bin/python3
#   HLP_BENCH_CPU_CALIBRATE=1: also run hlp ddp and the peer for 1 step (CPU seconds per step
#     without start-up = difference to the full runs)
#   HLP_BENCH_LOSS_CHECK=1: exit 1 unless the HLP ddp and peer loss curves agree within 1e-4
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-train}
MODEL=${HLP_BENCH_MODEL:-small}
SEQ=${HLP_BENCH_SEQ:-256}
MICRO=${HLP_BENCH_MICRO:-2}
GLOBAL=${HLP_BENCH_GLOBAL:-8}
STEPS=${HLP_BENCH_STEPS:-5}
PAIRS=${HLP_BENCH_PAIRS:-2}
RANK=${HLP_BENCH_RANK:-8}
ALPHA=${HLP_BENCH_ALPHA:-16}
TOKENIZER=${HLP_BENCH_TOKENIZER:-$SRC/datasets/sample/spm.model}
DATA=${HLP_BENCH_DATA:-$SRC/datasets/sample/corpus.txt}
STRATEGIES=${HLP_BENCH_STRATEGIES:-single ddp fsdp fsdp2}
PEER=${HLP_BENCH_PEER:-1}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}  # the build's launcher, whatever the alternatives say
PYTHON=${PYTHON:-/usr/bin/python3}
SEED=1234

for exe in hlp-train hlp-export-init; do
  [[ -x $BUILD/bin/$exe ]] || { echo "error: $BUILD/bin/$exe not found; build it: cmake --build $BUILD --target $exe" >&2; exit 2; }
done
mkdir -p "$OUT"
rm -f "$OUT"/*.h5 "$OUT"/*.json

# Identical on both sides: model, LoRA, data, optimizer, schedule, clipping, 1 thread a rank.
COMMON=(--model "$MODEL" --tokenizer "$TOKENIZER" --data "$DATA" --seq-len "$SEQ"
        --micro-batch "$MICRO" --global-batch "$GLOBAL"
        --lora-rank "$RANK" --lora-alpha "$ALPHA" --seed "$SEED" --threads 1
        --lr 1e-3 --warmup-steps 2 --min-lr-ratio 0.1 --weight-decay 0 --grad-clip 1)

echo "[bench-train] $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; model $MODEL T=$SEQ B=$MICRO G=$GLOBAL steps=$STEPS LoRA r=$RANK alpha=$ALPHA -> $OUT"
t0=$SECONDS
run_peer() {  # $1: output suffix ("" or ".rK"), $2: steps (default $STEPS)
  echo "[bench-train] PyTorch DDP peer on 2 processes"
  "$PYTHON" "$SRC/bench/peer/cpu_time.py" "$OUT/peer_ddp$1.cpu.json" -- \
    timeout "${HLP_BENCH_PEER_TIMEOUT:-900}" "$PYTHON" "$SRC/bench/peer/peer_ddp.py" --export-dir "$OUT/export" --out "$OUT/peer_ddp$1.json" \
    --steps "${2:-$STEPS}" --world 2 --threads 1 --micro-batch "$MICRO" --lr 1e-3 --warmup-steps 2 \
    --min-lr-ratio 0.1 --weight-decay 0 --grad-clip 1 > "$OUT/peer_ddp$1.log" 2>&1 \
    || { echo "error: the PyTorch peer failed; see $OUT/peer_ddp$1.log" >&2; tail -5 "$OUT/peer_ddp$1.log" >&2; exit 1; }
  grep -E 'step' "$OUT/peer_ddp$1.log" | tail -1 || true
}
run_hlp() {  # $1: strategy, $2: output suffix, $3: steps (default $STEPS)
  local n=2; [[ $1 == single ]] && n=1
  echo "[bench-train] hlp-train --strategy $1 on $n rank(s)"
  "$PYTHON" "$SRC/bench/peer/cpu_time.py" "$OUT/$1$2.cpu.json" -- \
    "$MPIEXEC" -n "$n" "$BUILD/bin/hlp-train" --strategy "$1" "${COMMON[@]}" --steps "${3:-$STEPS}" --out "$OUT/$1$2.h5" \
    > "$OUT/$1$2.log" 2>&1 || { echo "error: hlp-train $1 failed; see $OUT/$1$2.log" >&2; tail -5 "$OUT/$1$2.log" >&2; exit 1; }
  grep -E 'step' "$OUT/$1$2.log" | tail -1 || true
}
if [[ $PEER == 1 ]]; then
  echo "[bench-train] hlp-export-init: initial weights + $STEPS global batches for the peer"
  "$BUILD/bin/hlp-export-init" --model "$MODEL" --tokenizer "$TOKENIZER" --data "$DATA" \
    --seq-len "$SEQ" --global-batch "$GLOBAL" --lora-rank "$RANK" --lora-alpha "$ALPHA" \
    --seed "$SEED" --batches "$STEPS" --out-dir "$OUT/export"
fi
for s in $STRATEGIES; do
  if [[ $s == ddp && $PEER == 1 ]]; then
    for ((k = 1; k <= PAIRS; ++k)); do
      suffix=""; ((k > 1)) && suffix=".r$k"
      run_hlp ddp "$suffix"
      run_peer "$suffix"
    done
    # CPU calibration: the same jobs for 1 step; (CPU of a full run - CPU of this) / (steps - 1)
    # is the CPU per step without start-up (process start, init, export loading).
    if [[ ${HLP_BENCH_CPU_CALIBRATE:-1} == 1 && $STEPS -gt 1 ]]; then
      run_hlp ddp ".steps1" 1
      run_peer ".steps1" 1
    fi
  else
    run_hlp "$s" ""
  fi
done

CHECK=(); [[ ${HLP_BENCH_LOSS_CHECK:-0} == 1 ]] && CHECK=(--require-agreement)
"$PYTHON" "$SRC/bench/peer/compare.py" "$OUT" "${CHECK[@]}"
echo "[bench-train] done in $((SECONDS - t0)) s; load now $(cut -d' ' -f1-3 /proc/loadavg)"
