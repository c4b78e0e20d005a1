#!/bin/bash
# e2e_test.sh local|slurm|slurm_requeue : the whole flow with the REAL hlp-train and hlp-analyze:
# tests/e2e/tiny.ini -> hlp-sweep -> (mpiexec | sbatch on the local Slurm) -> hlp-train -> HDF5
# -> hlp-analyze report. Checks every result file (complete, world size, /steps/loss) and the report.
# slurm_requeue: tests/e2e/requeue.ini; USR1 to the running task (what --signal=B:USR1@N does
# before the time limit) -> hlp-train checkpoints, exits 75 -> the task requeues -> resumes,
# appending to its result file: every step once, both launches in /segments.
set -euo pipefail
source "$HLP_SOURCE_DIR/tests/slurm/lib.sh"
mode=$1
[ "$mode" != local ] && cluster_session
work=$(mktemp -d /tmp/hlp-e2e.XXXXXX)
job="$HLP_SOURCE_DIR/tests/e2e/tiny.ini"
if [ "$mode" = slurm_requeue ]; then
  job="$HLP_SOURCE_DIR/tests/e2e/requeue.ini"
  "$HLP_BIN_DIR/hlp-sweep" "$job" --site local --out "$work/out" --hlp-bin "$HLP_BIN_DIR" --submit
  arrays=$(submitted_ids "$work/out" array); task="${arrays}_0"
  log="$work/out/logs/e2e-requeue-n2-0.out"
  for _ in $(seq 1 1200); do grep -q 'step 3/' "$log" 2>/dev/null && break; sleep 0.1; done
  grep -q 'step 3/' "$log" || { cat "$log" >&2; fail "hlp-train never reached step 3"; }
  scancel --signal=USR1 --batch "$task"
  bash "$CLUSTER" wait "$arrays,$(submitted_ids "$work/out" analysis)" 600 \
    || { cat "$log" >&2; fail "the interrupted task did not complete after its requeue"; }
  grep -q 'requeueing this task' "$log" || { cat "$log" >&2; fail "the task was not requeued after USR1"; }
  grep -q 'starting hlp-train --resume' "$log" || { cat "$log" >&2; fail "the second run did not resume"; }
  # one result file for both launches: every step 0..299 once, two segments
  /usr/bin/python3 - "$work"/out/results/*.h5 <<'PY' || fail "the requeued task's result file (kept in $work)"
import sys, h5py
assert len(sys.argv) == 2, f"want one result file, got {sys.argv[1:]}"
with h5py.File(sys.argv[1], "r") as f:
    steps = list(f["steps/step"][:])
    assert steps == list(range(300)), f"/steps/step: {len(steps)} rows, want 0..299 once"
    first = list(f["segments"].attrs["first_step"])
    assert len(first) == 2 and first[0] == 0 and 0 < first[1] < 300, first
    launches = f["segments"].attrs["launches"].splitlines()
    assert all("slurm_job=" in l and "slurm_job=-" not in l for l in launches), launches
print(f"requeue: steps 0..299 once, segments first_step {first}")
PY
elif [ "$mode" = local ]; then
  "$HLP_BIN_DIR/hlp-sweep" "$job" --site local --out "$work/out" --hlp-bin "$HLP_BIN_DIR" \
      --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local || fail "hlp-sweep --run-local failed (logs in $work/out/logs)"
else
  "$HLP_BIN_DIR/hlp-sweep" "$job" --site local --out "$work/out" --hlp-bin "$HLP_BIN_DIR" --submit
  bash "$CLUSTER" wait "$(submitted_ids "$work/out" array),$(submitted_ids "$work/out" analysis)" 600 \
    || { tail -n 20 "$work"/out/logs/* >&2; fail "the sweep did not complete on the local Slurm"; }
fi
/usr/bin/python3 "$HLP_SOURCE_DIR/tests/e2e/check_results.py" "$work/out" "$work/out/results" "$work/out/report" \
  || fail "result files or report incomplete (kept in $work)"
# the report answers the question: Findings first, winners and Pareto front as table.csv says
/usr/bin/python3 "$HLP_SOURCE_DIR/tests/analysis/check_findings.py" --existing "$work/out/report" \
  || fail "the report's Findings disagree with its table (kept in $work)"
rm -rf "$work"
say "ok ($mode)"
