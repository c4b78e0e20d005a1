#!/bin/bash
# hlp-sweep --run-local with the hlp-train STAND-IN (sweep mechanics only; the real trainer is
# tested in tests/e2e): every configuration runs under mpiexec with its rank count, one progress
# line each, a failing configuration is reported and counted, the analysis still runs; run
# again, the complete results are left out and untouched, --rerun runs everything.
set -euo pipefail
source "$HLP_SOURCE_DIR/tests/slurm/lib.sh"
work=$(mktemp -d /tmp/hlp-run-local.XXXXXX); trap 'rm -rf "$work"' EXIT
make_standin_bin "$work/bin"
cat > "$work/tiny.ini" <<'INI'
name = tiny
[fixed]
model = tiny
steps = 2
[sweep]
strategy = ddp, fsdp
ranks = 1, 2
INI
"$HLP_BIN_DIR/hlp-sweep" "$work/tiny.ini" --site local --out "$work/out" --hlp-bin "$work/bin" \
    --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local | tee "$work/stdout"
grep -Eq '^\[1/4\] ddp n=1 \.\.\. ok [0-9.]+ s$' "$work/stdout" || fail "no progress line for [1/4]"
grep -Eq '^\[4/4\] fsdp n=2 \.\.\. ok [0-9.]+ s$' "$work/stdout" || fail "no progress line for [4/4]"
for config in ddp-n1 ddp-n2 fsdp-n1 fsdp-n2; do
  h5="$work/out/results/$config.h5"
  [ "$(h5_int_attr "$h5" complete)" = 1 ] || fail "$h5 is not complete"
done
[ "$(h5_int_attr "$work/out/results/fsdp-n2.h5" world_size)" = 2 ] || fail "fsdp-n2 did not run on 2 ranks"
[ "$(grep -c '^- ' "$work/out/report/index.md")" = 4 ] || fail "the report does not list 4 results"

# One failing strategy: reported per configuration, exit status 1, the rest still analysed.
rm -rf "$work/out/results"
set +e
HLP_STANDIN_FAIL_STRATEGY=fsdp "$HLP_BIN_DIR/hlp-sweep" "$work/tiny.ini" --site local --out "$work/out" \
    --hlp-bin "$work/bin" --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local > "$work/stdout2"
rc=$?
set -e
cat "$work/stdout2"
[ "$rc" = 1 ] || fail "expected exit 1 with a failing configuration, got $rc"
grep -Eq '^\[3/4\] fsdp n=1 \.\.\. FAILED \(exit 3\) [0-9.]+ s: stand-in hlp-train: failing on purpose \(strategy fsdp\) \(log: .*logs/fsdp-n1.log\)$' \
  "$work/stdout2" || fail "failure not reported with its last log line"
grep -q 'failing on purpose' "$work/out/logs/fsdp-n1.log" || fail "the failing task's log lacks its stderr"
grep -q '^2 of 4 configurations ok' "$work/stdout2" || fail "no summary line"
[ "$(grep -c '^- ' "$work/out/report/index.md")" = 2 ] || fail "the report should list the 2 results"

# Idempotent (issue 39): the 2 complete results are left out and untouched, the failed ones run.
sums() { (cd "$work/out/results" && sha256sum ddp-n1.h5 ddp-n2.h5); }
before=$(sums)
"$HLP_BIN_DIR/hlp-sweep" "$work/tiny.ini" --site local --out "$work/out" --hlp-bin "$work/bin" \
    --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local > "$work/stdout3"
cat "$work/stdout3"
grep -q '^finished (complete result file in .*, left out; --rerun runs them again): ddp-n1 ddp-n2$' \
  "$work/stdout3" || fail "the finished configurations are not listed once"
grep -Eq '^\[2/2\] fsdp n=2 \.\.\. ok' "$work/stdout3" || fail "the 2 unfinished configurations did not run"
[ "$(sums)" = "$before" ] || fail "a complete result file was rewritten"
# Everything finished: nothing runs, nothing is written.
"$HLP_BIN_DIR/hlp-sweep" "$work/tiny.ini" --site local --out "$work/out" --hlp-bin "$work/bin" \
    --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local > "$work/stdout4"
grep -q "every configuration has a complete result; nothing to run" "$work/stdout4" \
  || { cat "$work/stdout4"; fail "a finished sweep ran again"; }
! grep -q '^\[' "$work/stdout4" || fail "a finished sweep started a configuration"
[ "$(sums)" = "$before" ] || fail "a finished sweep rewrote a result file"
# --rerun runs all of them again.
"$HLP_BIN_DIR/hlp-sweep" "$work/tiny.ini" --site local --out "$work/out" --hlp-bin "$work/bin" \
    --mpiexec "${HLP_MPIEXEC:-mpiexec}" --run-local --rerun > "$work/stdout5"
grep -q '^4 of 4 configurations ok' "$work/stdout5" || { cat "$work/stdout5"; fail "--rerun did not run all 4"; }
say "ok"
