#!/bin/bash
# golden_test.sh SITE : renders tests/slurm/golden/sweep.ini for SITE and diffs every rendered
# script against tests/slurm/golden/SITE/ (the sweep directory is replaced by @SWEEP_DIR@; on the
# local site, srun's PMI plugin, which is the build's MPI's (HLP_SRUN_MPI), by @LOCAL_SRUN_MPI@).
# HLP_UPDATE_GOLDEN=1 rewrites the golden files instead (review the diff before committing).
set -euo pipefail
source "$HLP_SOURCE_DIR/tests/slurm/lib.sh"
site=$1
golden="$HLP_SOURCE_DIR/tests/slurm/golden/$site"
work=$(mktemp -d /tmp/hlp-golden.XXXXXX); trap 'rm -rf "$work"' EXIT
cd "$work"
"$HLP_BIN_DIR/hlp-sweep" "$HLP_SOURCE_DIR/tests/slurm/golden/sweep.ini" --site "$site" \
    --out "$work/sweep" --hlp-bin /opt/hlp/bin --templates "$HLP_SOURCE_DIR/slurm/templates" > "$work/stdout"
for f in "$work"/sweep/*.sbatch "$work"/sweep/submit.sh; do
  bash -n "$f" || fail "$(basename "$f") is not valid bash"
done
rendered="$work/normalized"; mkdir -p "$rendered"
plugin=()
[ "$site" = local ] && plugin=(-e "s|srun --mpi=${HLP_SRUN_MPI:?set by ctest} |srun --mpi=@LOCAL_SRUN_MPI@ |")
for f in "$work"/sweep/*.sbatch "$work"/sweep/submit.sh; do
  sed -e "s|$work/sweep|@SWEEP_DIR@|g" -e "s|$HLP_SOURCE_DIR|@SOURCE_DIR@|g" "${plugin[@]}" "$f" \
    > "$rendered/$(basename "$f")"
done
if [ "${HLP_UPDATE_GOLDEN:-0}" = 1 ]; then
  rm -rf "$golden"; mkdir -p "$golden"; cp "$rendered"/* "$golden/"
  say "golden files of $site rewritten in $golden"; exit 0
fi
[ -d "$golden" ] || fail "no golden files in $golden (HLP_UPDATE_GOLDEN=1 creates them)"
diff -ru "$golden" "$rendered" || fail "rendered scripts for $site differ from $golden (see diff above)"
say "ok: $(ls "$rendered" | wc -l) files of $site match"
