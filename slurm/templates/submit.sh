#!/bin/bash
# Submits sweep '{{sweep}}' ({{config_count}} configurations in {{array_count}} job array(s)):
# the arrays first, then the analysis job, which starts only when every array task succeeded.
# `hlp-sweep ... --submit` does the same; this script is for submitting by hand later.
# Rendered by hlp-sweep from {{job_file}} for site '{{site}}' (template: slurm/templates/submit.sh).
set -euo pipefail
cd {{sweep_dir}}
array_ids=()
for script in {{array_scripts}}; do
  id=$(sbatch --parsable "$script")
  id=${id%%;*}   # --parsable prints "id" or "id;cluster"
  echo "array    $script: job $id"
  array_ids+=("$id")
done
dependency=$(IFS=:; echo "${array_ids[*]}")
id=$(sbatch --parsable --dependency=afterany:"$dependency" {{analysis_script}})
echo "analysis {{analysis_script}}: job ${id%%;*} (after $dependency)"
echo "results: {{results_dir}}   report: {{report_dir}}   logs: {{log_dir}}"
