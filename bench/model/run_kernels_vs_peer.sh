#!/usr/bin/env bash
# Issue 18's throughput point: `small` LoRA training, HLP with fused kernels, HLP with the
# reference kernels and the PyTorch eager peer (bench/peer: the same architecture op for op,
# same initial weights, same batches), on one rank and on ddp x 2, 1 thread and 1 BLAS thread a
# rank on every side, interleaved round after round (fused, reference, peer, ...).
#   bench/model/run_kernels_vs_peer.sh [BUILD_DIR] [OUT_DIR]
# Environment: HLP_BENCH_ROUNDS (2), HLP_BENCH_STEPS (5), HLP_BENCH_SEQ (256), HLP_BENCH_MICRO (4
# sequences a rank), HLP_BENCH_WORLDS ("1 2").
# Configuration (the issue's): small (JetBlock G layers), byte tokenizer, LoRA r8 alpha 16 on
# q,k,v,o, T 256, 4 sequences per rank per step, AdamW 1e-3, clip 1, fp32.
# tokens/s (global) = G*T / median over steps >= 1 of every round of the slowest rank's step.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
OUT=${2:-$BUILD/bench-kernels}
ROUNDS=${HLP_BENCH_ROUNDS:-2}
STEPS=${HLP_BENCH_STEPS:-5}
SEQ=${HLP_BENCH_SEQ:-256}
MICRO=${HLP_BENCH_MICRO:-4}
WORLDS=${HLP_BENCH_WORLDS:-1 2}
PYTHON=${PYTHON:-/usr/bin/python3}
MPIEXEC=${MPIEXEC:-$BUILD/hlp-mpiexec}  # the build's launcher, whatever the alternatives say
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1  # bound every BLAS pool (docs/toolchain.md)
mkdir -p "$OUT"
rm -f "$OUT"/*.h5 "$OUT"/*.json
COMMON=(--model small --tokenizer byte --seq-len "$SEQ" --micro-batch "$MICRO"
        --lora-rank 8 --lora-alpha 16 --seed 1234 --threads 1 --lr 1e-3 --warmup-steps 2
        --min-lr-ratio 0.1 --weight-decay 0 --grad-clip 1 --steps "$STEPS")
echo "[bench-kernels] $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_NUM_THREADS=1, --threads 1"
for world in $WORLDS; do
  G=$((MICRO * world))
  "$BUILD/bin/hlp-export-init" --model small --tokenizer byte --seq-len "$SEQ" --global-batch "$G" \
    --lora-rank 8 --lora-alpha 16 --seed 1234 --batches "$STEPS" --out-dir "$OUT/export_w$world" >/dev/null
  strategy=single; ((world > 1)) && strategy=ddp
  for ((r = 1; r <= ROUNDS; ++r)); do
    for kernels in fused reference; do
      "$MPIEXEC" -n "$world" "$BUILD/bin/hlp-train" --strategy "$strategy" "${COMMON[@]}" \
        --global-batch "$G" --kernels "$kernels" --out "$OUT/hlp_${kernels}_w${world}.r$r.h5" \
        > "$OUT/hlp_${kernels}_w${world}.r$r.log" 2>&1 \
        || { echo "hlp-train failed: $OUT/hlp_${kernels}_w${world}.r$r.log" >&2; exit 1; }
    done
    timeout 900 "$PYTHON" "$SRC/bench/peer/peer_ddp.py" --export-dir "$OUT/export_w$world" \
      --out "$OUT/peer_w${world}.r$r.json" --steps "$STEPS" --world "$world" --threads 1 \
      --micro-batch "$MICRO" --lr 1e-3 --warmup-steps 2 --min-lr-ratio 0.1 --weight-decay 0 \
      --grad-clip 1 > "$OUT/peer_w${world}.r$r.log" 2>&1 \
      || { echo "peer failed: $OUT/peer_w${world}.r$r.log" >&2; exit 1; }
    echo "[bench-kernels] world $world round $r done (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
"$PYTHON" - "$OUT" "$SEQ" "$MICRO" $WORLDS <<'PY'
import glob, json, statistics, sys
import h5py, numpy as np
out, T, micro, worlds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(w) for w in sys.argv[4:]]
def hlp_steps(path):
    with h5py.File(path, "r") as f:
        st = np.asarray(f["steps"]["step_time_s"])  # [world, steps]
        losses = np.asarray(f["steps"]["loss"])[0] if "loss" in f["steps"] else None
    return list(st.max(axis=0)[1:]), losses
def peer_steps(path):
    d = json.load(open(path))
    return [max(s) for s in d["step_time_s"][1:]], d["losses"]
print("\n| world | run | rounds | median step s | tokens/s global | vs peer | fused vs reference |")
print("|---|---|---|---|---|---|---|")
for w in worlds:
    G = micro * w
    res = {}
    for name, pat, fn in [("hlp fused", "hlp_fused_w%d.r*.h5", hlp_steps),
                          ("hlp reference", "hlp_reference_w%d.r*.h5", hlp_steps),
                          ("pytorch peer", "peer_w%d.r*.json", peer_steps)]:
        files = sorted(glob.glob("%s/%s" % (out, pat % w)))
        steps = [s for f in files for s in fn(f)[0]]
        res[name] = (len(files), statistics.median(steps))
    for name, (n, med) in res.items():
        print("| %d | %s | %d | %.3f | %.0f | %.2fx | %s |" % (
            w, name, n, med, G * T / med, res["pytorch peer"][1] / med,
            "%.2fx" % (res["hlp reference"][1] / med) if name.startswith("hlp") else "-"))
PY
echo "[bench-kernels] done; load $(cut -d' ' -f1-3 /proc/loadavg)"
