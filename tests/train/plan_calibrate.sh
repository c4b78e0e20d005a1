#!/usr/bin/env bash
# hlp-plan --calibrate on real result files: two tiny runs (single, ddp on 2 ranks), then the fit
# of efficiency and link bandwidth must not raise the mean |log(predicted / measured)| error, and
# every run gets a row. usage: plan_calibrate.sh HLP_PLAN HLP_TRAIN MPIEXEC
set -euo pipefail
plan=$1 train=$2 mpiexec=$3
dir=$(mktemp -d /tmp/hlp_plan_calibrate.XXXXXX)
trap 'rm -rf "$dir"' EXIT
opts=(--model tiny --seq-len 128 --global-batch 4 --micro-batch 1 --steps 4 --threads 1 --loader-threads 1)
"$train" "${opts[@]}" --strategy single --out "$dir/single.h5" > "$dir/single.log" 2>&1 \
  || { cat "$dir/single.log"; exit 1; }
"$mpiexec" -n 2 "$train" "${opts[@]}" --strategy ddp --out "$dir/ddp.h5" > "$dir/ddp.log" 2>&1 \
  || { cat "$dir/ddp.log"; exit 1; }
out=$("$plan" --calibrate "$dir")
echo "$out"
[ "$(grep -c '^| single n=1 T 128 (single.h5) \|^| ddp n=2 T 128 (ddp.h5) ' <<< "$out")" -eq 2 ] || { echo "FAIL: want a row per run"; exit 1; }
# "predicted before" is the prediction hlp-train recorded for its own run (/model plan_step_s):
# the same model on the CPU peak the run measured, not one hlp-plan measures now
for run in single ddp; do
  recorded=$(/usr/bin/python3 -c "import h5py, sys; print('%.4g' % h5py.File(sys.argv[1], 'r')['model'].attrs['plan_step_s'])" "$dir/$run.h5")
  before_run=$(grep "($run.h5)" <<< "$out" | awk -F'|' '{ gsub(/ /, "", $4); print $4 }')
  [ "$recorded" = "$before_run" ] || { echo "FAIL: $run: predicted before $before_run, recorded in the file $recorded"; exit 1; }
done
line=$(grep '^mean |log' <<< "$out")
before=$(sed -n 's/.*: \([0-9.]*\) before, \([0-9.]*\) after.*/\1/p' <<< "$line")
after=$(sed -n 's/.*: \([0-9.]*\) before, \([0-9.]*\) after.*/\2/p' <<< "$line")
awk -v b="$before" -v a="$after" 'BEGIN { exit !(a <= b) }' || { echo "FAIL: error after $after > before $before"; exit 1; }
# a missing directory, and one without result files: one line and exit 2
rc=0
msg=$("$plan" --calibrate "$dir/none" 2>&1) || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <<< "$msg")" -eq 1 ] || { echo "FAIL: missing dir: exit $rc, '$msg'"; exit 1; }
mkdir -p "$dir/empty"
msg=$("$plan" --calibrate "$dir/empty" 2>&1) && { echo "FAIL: empty dir accepted"; exit 1; } || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <<< "$msg")" -eq 1 ] || { echo "FAIL: empty dir: exit $rc, '$msg'"; exit 1; }
echo "plan_calibrate: ok (error $before -> $after)"
