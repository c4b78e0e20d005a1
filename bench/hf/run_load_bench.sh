#!/bin/bash
# --init-from load benchmark: time and per-rank allocator peak to load a generated checkpoint of
# `small` (58 MB) and of a 1.23 GB model at 1, 2 and 4 ranks (fsdp2). Deletes what it generates.
#   bench/hf/run_load_bench.sh [BUILD_DIR] [small|1gb ...]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}; shift || true
models=${*:-small 1gb}
train=$build/bin/hlp-train
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d /tmp/hlp_load_bench.XXXX)
trap 'rm -rf "$tmp"' EXIT
for m in $models; do
  /usr/bin/python3 "$root/bench/hf/make_checkpoint.py" "$m" "$tmp/$m"
  for n in 1 2 4; do
    echo "== $m, fsdp2 on $n rank(s)"
    mpiexec -n "$n" "$train" --strategy fsdp2 --model-config "$tmp/$m/config.json" \
      --init-from "$tmp/$m" --steps 1 --seq-len 8 --global-batch "$n" --micro-batch 1 \
      --lora-rank 8 --threads 1 --loader-threads 1 --warmup-steps 0 --trace false 2>&1 |
      grep -E "init-from|error" | sort
  done
  rm -rf "${tmp:?}/$m"
done
