#!/bin/bash
# cluster_test.sh ok|failing_task|requeue : hlp-sweep --submit on the project's one-machine Slurm
# (slurm/local-cluster.sh), with the hlp-train STAND-IN as the task program (sweep mechanics
# only; a real MPI program, 2 strategies x 2 rank counts). Brings the cluster up and always down.
#   ok            every task completes, results are complete, the analysis job writes the report;
#                 submitted again, the finished sweep runs nothing and changes no file
#   failing_task  one strategy fails: `local-cluster.sh wait` names the failed array tasks, and
#                 the analysis job (afterany) still runs and its report lists the failed ones
#   requeue       USR1 to a running task (as Slurm does before the time limit): the script forwards
#                 it, the task checkpoints, requeues itself and resumes to completion
set -euo pipefail
source "$HLP_SOURCE_DIR/tests/slurm/lib.sh"
mode=$1
cluster_session
work=$(mktemp -d /tmp/hlp-cluster-test.XXXXXX)
make_standin_bin "$work/bin"

if [ "$mode" = requeue ]; then
  printf '%s\n' "name = requeue" "[fixed]" "strategy = ddp" "steps = 30" "ranks = 2" > "$work/sweep.ini"
  export HLP_STANDIN_STEP_S=0.2
else
  printf '%s\n' "name = tiny" "[job]" "time = 00:05:00" "[fixed]" "model = tiny" "steps = 2" \
    "[sweep]" "strategy = ddp, fsdp" "ranks = 1, 2" > "$work/sweep.ini"
fi
[ "$mode" = failing_task ] && export HLP_STANDIN_FAIL_STRATEGY=fsdp   # sbatch passes the environment on

"$HLP_BIN_DIR/hlp-sweep" "$work/sweep.ini" --site local --out "$work/out" --hlp-bin "$work/bin" --submit \
    | tee "$work/submit.out"
arrays=$(submitted_ids "$work/out" array)
analysis=$(submitted_ids "$work/out" analysis)
[ -n "$arrays" ] && [ -n "$analysis" ] || fail "hlp-sweep --submit printed no job ids"
say "arrays $arrays, analysis $analysis"

case "$mode" in
ok)
  bash "$CLUSTER" wait "$arrays,$analysis" 240 || fail "the sweep did not complete"
  for config in ddp-n1 ddp-n2 fsdp-n1 fsdp-n2; do
    h5="$work/out/results/$config.h5"
    [ "$(h5_int_attr "$h5" complete)" = 1 ] || fail "$h5 is missing or not complete"
  done
  [ "$(h5_int_attr "$work/out/results/ddp-n2.h5" world_size)" = 2 ] || fail "ddp-n2 did not run as one 2-rank MPI world"
  [ "$(grep -c '^- ' "$work/out/report/index.md")" = 4 ] || fail "the analysis job did not report the 4 results"
  [ -s "$work/out/logs/tiny-n2-1.out" ] || fail "no per-task log tiny-n2-1.out"
  # Resubmitted, a finished sweep runs nothing and overwrites nothing (issue 39).
  sums=$(cd "$work/out/results" && sha256sum *.h5)
  submitted=$(cat "$work/out/submitted.txt")
  "$HLP_BIN_DIR/hlp-sweep" "$work/sweep.ini" --site local --out "$work/out" --hlp-bin "$work/bin" \
      --submit > "$work/resubmit.out"
  cat "$work/resubmit.out"
  grep -q "every configuration has a complete result; nothing to run" "$work/resubmit.out" \
    || fail "a finished sweep was submitted again"
  [ "$(cat "$work/out/submitted.txt")" = "$submitted" ] || fail "the resubmission submitted jobs"
  [ "$(cd "$work/out/results" && sha256sum *.h5)" = "$sums" ] || fail "the resubmission changed a result file"
  [ -z "$(squeue -h -o %i 2>/dev/null)" ] || fail "jobs are queued after resubmitting a finished sweep"
  ;;
failing_task)
  set +e
  bash "$CLUSTER" wait "$arrays,$analysis" 240 2> "$work/wait.err"; rc=$?
  set -e
  cat "$work/wait.err" >&2
  [ "$rc" = 1 ] || fail "local-cluster.sh wait should exit 1 for failed tasks, got $rc"
  n1=$(cut -d, -f1 <<<"$arrays"); n2=$(cut -d, -f2 <<<"$arrays")
  grep -Eq "FAILED: job ${n1}_1 \(tiny-n1\) state FAILED exit 3:0" "$work/wait.err" || fail "fsdp-n1 failure not reported"
  grep -Eq "FAILED: job ${n2}_1 \(tiny-n2\) state FAILED exit 3:0" "$work/wait.err" || fail "fsdp-n2 failure not reported"
  ! grep -q "job $analysis " "$work/wait.err" || fail "the analysis job did not complete after the failures"
  [ -s "$work/out/report/index.md" ] || fail "no report although the analysis runs after every task (afterany)"
  for config in fsdp-n1 fsdp-n2; do
    grep -qx "missing: $config" "$work/out/report/index.md" || fail "the report does not list the failed $config"
  done
  [ "$(grep -c '^- ' "$work/out/report/index.md")" = 2 ] || fail "the report should hold the 2 healthy results"
  [ "$(h5_int_attr "$work/out/results/ddp-n2.h5" complete)" = 1 ] || fail "the healthy tasks should still complete"
  ;;
requeue)
  task="${arrays}_0"
  log="$work/out/logs/requeue-n2-0.out"
  job_state() { scontrol show job -o "$task" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true; }
  # USR1 only once every rank is in its step loop (the stand-in says so on stderr).
  for _ in $(seq 1 600); do grep -q 'running from step 0' "$log" 2>/dev/null && break; sleep 0.1; done
  grep -q 'running from step 0' "$log" || { cat "$log" >&2; fail "the task never started its steps"; }
  sleep 0.5
  scancel --signal=USR1 --batch "$task"   # what --signal=B:USR1@N does before the time limit
  # The requeued task pends until its old credential expires (local-cluster.sh: cred_expire=10 s).
  st=""
  for _ in $(seq 1 600); do st=$(job_state); [ "$st" = PENDING ] && break; sleep 0.1; done
  [ "$st" = PENDING ] || { cat "$log" >&2; fail "the task was not requeued after USR1 (state $st)"; }
  bash "$CLUSTER" wait "$arrays,$analysis" 120 || { cat "$log" >&2; fail "the requeued task did not complete"; }
  grep -q 'requeueing this task' "$log" || fail "the script did not requeue after USR1"
  h5="$work/out/results/ddp-n2.h5"
  [ "$(h5_int_attr "$h5" complete)" = 1 ] || fail "$h5 not complete after the resume"
  resumed=$(h5_int_attr "$h5" resumed_from_step)
  [ -n "$resumed" ] && [ "$resumed" -gt 0 ] || fail "the second run did not resume from the checkpoint ($resumed)"
  say "resumed from step $resumed"
  ;;
*) fail "unknown mode $mode" ;;
esac
rm -rf "$work"
say "ok ($mode)"
