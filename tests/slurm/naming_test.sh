#!/bin/bash
# One name per run. For the meshes of tests/slurm/naming/*.ini (dp x pp x tp at 8 ranks, cp
# meshes alone and with tp at 4), the configuration name hlp-sweep renders (before "-n<ranks>")
# equals the strategy hlp-train records in the result file and the candidate hlp-plan prints
# for the same configuration (before " n="); the result file's mesh_sizes multiply to the world.
# usage: naming_test.sh HLP_SWEEP HLP_TRAIN HLP_PLAN
set -euo pipefail
: "${HLP_SOURCE_DIR:?set by ctest}"
sweep=$1 train=$2 plan=$3
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/hlp-naming.XXXXXX); trap 'rm -rf "$work"' EXIT
fail() { echo "naming_test: FAIL: $*" >&2; exit 1; }

: > "$work/runs.txt"
for job in mesh8 mesh4; do
  "$sweep" "$HLP_SOURCE_DIR/tests/slurm/naming/$job.ini" --site local --no-plan \
      --out "$work/$job" > "$work/$job.render.log" ||
    { cat "$work/$job.render.log"; fail "render $job"; }
  for ini in "$work/$job"/configs/*.ini; do
    name=$(basename "$ini" .ini)
    ranks=$(printf '%s\n' "$name" | sed -E 's/.*-n([0-9]+)(-.*)?$/\1/')
    echo "$name: mpiexec -n $ranks"
    "$MPIEXEC" -n "$ranks" "$train" --config "$ini" --out "$work/results/$name.h5" \
        > "$work/results-$name.log" 2>&1 ||
      { tail -5 "$work/results-$name.log"; fail "$name did not run"; }
    echo "$ranks $ini" >> "$work/runs.txt"
  done
done
"$plan" --runs "$work/runs.txt" > "$work/plan.csv" || fail "hlp-plan --runs"

/usr/bin/python3 - "$work" <<'PY'
import csv, os, sys
import h5py
work = sys.argv[1]
runs = [l.split(None, 1) for l in open(os.path.join(work, "runs.txt")).read().splitlines()]
plan = list(csv.DictReader(open(os.path.join(work, "plan.csv"))))
assert len(plan) == len(runs), f"hlp-plan printed {len(plan)} rows for {len(runs)} runs"
bad = []
for (ranks, ini), row in zip(runs, plan):
    config = os.path.basename(ini.strip())[:-len(".ini")]
    swept = config.split(f"-n{ranks}")[0]
    with h5py.File(os.path.join(work, "results", config + ".h5"), "r") as f:
        recorded = f.attrs["strategy"]
        recorded = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
        axes = f.attrs["mesh_axes"]
        axes = (axes.decode() if isinstance(axes, bytes) else str(axes)).split(",")
        sizes = [int(s) for s in f.attrs["mesh_sizes"]]
        world = int(f.attrs["world_size"])
    planned = row["name"].split(" n=")[0]
    product = 1  # ep is carved out of dp x cp: every axis but ep multiplies to the world
    for a, s in zip(axes, sizes):
        product *= s if a != "ep" else 1
    line = f"{config}: sweep {swept}, hlp-train {recorded}, hlp-plan {planned}, mesh " + \
        " x ".join(f"{a} {s}" for a, s in zip(axes, sizes))
    print(line)
    if not (swept == recorded == planned) or product != world or axes != ["dp", "pp", "tp", "cp", "ep"]:
        bad.append(line)
    if row["problem"]:
        bad.append(f"{config}: hlp-plan refused it: {row['problem']}")
if bad:
    sys.exit("naming_test: FAIL:\n  " + "\n  ".join(bad))
print(f"naming_test: {len(runs)} configurations, one name each")
PY
