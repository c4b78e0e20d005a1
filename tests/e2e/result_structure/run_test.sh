#!/bin/bash
# run_test.sh BUILD_DIR : the result files of the `make run` sweep keep their structure and values.
#
# Runs every configuration of jobs/local.ini with BUILD_DIR/bin/hlp-sweep + hlp-train, 2 steps
# each (make_fixtures.sh), then compares each result file with its fixture in fixtures/ (made with
# the baseline commit named in README.md) by compare_results.py: the same groups, datasets and
# attributes with the same types and shapes, every non-timing value equal (floats that depend on
# summation order within rtol 1e-5). Paths listed in allowed_additions.txt may exist in the new
# files only. A configuration missing on either side fails.
# BUILD_DIR may also be a directory that holds the binaries itself (BUILD_DIR/hlp-train).
# Exit: 0 same; 1 a difference or a failed run; 2 bad usage.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
if [ -x "$1/bin/hlp-train" ]; then bin_dir="$1/bin"
elif [ -x "$1/hlp-train" ]; then bin_dir="$1"
else echo "$0: no hlp-train in $1/bin or $1" >&2; exit 2; fi
fixtures="$here/fixtures"
work=$(mktemp -d "${TMPDIR:-/tmp}/hlp-result-structure-test.XXXXXX")
keep=0
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "[result_structure] files kept in $work" >&2; fi; }
trap cleanup EXIT
start=$(date +%s)

allow=()
while IFS= read -r line; do
  line=${line%%#*}; line=$(echo "$line" | tr -d '[:space:]')
  [ -n "$line" ] && allow+=(--allow-added "$line")
done < "$here/allowed_additions.txt"

# The baseline computed the loss from the full logits; `--loss-impl chunked` (issue 41, the default
# since) holds less in the head and changes the memory numbers the fixtures pin down. The
# comparison runs the new build with the baseline's loss; the chunked loss has its own tests.
export HLP_FIXTURE_EXTRA_ARGS="--loss-impl full"
if ! "$here/make_fixtures.sh" "$bin_dir" "$work/new"; then
  keep=1; echo "[result_structure] FAIL: the sweep did not run" >&2; exit 1
fi

failed=0
shopt -s nullglob
ref_names=$(cd "$fixtures" && ls -1 *.h5 2>/dev/null | sort)
new_names=$(cd "$work/new" && ls -1 *.h5 2>/dev/null | sort)
[ -n "$ref_names" ] || { echo "[result_structure] FAIL: no fixtures in $fixtures" >&2; exit 1; }
for name in $(comm -23 <(echo "$ref_names") <(echo "$new_names")); do
  echo "$name: configuration missing in new (fixture exists, the new sweep wrote no such file)"; failed=1
done
for name in $(comm -13 <(echo "$ref_names") <(echo "$new_names")); do
  echo "$name: configuration added in new (no fixture; regenerate the fixtures if intended)"; failed=1
done
for name in $(comm -12 <(echo "$ref_names") <(echo "$new_names")); do
  /usr/bin/python3 "$here/compare_results.py" "${allow[@]}" "$fixtures/$name" "$work/new/$name"
  rc=$?
  [ $rc -eq 0 ] || failed=1
  [ $rc -le 1 ] || echo "$name: compare_results.py exit $rc"
done
if [ $failed -ne 0 ]; then
  keep=1
  echo "[result_structure] FAIL after $(( $(date +%s) - start )) s: result files differ from the fixtures (above)" >&2
  exit 1
fi
echo "[result_structure] ok: $(echo "$ref_names" | wc -l) configurations match their fixtures ($(( $(date +%s) - start )) s)"
