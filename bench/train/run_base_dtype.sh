#!/usr/bin/env bash
# Frozen weights stored in fp32 against bf16 (--base-dtype, issue 34), in one run: hlp-train
# single (1 rank), ddp, fsdp and fsdp2 (2 ranks) under --precision bf16, each with
# --base-dtype fp32 and bf16, alternating storage per strategy (fp32, bf16, fp32, bf16 ... over
# HLP_BENCH_REPEATS) so that both see the same drift of a shared machine. One table: tokens/s
# (global; median of the steps after the first, the better repeat), peak per rank (largest over
# ranks and steps), parameter and gradient bytes per rank, and the bytes each kind of
# collective moved per step and rank (from the trace: all-gather, reduce-scatter, all-reduce).
#
# usage: bench/train/run_base_dtype.sh [BUILD_DIR] [OUT_DIR]
# Environment (defaults = the numbers in docs/strategies.md, "Storage of frozen weights"):
#   HLP_BENCH_MODEL=small HLP_BENCH_SEQ=1024 HLP_BENCH_MICRO=1 HLP_BENCH_GLOBAL=2
#   HLP_BENCH_STEPS=6 HLP_BENCH_REPEATS=1 HLP_BENCH_TOKENIZER=<repo>/datasets/sample/spm.model
#   HLP_BENCH_STRATEGIES="single ddp fsdp fsdp2" MPIEXEC=BUILD_DIR/hlp-mpiexec PYTHON=/usr/bin/python3
# Every rank computes with 1 LibTorch thread and 1 OpenBLAS thread (--threads 1,
# OPENBLAS_NUM_THREADS=1): 2 ranks on the 2 cores of the development machine.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-base-dtype}
MODEL=${HLP_BENCH_MODEL:-small}
SEQ=${HLP_BENCH_SEQ:-1024}
MICRO=${HLP_BENCH_MICRO:-1}
GLOBAL=${HLP_BENCH_GLOBAL:-2}
STEPS=${HLP_BENCH_STEPS:-6}
REPEATS=${HLP_BENCH_REPEATS:-1}
TOKENIZER=${HLP_BENCH_TOKENIZER:-$SRC/datasets/sample/spm.model}
STRATEGIES=${HLP_BENCH_STRATEGIES:-single ddp fsdp fsdp2}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}  # the build's launcher, whatever the alternatives say
PYTHON=${PYTHON:-/usr/bin/python3}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

mkdir -p "$OUT"
rm -f "$OUT"/*.h5
COMMON=(--model "$MODEL" --tokenizer "$TOKENIZER" --seq-len "$SEQ" --micro-batch "$MICRO"
        --global-batch "$GLOBAL" --steps "$STEPS" --warmup-steps 1 --lora-rank 8 --lora-alpha 16
        --threads 1 --loader-threads 1 --precision bf16 --trace true --seed 7)
for strategy in $STRATEGIES; do
  ranks=2
  [ "$strategy" = single ] && ranks=1
  for repeat in $(seq 1 "$REPEATS"); do
    for base in fp32 bf16; do
      out="$OUT/$strategy-$base-$repeat.h5"
      echo "[bench] $strategy ($ranks rank(s)) --base-dtype $base, repeat $repeat"
      "$MPIEXEC" -n "$ranks" "$BUILD/bin/hlp-train" "${COMMON[@]}" --strategy "$strategy" \
          --base-dtype "$base" --out "$out" > "$OUT/$strategy-$base-$repeat.log" 2>&1 ||
        { tail -5 "$OUT/$strategy-$base-$repeat.log"; exit 1; }
    done
  done
done

"$PYTHON" - "$OUT" $STRATEGIES <<'PY'
import collections, glob, os, sys
import h5py
import numpy as np

out, strategies = sys.argv[1], sys.argv[2:]

def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)

def summary(path):
    with h5py.File(path, "r") as f:
        s = f["steps"]
        tps = np.median(s["tokens_per_s"][0, 1:])
        peak = s["peak_bytes"][()].max()
        params = s["param_bytes"][()].max()
        grads = s["grad_bytes"][()].max()
        steps = s["loss"].shape[1]
        moved = collections.Counter()
        for r in range(int(f.attrs["world_size"])):
            ev = f["trace"]["rank%d" % r][()]
            for e in ev:
                name = text(e["name"])
                if name in ("all_gather", "reduce_scatter", "all_reduce"):
                    moved[name] += int(e["bytes"])
        ranks = int(f.attrs["world_size"])
        return tps, peak, params, grads, {k: v / steps / ranks for k, v in moved.items()}

mib = lambda b: b / 2**20
print("| strategy | frozen matrices | tokens/s | peak MiB / rank | params MiB / rank | grads MiB / rank "
      "| all-gather MiB / step / rank | reduce-scatter MiB / step / rank | all-reduce MiB / step / rank |")
print("|---|---|---|---|---|---|---|---|---|")
rows = {}
for strategy in strategies:
    for base in ("fp32", "bf16"):
        runs = [summary(p) for p in sorted(glob.glob(os.path.join(out, f"{strategy}-{base}-*.h5")))]
        best = max(runs, key=lambda r: r[0])
        rows[(strategy, base)] = best
        tps, peak, params, grads, moved = best
        print(f"| {strategy} | {base} | {tps:.0f} | {mib(peak):.1f} | {mib(params):.1f} | {mib(grads):.2f} | "
              f"{mib(moved.get('all_gather', 0)):.2f} | {mib(moved.get('reduce_scatter', 0)):.2f} | "
              f"{mib(moved.get('all_reduce', 0)):.3f} |")
print()
print("bf16 / fp32 storage:")
for strategy in strategies:
    a, b = rows[(strategy, "fp32")], rows[(strategy, "bf16")]
    gather = (b[4].get("all_gather", 0) / a[4]["all_gather"]) if a[4].get("all_gather") else float("nan")
    print(f"  {strategy}: tokens/s {b[0] / a[0]:.3f}, peak {b[1] / a[1]:.3f}, params {b[2] / a[2]:.3f}, "
          f"grads {b[3] / a[3]:.3f}, all-gather bytes {gather:.3f}")
PY
