#!/usr/bin/env bash
# hlp-sweep's cost before submit (issue 38), checked by parsing its numbers (cost_check.py):
#   cost_test.sh HLP_SWEEP report JOB RATE  jobs/JOB.ini on psc-bridges2: every configuration's
#                                           GPU-hours from hlp-plan's step time, SUs = GPU-hours x
#                                           RATE (the rate slurm/README.md cites for the job's
#                                           gpu-type), the total, the worst case of every array
#   cost_test.sh HLP_SWEEP rates            tests/slurm/plan-prune.ini: a job file's
#                                           su-per-gpu-hour changes the SUs and not the GPU-hours;
#                                           startup-s changes the GPU-hours; a generic site without
#                                           a rate says "no rate"; local counts rank-hours
set -euo pipefail
: "${HLP_SOURCE_DIR:?set by ctest}"
sweep_bin=$1; mode=$2
work=$(mktemp -d /tmp/hlp-cost.XXXXXX); trap 'rm -rf "$work"' EXIT
check="$HLP_SOURCE_DIR/tests/slurm/cost_check.py"
fail() { echo "cost_test: FAIL: $*" >&2; exit 1; }

# render JOB_FILE SITE OUT [hlp-sweep options...]: hlp-sweep's stdout in OUT.stdout
render() {
  local job=$1 site=$2 out=$3; shift 3
  "$sweep_bin" "$job" --site "$site" --out "$out" "$@" > "$out.stdout" ||
    { cat "$out.stdout"; fail "hlp-sweep $job --site $site failed"; }
}
totals() { tail -n1 <<<"$1" | awk '$1 == "totals" {print $2, $3}'; }

if [ "$mode" = report ]; then
  job=$3; rate=$4
  : "${HLP_QWEN3_TOKENIZER:?set by ctest}"
  # the shipped sweeps name their tokenizer relative to the repository root (build/datasets/...)
  root=$work/root
  mkdir -p "$root/build/datasets/qwen3"
  ln -s "$HLP_SOURCE_DIR/jobs" "$root/jobs"
  ln -s "$HLP_QWEN3_TOKENIZER" "$root/build/datasets/qwen3/tokenizer.json"
  (cd "$root" && render "jobs/$job.ini" psc-bridges2 "$work/$job")
  sed -n '/^cost of sweep/,/^to submit/p' "$work/$job.stdout"
  result=$(python3 "$check" "$work/$job.stdout" "$work/$job" --rate "$rate") || { echo "$result"; exit 1; }
  echo "$result"
  read -r hours sus <<<"$(totals "$result")"
  awk -v h="$hours" 'BEGIN {exit !(h > 0)}' || fail "no GPU-hours predicted for $job"
  echo "cost_test: $job ok"
  exit 0
fi

[ "$mode" = rates ] || fail "unknown mode '$mode' (report or rates)"
base="$HLP_SOURCE_DIR/tests/slurm/plan-prune.ini"   # small on v100-16: 1 SU/GPU-hour

render "$base" psc-bridges2 "$work/cited"
cited=$(python3 "$check" "$work/cited.stdout" "$work/cited" --rate 1 --startup-s 39) || { echo "$cited"; exit 1; }
echo "$cited"
grep -q "^cost of sweep 'plan-prune' on v100-16 GPUs at 1 SU/GPU-hour (PSC Bridges-2 User Guide's rate for v100-16 as transcribed, check it" \
    "$work/cited.stdout" || fail "the heading does not name the cited rate"

# su-per-gpu-hour in the site section: same GPU-hours, SUs x 0.5, passed to the report
{ cat "$base"; printf '%s\n' "[psc-bridges2]" "su-per-gpu-hour = 0.5"; } > "$work/half.ini"
render "$work/half.ini" psc-bridges2 "$work/half"
half=$(python3 "$check" "$work/half.stdout" "$work/half" --rate 0.5) || { echo "$half"; exit 1; }
echo "$half"
grep -q "at 0.5 SU/GPU-hour (job file su-per-gpu-hour" "$work/half.stdout" || fail "override not named"
read -r h1 s1 <<<"$(totals "$cited")"; read -r h2 s2 <<<"$(totals "$half")"
[ "$h1" = "$h2" ] || fail "su-per-gpu-hour changed the GPU-hours ($h1 -> $h2)"
awk -v a="$s1" -v b="$s2" 'BEGIN {d = a / 2 - b; exit !(d < 0.0002 && d > -0.0002 && a > 0)}' ||
  fail "su-per-gpu-hour = 0.5 did not halve the SUs ($s1 -> $s2)"

# startup-s: the allowance each configuration adds
{ sed 's/^\[job\]$/[job]\nstartup-s = 600/' "$base"; } > "$work/slow.ini"
render "$work/slow.ini" psc-bridges2 "$work/slow"
slow=$(python3 "$check" "$work/slow.stdout" "$work/slow" --rate 1 --startup-s 600) || { echo "$slow"; exit 1; }
echo "$slow"
grep -q "start-up from the job file's startup-s" "$work/slow.stdout" || fail "startup-s not named"

# generic with a GPU type and no rate: GPU-hours, SUs marked "no rate", nothing passed to the report
{ cat "$base"; printf '%s\n' "[generic]" "gpu-type = v100-16"; } > "$work/generic.ini"
render "$work/generic.ini" generic "$work/generic"
python3 "$check" "$work/generic.stdout" "$work/generic" --rate none
grep -q "no SU rate for this site and GPU type (set su-per-gpu-hour = R in \[generic\] to see SUs)" \
    "$work/generic.stdout" || fail "no-rate heading"
# ... and with one: how a generic site gets SUs
printf '%s\n' "su-per-gpu-hour = 3" >> "$work/generic.ini"
render "$work/generic.ini" generic "$work/generic3"
python3 "$check" "$work/generic3.stdout" "$work/generic3" --rate 3

# local: CPU ranks, rank-hours, no SUs (su-per-gpu-hour in [job] does not apply to them)
{ sed 's/^\[job\]$/[job]\nsu-per-gpu-hour = 5/' "$base"; } > "$work/local.ini"
render "$work/local.ini" local "$work/local"
python3 "$check" "$work/local.stdout" "$work/local" --rate rank
grep -q "not costed (no time prediction: CPU ranks; hlp-plan plans GPU configurations only)" \
    "$work/local.stdout" || fail "local configurations are not listed as not costed"
echo "cost_test: rates ok"
