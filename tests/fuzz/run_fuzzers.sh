#!/usr/bin/env bash
# Runs the libFuzzer targets built in BUILD_DIR (make fuzz), one after the other, each for
# SECONDS, and prints one summary line per target (also appended to BUILD_DIR/log.txt).
#   tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS [TARGET...]     (default: every target)
# Per target: working corpus BUILD_DIR/corpus/<target> (seeded from tests/fuzz/corpus/<target>),
# crash / timeout / out-of-memory inputs under BUILD_DIR/crashes/<target>/, libFuzzer's output
# in BUILD_DIR/logs/<target>.log. Limits (the contract in tests/fuzz/README.md): 10 s per
# input, 2 GiB RSS, 2 GiB per malloc. Exits 1 if any target failed, naming the input.
# Targets in FUZZ_FORK_TARGETS (default result_file) run in libFuzzer's fork mode and go on
# after a finding (-ignore_crashes): libhdf5 crashes on some corrupt files where HLP cannot
# stop it (README.md), and the run must still spend its time on the rest.
set -uo pipefail
mkdir -p "$1"
build_dir=$(cd "$1" && pwd)
seconds=$2
shift 2
src_dir=$(cd "$(dirname "$0")" && pwd)
bin_dir=$build_dir/bin
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$src_dir"/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp | sed 's/^fuzz_//')"); done
fi

# UBSan aborts on its first finding (the targets are built with -fno-sanitize-recover);
# a leak is a finding too (libFuzzer checks after each input that allocated), but for the
# third-party leaks of lsan.supp.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:symbolize=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src_dir/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fork_targets=" ${FUZZ_FORK_TARGETS-result_file} "

failed=0
for target in "${targets[@]}"; do
  exe=$bin_dir/fuzz_$target
  if [ ! -x "$exe" ]; then
    echo "[fuzz] $target: no fuzzer $exe (targets: $(ls "$src_dir"/fuzz_*.cpp | xargs -n1 basename | sed 's/^fuzz_//; s/\.cpp$//' | tr '\n' ' '))" >&2
    failed=1
    continue
  fi
  corpus=$build_dir/corpus/$target
  crashes=$build_dir/crashes/$target
  log=$build_dir/logs/$target.log
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  cp -n "$src_dir/corpus/$target"/* "$corpus"/ 2>/dev/null
  dict=()
  [ -f "$src_dir/$target.dict" ] && dict=(-dict="$src_dir/$target.dict")
  mode=()
  [[ $fork_targets == *" $target "* ]] && mode=(-fork=1 -ignore_crashes=1)
  before=$(ls "$corpus" | wc -l)
  findings_before=$(ls "$crashes" | wc -l)
  start=$(date +%s)
  # in the findings folder: fork mode leaves some inputs in the working directory too
  (cd "$crashes" && "$exe" "$corpus" "${dict[@]}" "${mode[@]}" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/") >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  stat() { grep -m1 "^stat::$1:" "$log" | awk '{print $2}'; }
  execs=$(stat number_of_executed_units)
  per_s=$(stat average_exec_per_sec)
  if [ ${#mode[@]} -gt 0 ]; then  # fork mode: its last progress line "#N: ... exec/s R ..."
    execs=$(grep -E '^#[0-9]+:' "$log" | tail -1 | sed -E 's/^#([0-9]+):.*/\1/')
    [ -n "$execs" ] && per_s=$(( execs / (elapsed > 0 ? elapsed : 1) ))
  fi
  after=$(ls "$corpus" | wc -l)
  artifact=$(grep -o 'Test unit written to .*' "$log" | tail -1 | sed 's/^Test unit written to //')
  crashes_found=$(( $(ls "$crashes" | wc -l) - findings_before ))
  [ $rc -ne 0 ] && [ $crashes_found -eq 0 ] && crashes_found=1
  [ $crashes_found -gt 0 ] && [ $rc -eq 0 ] && rc=1
  [ ${#mode[@]} -gt 0 ] && [ $crashes_found -gt 0 ] &&
    artifact="$crashes_found new in $crashes/, last $(ls -t "$crashes" | sed -n 1p)"
  line="$(date -u +%FT%TZ) $target: ${elapsed} s, ${execs:-?} execs, ${per_s:-?} exec/s, corpus ${after} (+$((after - before)) new), crashes ${crashes_found}"
  if [ $rc -ne 0 ]; then
    why=$(grep -m1 -E '^==[0-9]+==ERROR|SUMMARY: |ALARM|out-of-memory|uncaught exception|deadly signal|runtime error' "$log")
    line="$line: ${artifact:-no input written} (${why:-exit $rc}; log $log)"
    failed=1
  fi
  echo "[fuzz] $line"
  echo "$line" >>"$build_dir/log.txt"
  # inputs of processes that crashed (fuzz_input.h removes its folder only at a normal exit)
  for d in /dev/shm/hlp-fuzz-*; do
    [ -d "$d" ] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
  done
done
exit $failed
