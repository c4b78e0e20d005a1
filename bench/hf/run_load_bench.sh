#!/bin/bash
# --init-from benchmark: per rank, what it holds, the CPU allocator's peak while the strategy is
# built (start-up included) and while it loads a generated checkpoint, and the load time — for
# `small` (58 MB) and a 1.2 GB model (`1gb`): fsdp2 at 1, 2 and 4 ranks, pp2 and tp2 at 2 ranks.
# Prints one markdown table; deletes what it generates.
#   bench/hf/run_load_bench.sh [BUILD_DIR] [small|1gb ...]
# Columns (MiB, from the trainer's "--init-from" line of each rank):
#   held           bytes of the parameters this rank holds (held_tensors: its stage, rows, slices)
#   after build    allocator after building = held + gradient buffers (+ small tensors)
#   peak build     allocator peak before loading: start-up and building the strategy
#   peak load      allocator peak while loading
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}; shift || true
models=${*:-small 1gb}
train=$build/bin/hlp-train
mpiexec=${MPIEXEC:-$build/hlp-mpiexec}   # the build's launcher (its MPI, whatever the alternatives say)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d /tmp/hlp_load_bench.XXXX)
trap 'rm -rf "$tmp"' EXIT
runs=("fsdp2 1" "fsdp2 2" "fsdp2 4" "pp 2" "tp 2")
echo "| model | strategy | ranks | rank | held | after build | peak build | peak load | read | load s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for m in $models; do
  /usr/bin/python3 "$root/bench/hf/make_checkpoint.py" "$m" "$tmp/$m" >&2
  for run in "${runs[@]}"; do
    read -r strategy n <<<"$run"
    extra=() batch=$n
    [ "$strategy" = pp ] && extra=(--pp 2) && batch=2
    [ "$strategy" = tp ] && extra=(--tp 2) && batch=2
    out=$("$mpiexec" -n "$n" "$train" --strategy "$strategy" "${extra[@]}" \
      --model-config "$tmp/$m/config.json" --init-from "$tmp/$m" --steps 1 --seq-len 8 \
      --global-batch "$batch" --micro-batch 1 --lora-rank 8 --threads 1 --loader-threads 1 \
      --warmup-steps 0 --trace false 2>&1) || { echo "$out" >&2; exit 1; }
    # "rank R: --init-from P: N tensors, READ MiB read into HELD MiB held in S s; allocator
    #  BEFORE MiB before, peak PEAK MiB while loading (peak before loading BUILD MiB: ...)"
    grep -- "--init-from" <<<"$out" |
      sed -E 's/.*rank ([0-9]+): --init-from .*: [0-9]+ tensors, ([0-9.]+) MiB read into ([0-9.]+) MiB held in ([0-9.]+) s; allocator ([0-9.]+) MiB before, peak ([0-9.]+) MiB while loading \(peak before loading ([0-9.]+) MiB.*/\1 \2 \3 \4 \5 \6 \7/' |
      sort -n |
      while read -r rank read held secs after peak_load peak_build; do
        echo "| $m | $strategy | $n | $rank | $held | $after | $peak_build | $peak_load | $read | $secs |"
      done
  done
  rm -rf "${tmp:?}/$m"
done
