#!/bin/bash
# make_fixtures.sh BIN_DIR OUT_DIR [--gzip]
#
# Runs the configurations of the `make run` sweep (jobs/local.ini) with the binaries in BIN_DIR,
# each cut to STEPS steps, and writes OUT_DIR/<config-name>.h5 (one result file a configuration).
#
#   1. BIN_DIR/hlp-sweep renders jobs/local.ini (--site local) into a temp dir: configs/<name>.ini,
#      exactly what `make run` (hlp-sweep --run-local) runs.
#   2. Every configuration runs as hlp-sweep --run-local launches it (slurm/src/launch.cpp):
#        $HLP_MPIEXEC -n RANKS BIN_DIR/hlp-train --config configs/<name>.ini --out <name>.h5
#                     --checkpoint-dir <fresh dir>
#      plus `--steps STEPS` (the command line wins over --config) and $HLP_FIXTURE_EXTRA_ARGS
#      when set (run_test.sh: options that keep a newer build comparable with the fixtures' baseline).
#      Nothing else is changed: the
#      rendered INI (warmup-steps = 2, trace = true, threads = 1 ...) is kept as it is.
#      RANKS is the "run with N ranks" of the rendered INI's header (checked against -nN- in the
#      configuration's name).
#   3. --gzip: each file is rewritten with `h5repack -L -f GZIP=9` (how the committed fixtures are
#      stored: latest file format + gzip, ~6x smaller; types, shapes, maximum shapes, attributes
#      and values are unchanged: `compare_results.py --all-exact RAW REPACKED` passes).
#
# Environment: HLP_MPIEXEC (default mpiexec), HLP_SOURCE_DIR (default: this repository),
# HLP_RS_STEPS (default 2; the fixtures are made with 2, change both together),
# OMP_NUM_THREADS=1 as ctest sets it (cmake/HLPTesting.cmake HLP_TEST_ENV), and
# CUDA_VISIBLE_DEVICES= (empty): the fixtures are CPU runs; the rendered `device = auto` would
# pick a GPU on a GPU machine, so GPUs are hidden (environment only, the INI is unchanged).
# Exit: 0 every configuration ran; 1 one failed (its log is printed); 2 bad usage.
set -euo pipefail
usage() { echo "usage: $0 BIN_DIR OUT_DIR [--gzip]" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage
bin_dir=$(cd "$1" && pwd) || usage
out_dir=$2
gzip=0
if [ $# -eq 3 ]; then [ "$3" = --gzip ] || usage; gzip=1; fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=${HLP_SOURCE_DIR:-$(cd "$here/../../.." && pwd)}
job="$source_dir/jobs/local.ini"
steps=${HLP_RS_STEPS:-2}
mpiexec=${HLP_MPIEXEC:-mpiexec}
export OMP_NUM_THREADS=1
export CUDA_VISIBLE_DEVICES=
for b in hlp-sweep hlp-train; do
  [ -x "$bin_dir/$b" ] || { echo "$0: no executable $bin_dir/$b" >&2; exit 2; }
done
[ -f "$job" ] || { echo "$0: no job file $job" >&2; exit 2; }

mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hlp-result-structure.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$bin_dir/hlp-sweep" "$job" --site local --out "$work/sweep" --hlp-bin "$bin_dir" >"$work/render.log" 2>&1 \
  || { cat "$work/render.log" >&2; echo "$0: hlp-sweep could not render $job" >&2; exit 1; }
shopt -s nullglob
configs=("$work/sweep/configs/"*.ini)
[ ${#configs[@]} -gt 0 ] || { echo "$0: hlp-sweep rendered no configuration" >&2; exit 1; }

ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { local d=$(( $(ms) - $1 )); printf '%d.%d' $((d / 1000)) $(((d % 1000) / 100)); }
start=$(ms)
for ini in "${configs[@]}"; do
  name=$(basename "$ini" .ini)
  ranks=$(sed -n 's/.*run with \([0-9][0-9]*\) ranks\{0,1\}.*/\1/p' "$ini" | sed -n 1p)
  [ -n "$ranks" ] || { echo "$0: no 'run with N ranks' line in $ini" >&2; exit 1; }
  case "$name" in *-n"$ranks"-*) ;; *) echo "$0: $name: header says $ranks ranks" >&2; exit 1 ;; esac
  ckpt="$work/checkpoints/$name"
  mkdir -p "$ckpt"
  rm -f "$out_dir/$name.h5"
  t0=$(ms)
  if ! "$mpiexec" -n "$ranks" "$bin_dir/hlp-train" --config "$ini" --out "$out_dir/$name.h5" \
       --checkpoint-dir "$ckpt" --steps "$steps" ${HLP_FIXTURE_EXTRA_ARGS:-} >"$work/$name.log" 2>&1; then
    tail -n 30 "$work/$name.log" >&2
    echo "$0: $name FAILED (mpiexec -n $ranks hlp-train --config $name.ini --steps $steps)" >&2
    exit 1
  fi
  if [ "$gzip" = 1 ]; then
    h5repack -L -f GZIP=9 "$out_dir/$name.h5" "$work/$name.gz.h5"
    /usr/bin/python3 "$here/compare_results.py" --all-exact --quiet "$out_dir/$name.h5" "$work/$name.gz.h5" \
      || { echo "$0: $name: h5repack changed the file" >&2; exit 1; }
    mv "$work/$name.gz.h5" "$out_dir/$name.h5"
  fi
  printf '[make_fixtures] %-18s %s rank(s) %5s s\n' "$name" "$ranks" "$(secs "$t0")"
done
printf '[make_fixtures] %d configurations, %d steps each, in %s s -> %s\n' "${#configs[@]}" "$steps" \
  "$(secs "$start")" "$out_dir"
