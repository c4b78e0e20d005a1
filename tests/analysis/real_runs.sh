#!/bin/bash
# ctest fixture: a results folder from REAL hlp-train runs (tiny: 4 steps, seq-len 32/64) of
# ddp, fsdp, fsdp2 (2 ranks) and single (1 rank) for the report test.
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
ls "$OUT"/*.h5
