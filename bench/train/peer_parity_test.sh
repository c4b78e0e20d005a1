#!/usr/bin/env bash
# ctest bench_train_peer_parity: hlp-train ddp and the PyTorch DDP peer (2 ranks each) on the
# `tiny` model, 3 steps, from the same exported weights and batches. Fails (exit 1) when the two
# loss curves differ by more than 1e-4 relative at any step, or when anything fails to run.
# usage: peer_parity_test.sh BUILD_DIR OUT_DIR
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$1
OUT=$2
HLP_BENCH_MODEL=tiny HLP_BENCH_SEQ=64 HLP_BENCH_MICRO=2 HLP_BENCH_GLOBAL=8 HLP_BENCH_STEPS=3 \
HLP_BENCH_STRATEGIES=ddp HLP_BENCH_PAIRS=1 HLP_BENCH_CPU_CALIBRATE=0 HLP_BENCH_LOSS_CHECK=1 \
  bash "$HERE/run_strategies.sh" "$BUILD" "$OUT"
