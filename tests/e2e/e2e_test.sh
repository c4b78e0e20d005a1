#!/bin/bash
# e2e_test.sh local|slurm : the whole flow with the REAL hlp-train and hlp-analyze:
# tests/e2e/tiny.ini -> hlp-sweep -> (mpiexec | sbatch on the local Slurm) -> hlp-train -> HDF5
# -> hlp-analyze report. Checks every result file (complete, world size, /steps/loss) and the report.
set -euo pipefail
source "$HLP_SOURCE_DIR/tests/slurm/lib.sh"
mode=$1
[ "$mode" = slurm ] && cluster_session
work=$(mktemp -d /tmp/hlp-e2e.XXXXXX)
job="$HLP_SOURCE_DIR/tests/e2e/tiny.ini"
if [ "$mode" = local ]; then
  "$HLP_BIN_DIR/hlp-sweep" "$job" --site local --out "$work/out" --hlp-bin "$HLP_BIN_DIR" \
      --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local || fail "hlp-sweep --run-local failed (logs in $work/out/logs)"
else
  "$HLP_BIN_DIR/hlp-sweep" "$job" --site local --out "$work/out" --hlp-bin "$HLP_BIN_DIR" --submit
  bash "$CLUSTER" wait "$(submitted_ids "$work/out" array),$(submitted_ids "$work/out" analysis)" 600 \
    || { tail -n 20 "$work"/out/logs/* >&2; fail "the sweep did not complete on the local Slurm"; }
fi
/usr/bin/python3 "$HLP_SOURCE_DIR/tests/e2e/check_results.py" "$work/out" "$work/out/results" "$work/out/report" \
  || fail "result files or report incomplete (kept in $work)"
rm -rf "$work"
say "ok ($mode)"
