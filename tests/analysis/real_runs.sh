#!/bin/bash
# ctest fixture: a results folder from REAL hlp-train runs (tiny: 4 steps, seq-len 32/64) of
# ddp, fsdp, fsdp2 (2 ranks), single (1 rank) and pp2 (micro-batches 1/2/4; uniform, params and
# balanced splits) for the report test, so every figure is drawn from real runs.
# Usage: real_runs.sh MPIEXEC HLP_TRAIN OUTDIR
set -euo pipefail
MPIEXEC=$1 TRAIN=$2 OUT=$3
rm -rf "$OUT"
mkdir -p "$OUT"
run() {  # np strategy seq-len
  "$MPIEXEC" -n "$1" "$TRAIN" --strategy "$2" --steps 4 --seq-len "$3" --loader-threads 1 \
    --out "$OUT/$2-n$1-t$3.h5" > "$OUT/$2-n$1-t$3.log" 2>&1 || { cat "$OUT/$2-n$1-t$3.log"; exit 1; }
}
run 1 single 32
run 2 ddp 32
run 2 fsdp 32
run 2 fsdp2 32
run 2 ddp 64
run 2 fsdp 64
pp() {  # micro-batches split
  local name="pp-m$1-$2"
  "$MPIEXEC" -n 2 "$TRAIN" --strategy pp --pp 2 --micro-batches "$1" --pp-split "$2" --steps 4 \
    --seq-len 32 --loader-threads 1 --out "$OUT/$name.h5" > "$OUT/$name.log" 2>&1 \
    || { cat "$OUT/$name.log"; exit 1; }
}
pp 1 balanced
pp 2 balanced
pp 4 balanced
pp 4 uniform
pp 4 params
ls "$OUT"/*.h5
