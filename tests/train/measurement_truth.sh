#!/usr/bin/env bash
# Measurement truth of hlp-train on real runs (issue: bounded pools, every wait counted once,
# non-finite stop, one-line errors). Each case runs the real binary and checks its result file
# with check_measurement.py (h5py). Usage: measurement_truth.sh HLP_TRAIN CASE
#   threads    --threads 1 keeps the process at <= 1.2 cores on a matmul-heavy step, --threads 2
#              grows past it (OpenBLAS's own pool follows --threads, whatever the environment)
#   tp         2-rank tensor parallel: the all-reduces inside forward/backward are exposed comm
#   pp         2-rank pipeline: neighbour waits are pipeline_wait_s, the step is attributed
#   nonfinite  --lr 1e30: exit 3 on every rank, one line, the file keeps the earlier steps
#   errors     one-process runs (no mpiexec): one error line, exit 2, nothing after it
set -u
HLP_TRAIN=$1
CASE=$2
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
PY=/usr/bin/python3
CHECK="$(dirname "$0")/check_measurement.py"
dir=$(mktemp -d /tmp/hlp_measure_${CASE}.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

case "$CASE" in
threads)
  # small at T = 256: matrix products dominate the step. The environment does not bound BLAS
  # here (no OMP_NUM_THREADS / OPENBLAS_NUM_THREADS): hlp-train must do it.
  common=(--strategy single --model small --seq-len 256 --micro-batch 2 --global-batch 2
          --steps 3 --loader-threads 1 --trace false)
  for t in 1 2; do
    env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$HLP_TRAIN" "${common[@]}" --threads $t \
        --out "$dir/t$t.h5" > "$dir/t$t.log" 2>&1 || { cat "$dir/t$t.log"; fail "--threads $t run"; }
  done
  "$PY" "$CHECK" threads "$dir/t1.h5" 1.2 1 || fail "--threads 1 bound"
  "$PY" "$CHECK" threads "$dir/t2.h5" -1.2 2 || fail "--threads 2"
  ;;
tp)
  "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy tp --model tiny --seq-len 128 --steps 4 --threads 1 \
      --loader-threads 1 --trace true --out "$dir/tp.h5" > "$dir/tp.log" 2>&1 \
      || { cat "$dir/tp.log"; fail "tp run"; }
  "$PY" "$CHECK" tp "$dir/tp.h5" || fail "tp exposed communication"
  ;;
pp)
  "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy pp --model small --seq-len 128 --micro-batch 1 \
      --global-batch 4 --steps 4 --threads 1 --loader-threads 1 --trace true \
      --out "$dir/pp.h5" > "$dir/pp.log" 2>&1 || { cat "$dir/pp.log"; fail "pp run"; }
  "$PY" "$CHECK" pp "$dir/pp.h5" || fail "pp attribution"
  ;;
cp)
  # context parallelism: the halo / state / ring waits are point-to-point, so the step stays
  # fully attributed, and the bytes each exchange sent are docs/strategies.md's formulas
  "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy cp --model small --seq-len 1024 --micro-batch 1 \
      --global-batch 2 --steps 4 --threads 1 --loader-threads 1 \
      --out "$dir/cp.h5" > "$dir/cp.log" 2>&1 || { cat "$dir/cp.log"; fail "cp run"; }
  "$PY" "$CHECK" cp "$dir/cp.h5" || fail "cp attribution and exchanged bytes"
  # the all-to-all schemes (G and attention layers re-sharded to heads), full finetuning so that
  # every re-sharded input carries a gradient back
  "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy cp --model small --seq-len 1024 --micro-batch 1 \
      --global-batch 2 --steps 3 --threads 1 --loader-threads 1 --lora-rank 0 \
      --cp-scheme alltoall --cp-attention alltoall \
      --out "$dir/cp-a2a.h5" > "$dir/cp-a2a.log" 2>&1 || { cat "$dir/cp-a2a.log"; fail "cp alltoall run"; }
  "$PY" "$CHECK" cp "$dir/cp-a2a.h5" || fail "cp alltoall attribution and exchanged bytes"
  ;;
nonfinite)
  "$MPIEXEC" -n 2 "$HLP_TRAIN" --strategy ddp --model tiny --seq-len 64 --steps 12 --lr 1e30 \
      --threads 1 --loader-threads 1 --flush-every 1 --out "$dir/nan.h5" \
      > "$dir/nan.out" 2> "$dir/nan.err"
  rc=$?
  [ "$rc" -eq 3 ] || { cat "$dir/nan.out" "$dir/nan.err"; fail "exit $rc with --lr 1e30, want 3"; }
  [ "$(wc -l < "$dir/nan.err")" -eq 1 ] || { cat "$dir/nan.err"; fail "want exactly one error line"; }
  grep -q "^hlp-train: error: step [0-9]*: loss is nan" "$dir/nan.err" \
    || grep -q "^hlp-train: error: step [0-9]*: \(loss\|gradient norm\) is \(-\?inf\|nan\)" "$dir/nan.err" \
    || { cat "$dir/nan.err"; fail "error line does not name the step and the value"; }
  stopped=$(sed -n 's/^hlp-train: error: step \([0-9]*\):.*/\1/p' "$dir/nan.err")
  echo "stopped at step $stopped: $(cat "$dir/nan.err")"
  "$PY" "$CHECK" nonfinite "$dir/nan.h5" $((stopped - 1)) || fail "result file of the stopped run"
  ;;
errors)
  # Without mpiexec MPICH runs one process (a singleton); the error path must still be clean.
  for args in "--out /tmp" "--lora-targets nonexistent_proj --steps 1" "--data /nonexistent"; do
    # shellcheck disable=SC2086
    "$HLP_TRAIN" --model tiny --seq-len 32 $args > "$dir/out" 2> "$dir/err"
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$dir/out" "$dir/err"; fail "hlp-train $args: exit $rc, want 2"; }
    [ "$(wc -l < "$dir/err")" -eq 1 ] || { cat "$dir/err"; fail "hlp-train $args: want one stderr line"; }
    grep -q "^hlp-train: error: " "$dir/err" || { cat "$dir/err"; fail "hlp-train $args: no error line"; }
    echo "ok: hlp-train $args -> exit 2: $(cat "$dir/err")"
  done
  ;;
*) fail "unknown case $CASE" ;;
esac
echo "measurement_truth $CASE: ok"
