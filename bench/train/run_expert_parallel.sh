#!/usr/bin/env bash
# Expert parallelism against replicated experts (issue 36), in one run: hlp-train on 2 ranks,
# the small-moe preset (8 sparse layers of 16 experts, top 4, a shared expert), LoRA r8 on
# q_proj / in_proj_qkvz and every expert's gate / up / down_proj, for ddp, ddp+ep2, fsdp2 and
# fsdp2+ep2, alternating (each strategy then its ep2 form, repeated) so that both see the same
# drift of a shared machine. One table: tokens/s (global; median of the steps after the first,
# the better repeat), peak per rank (largest over ranks and steps), parameter and gradient
# bytes per rank, the all-to-all bytes per step and rank, the share of the step blocked in
# all-to-all (the step metric all_to_all_exposed_s, and the same read from the trace's
# wait:all_to_all events on the compute lane) and in the other collectives (comm_exposed_s less
# all_to_all_exposed_s), and the routing imbalance.
#
# usage: bench/train/run_expert_parallel.sh [BUILD_DIR] [OUT_DIR]
# Environment (defaults = the numbers in docs/strategies.md, "Expert parallelism"):
#   HLP_BENCH_SEQ=512 HLP_BENCH_MICRO=1 HLP_BENCH_GLOBAL=4 HLP_BENCH_STEPS=6
#   HLP_BENCH_REPEATS=2 HLP_BENCH_PRECISION=fp32 MPIEXEC=BUILD_DIR/hlp-mpiexec PYTHON=/usr/bin/python3
# Every rank computes with 1 LibTorch thread and 1 OpenBLAS thread (--threads 1,
# OPENBLAS_NUM_THREADS=1): 2 ranks on the 2 cores of the development machine.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-expert-parallel}
SEQ=${HLP_BENCH_SEQ:-512}
MICRO=${HLP_BENCH_MICRO:-1}
GLOBAL=${HLP_BENCH_GLOBAL:-4}
STEPS=${HLP_BENCH_STEPS:-6}
REPEATS=${HLP_BENCH_REPEATS:-2}
PRECISION=${HLP_BENCH_PRECISION:-fp32}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}
PYTHON=${PYTHON:-/usr/bin/python3}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

mkdir -p "$OUT"
rm -f "$OUT"/*.h5
COMMON=(--model small-moe --seq-len "$SEQ" --micro-batch "$MICRO" --global-batch "$GLOBAL"
        --steps "$STEPS" --lora-rank 8 --lora-alpha 16
        --lora-targets q_proj,in_proj_qkvz,gate_proj,up_proj,down_proj --threads 1
        --loader-threads 1 --precision "$PRECISION" --trace true --seed 7)
for repeat in $(seq 1 "$REPEATS"); do
  for strategy in ddp fsdp2; do
    for ep in 1 2; do
      name=$strategy$([ "$ep" = 1 ] || echo "+ep$ep")
      out="$OUT/$name-$repeat.h5"
      echo "[bench] $name (2 ranks), repeat $repeat"
      "$MPIEXEC" -n 2 "$BUILD/bin/hlp-train" "${COMMON[@]}" --strategy "$strategy" --ep "$ep" \
          --out "$out" > "$OUT/$name-$repeat.log" 2>&1 || { tail -5 "$OUT/$name-$repeat.log"; exit 1; }
    done
  done
done

"$PYTHON" - "$OUT" <<'PY'
import glob, os, sys
import h5py
import numpy as np

out = sys.argv[1]

def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)

def summary(path):
    with h5py.File(path, "r") as f:
        s = f["steps"]
        step = s["step_time_s"][()]                       # [world, steps]
        tps = np.median(s["tokens_per_s"][0, 1:])
        peak = s["peak_bytes"][()].max()
        params = s["param_bytes"][()].max()
        grads = s["grad_bytes"][()].max()
        a2a = s["all_to_all_bytes"][()][:, 1:].mean()
        imbalance = np.median(s["expert_imbalance"][0, 1:])
        exposed = s["comm_exposed_s"][()][:, 1:].sum()
        a2a_exposed = s["all_to_all_exposed_s"][()][:, 1:].sum()
        wall = step[:, 1:].sum()
        waits = 0.0
        world = int(f.attrs["world_size"])
        first = int(s["step"][1])  # the steps after the first, as above
        for r in range(world):
            for e in f["trace"]["rank%d" % r][()]:
                if text(e["name"]) == "wait:all_to_all" and int(e["step"]) >= first:
                    waits += float(e["end_s"]) - float(e["start_s"])
        return (tps, peak, params, grads, a2a, a2a_exposed / wall, waits / wall,
                (exposed - a2a_exposed) / wall, imbalance)

mib = lambda b: b / 2**20
print("| strategy | tokens/s | peak MiB / rank | params MiB / rank | grads MiB / rank | "
      "all-to-all MiB / step / rank | blocked in all-to-all / step (metric; trace) | "
      "other exposed comm / step | routing imbalance |")
print("|---|---|---|---|---|---|---|---|---|")
rows = {}
for name in ("ddp", "ddp+ep2", "fsdp2", "fsdp2+ep2"):
    runs = [summary(p) for p in sorted(glob.glob(os.path.join(out, f"{name}-*.h5")))]
    best = max(runs, key=lambda r: r[0])
    rows[name] = best
    tps, peak, params, grads, a2a, a2a_share, trace_share, other_share, imb = best
    print(f"| {name} | {tps:.0f} | {mib(peak):.1f} | {mib(params):.1f} | {mib(grads):.2f} | "
          f"{mib(a2a):.2f} | {100 * a2a_share:.1f} %; {100 * trace_share:.1f} % | "
          f"{100 * other_share:.1f} % | {imb:.2f} |")
print()
for base in ("ddp", "fsdp2"):
    a, b = rows[base], rows[base + "+ep2"]
    print(f"{base}+ep2 / {base}: tokens/s {b[0] / a[0]:.3f}, peak {b[1] / a[1]:.3f}, "
          f"params {b[2] / a[2]:.3f}, grads {b[3] / a[3]:.3f}")
PY
