#!/usr/bin/env bash
# Context parallelism's exchange schemes (--cp-scheme for the G layers, --cp-attention for the
# attention layers; issue 37), side by side, in one run per (T, cp): hlp-train --strategy cp on
# cp ranks (the small preset: JetBlock G layers with 4 heads, one full and one sliding-window
# attention layer with 4 query / 2 KV heads; LoRA r8 on every linear), global batch 1,
# micro-batch 1, fp32. The schemes, G / attention: chain / ring (today's default), allgather /
# ring, alltoall / ring, alltoall / alltoall, then chain / ring again (the better of the two
# chain runs is kept: the machine drifts; HLP_BENCH_REPEAT=0 leaves the repeat out). One table:
# step time (median of the steps after the first), CPU seconds a step (all ranks), the step's
# exposed collectives (comm_exposed_s: all-gathers, all-to-alls) and its point-to-point waits
# (pipeline_wait_s: the chain's hops, the halos, ring attention's shifts), the seconds in the G
# layers' state exchange (/context_parallel state_chain_s, most over ranks, per step), the bytes
# a rank sent per step over every cp exchange, and the peak per rank.
#
# usage: bench/train/run_cp_schemes.sh [BUILD_DIR] [OUT_DIR]
# Environment: HLP_BENCH_SEQS="8192 32768" HLP_BENCH_CPS="2 4" HLP_BENCH_STEPS=3
#   HLP_BENCH_REPEAT=1 MPIEXEC=BUILD_DIR/hlp-mpiexec PYTHON=/usr/bin/python3
# Every rank computes with 1 LibTorch thread and 1 OpenBLAS thread (--threads 1,
# OPENBLAS_NUM_THREADS=1); 4 ranks oversubscribe the 2 cores of the development machine: the
# table gives CPU seconds beside wall seconds.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-cp-schemes}
SEQS=${HLP_BENCH_SEQS:-8192 32768}
CPS=${HLP_BENCH_CPS:-2 4}
STEPS=${HLP_BENCH_STEPS:-3}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}
PYTHON=${PYTHON:-/usr/bin/python3}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

RUNS=(chain.ring-1 allgather.ring-1 alltoall.ring-1 alltoall.alltoall-1)
[ "${HLP_BENCH_REPEAT:-1}" = 1 ] && RUNS+=(chain.ring-2)

mkdir -p "$OUT"
rm -f "$OUT"/*.h5
COMMON=(--strategy cp --model small --micro-batch 1 --global-batch 1 --steps "$STEPS"
        --lora-rank 8 --lora-alpha 16 --lora-targets all-linear --threads 1 --loader-threads 1
        --precision fp32 --seed 7)
for T in $SEQS; do
  for cp in $CPS; do
    for run in "${RUNS[@]}"; do
      schemes=${run%-*}
      scheme=${schemes%.*} attention=${schemes#*.}
      out="$OUT/t$T-cp$cp-$run.h5"
      echo "[bench] T $T cp $cp G $scheme, attention $attention ($run)"
      "$MPIEXEC" -n "$cp" "$BUILD/bin/hlp-train" "${COMMON[@]}" --seq-len "$T" --cp "$cp" \
          --cp-scheme "$scheme" --cp-attention "$attention" --out "$out" > "${out%.h5}.log" 2>&1 ||
        { tail -5 "${out%.h5}.log"; exit 1; }
    done
  done
done

"$PYTHON" - "$OUT" <<'PY'
import glob, os, re, sys
import h5py
import numpy as np

out = sys.argv[1]

def summary(path):
    with h5py.File(path, "r") as f:
        s = f["steps"]
        step = np.median(s["step_time_s"][()][:, 1:].max(axis=0))
        cpu = np.median(s["cpu_s"][()][:, 1:].sum(axis=0))
        exposed = np.median(s["comm_exposed_s"][()][:, 1:].max(axis=0))
        waits = np.median(s["pipeline_wait_s"][()][:, 1:].max(axis=0))
        peak = s["peak_bytes"][()].max()
        g = f["context_parallel"]
        steps = int(g.attrs["steps"])
        kinds = str(g.attrs["exchange_kinds"]).split(",")
        sent = np.array(g.attrs["bytes_sent"]).reshape(-1, len(kinds), 2)
        cp_bytes = sent.sum(axis=(1, 2)).max() / steps
        state_s = np.array(g.attrs["state_chain_s"]).max() / steps
        return step, cpu, exposed, waits, state_s, cp_bytes, peak

rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.h5"))):
    m = re.match(r"t(\d+)-cp(\d+)-(\w+)\.(\w+)-(\d)\.h5", os.path.basename(path))
    key = (int(m.group(1)), int(m.group(2)), m.group(3), m.group(4))
    r = summary(path)
    if key not in rows or r[0] < rows[key][0]:
        rows[key] = r
print("| T | cp | G scheme | attention | step s | CPU s / step (all ranks) | exposed collectives s | "
      "point-to-point waits s | G state exchange s | cp MiB / rank / step | peak MiB / rank |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
order = {"chain": 0, "allgather": 1, "alltoall": 2, "ring": 0}
for (T, cp, scheme, attn), r in sorted(rows.items(),
                                       key=lambda kv: (kv[0][0], kv[0][1], order[kv[0][2]],
                                                       order[kv[0][3]])):
    step, cpu, exposed, waits, state_s, cp_bytes, peak = r
    print(f"| {T} | {cp} | {scheme} | {attn} | {step:.2f} | {cpu:.2f} | {exposed:.3f} | "
          f"{waits:.3f} | {state_s:.3f} | {cp_bytes / 2**20:.2f} | {peak / 2**20:.0f} |")
PY
