#!/usr/bin/env bash
# Launches that must not write anything (issue 39), with the real hlp-train:
#   - the launcher says N processes (SLURM_NTASKS) and MPI started a world of another size (a
#     singleton, mpiexec -n 1, mpiexec -n 2 under SLURM_NTASKS=4): one line naming both numbers,
#     exit 2 on every process, no result file; HLP_IGNORE_LAUNCH_SIZE=1 lets such a run go on,
#     a matching SLURM_NTASKS is no error;
#   - a second run on a live run's --out: one line naming the file, exit 2; the live run
#     finishes and its file is complete with every step.
set -u
HLP_TRAIN=$1
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
tmp=$(mktemp -d)
trap 'kill $live 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
source "$(dirname "$0")/expect_one_line_error.sh"
run=(--model tiny --seq-len 32 --global-batch 4 --micro-batch 2 --threads 1 --loader-threads 1)

expect_one_line_error singleton-slurm-ntasks-2 2 "(SLURM_NTASKS=2) but MPI started a world of 1" -- \
  env SLURM_NTASKS=2 "$HLP_TRAIN" "${run[@]}" --steps 1 --out "$tmp/a.h5"
expect_one_line_error mpiexec1-slurm-ntasks-2 2 "(SLURM_NTASKS=2) but MPI started a world of 1" -- \
  env SLURM_NTASKS=2 "$MPIEXEC" -n 1 "$HLP_TRAIN" "${run[@]}" --steps 1 --out "$tmp/b.h5"
expect_one_line_error mpiexec2-slurm-ntasks-4 2 "mpiexec -n and the job's --ntasks differ" -- \
  env SLURM_NTASKS=4 "$MPIEXEC" -n 2 "$HLP_TRAIN" "${run[@]}" --steps 1 --out "$tmp/c.h5"
for f in a b c; do
  [ ! -e "$tmp/$f.h5" ] || { echo "FAIL: $f.h5 was written by a refused launch"; fail=1; }
done
if env SLURM_NTASKS=2 HLP_IGNORE_LAUNCH_SIZE=1 "$HLP_TRAIN" "${run[@]}" --steps 1 --out "$tmp/d.h5" \
     >"$tmp/out" 2>&1 && [ -s "$tmp/d.h5" ]; then echo "ok   HLP_IGNORE_LAUNCH_SIZE=1 runs"
else echo "FAIL: HLP_IGNORE_LAUNCH_SIZE=1 did not run:"; cat "$tmp/out"; fail=1; fi
if env SLURM_NTASKS=2 "$MPIEXEC" -n 2 "$HLP_TRAIN" "${run[@]}" --strategy ddp --steps 1 \
     --out "$tmp/e.h5" >"$tmp/out" 2>&1 && [ -s "$tmp/e.h5" ]; then echo "ok   SLURM_NTASKS=2 with 2 ranks runs"
else echo "FAIL: a matching SLURM_NTASKS was refused:"; cat "$tmp/out"; fail=1; fi

# One writer per result file: a live run (many steps), then a second run on its --out.
steps=400
"$HLP_TRAIN" "${run[@]}" --steps $steps --out "$tmp/live.h5" >"$tmp/live.out" 2>&1 &
live=$!
for _ in $(seq 1 600); do grep -q 'step 2/' "$tmp/live.out" 2>/dev/null && break; sleep 0.1; done
grep -q 'step 2/' "$tmp/live.out" || { echo "FAIL: the live run never reached step 2"; cat "$tmp/live.out"; exit 1; }
if kill -0 $live 2>/dev/null; then
  expect_one_line_error second-writer 2 "another run is writing '$tmp/live.h5'" -- \
    "$HLP_TRAIN" "${run[@]}" --steps 1 --out "$tmp/live.h5"
  kill -0 $live 2>/dev/null || echo "note: the live run ended while the second one was refused"
else
  echo "FAIL: the live run ended before the second run could try (raise steps)"; fail=1
fi
wait $live; rc=$?
[ "$rc" = 0 ] || { echo "FAIL: the live run exited $rc"; cat "$tmp/live.out"; fail=1; }
/usr/bin/python3 - "$tmp/live.h5" $steps <<'PY' || fail=1
import sys, h5py
f = h5py.File(sys.argv[1], "r")
steps = f["/steps/step"][()]
ok = int(f.attrs["complete"]) == 1 and list(steps) == list(range(int(sys.argv[2])))
print(("ok  " if ok else "FAIL") + f" the live run's file: complete={int(f.attrs['complete'])}, steps {len(steps)}")
sys.exit(0 if ok else 1)
PY
exit $fail
