#!/usr/bin/env bash
# hlp-train with broken configurations, launched like a user would (1 rank and mpiexec -n 2):
# exactly one line on stderr naming the problem, a non-zero exit, no hang.
set -u
HLP_TRAIN=$1
MPIEXEC=${HLP_MPIEXEC:-mpiexec}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'strategy = ddp\ncolour = red\n' > "$tmp/unknown.ini"
printf 'steps = many\n' > "$tmp/badvalue.ini"
fail=0

# expect NAME EXPECTED_SUBSTRING -- command...
source "$(dirname "$0")/expect_one_line_error.sh"
expect() { local name=$1; shift; expect_one_line_error "$name" nonzero "$@"; }

for launch in "" "$MPIEXEC -n 2"; do
  tag=${launch:+mpi2-}
  expect "${tag}unknown-option" "no-such" -- $launch "$HLP_TRAIN" --no-such 1
  expect "${tag}bad-value" "steps" -- $launch "$HLP_TRAIN" --steps -3
  expect "${tag}bad-choice" "--strategy" -- $launch "$HLP_TRAIN" --strategy zero
  expect "${tag}missing-ini" "missing.ini" -- $launch "$HLP_TRAIN" --config "$tmp/missing.ini"
  expect "${tag}unknown-ini-key" "colour" -- $launch "$HLP_TRAIN" --config "$tmp/unknown.ini"
  expect "${tag}bad-ini-value" "steps" -- $launch "$HLP_TRAIN" --config "$tmp/badvalue.ini"
done
exit $fail
