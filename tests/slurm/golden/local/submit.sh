#!/bin/bash
# Submits sweep 'golden' (28 configurations in 3 job array(s)):
# the arrays first, then the analysis job, which starts only when every array task succeeded.
# `hlp-sweep ... --submit` does the same; this script is for submitting by hand later.
# Rendered by hlp-sweep from @SOURCE_DIR@/tests/slurm/golden/sweep.ini for site 'local' (template: slurm/templates/submit.sh).
set -euo pipefail
cd @SWEEP_DIR@
array_ids=()
for script in golden-n2.sbatch golden-n8.sbatch golden-n16.sbatch; do
  id=$(sbatch --parsable "$script")
  id=${id%%;*}   # --parsable prints "id" or "id;cluster"
  echo "array    $script: job $id"
  array_ids+=("$id")
done
dependency=$(IFS=:; echo "${array_ids[*]}")
id=$(sbatch --parsable --dependency=afterany:"$dependency" golden-analyze.sbatch)
echo "analysis golden-analyze.sbatch: job ${id%%;*} (after $dependency)"
echo "results: @SWEEP_DIR@/results   report: @SWEEP_DIR@/report   logs: @SWEEP_DIR@/logs"
