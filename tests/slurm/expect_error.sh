#!/bin/bash
# expect_error.sh REGEX COMMAND ARGS... : passes when COMMAND exits non-zero (not by a crash),
# prints exactly one line on stderr, and that line matches the extended REGEX.
regex=$1; shift
err=$(mktemp); trap 'rm -f "$err"' EXIT
"$@" >/dev/null 2>"$err"; rc=$?
echo "exit $rc, stderr: $(cat "$err")"
[ "$rc" -ne 0 ] || { echo "FAIL: expected a non-zero exit"; exit 1; }
[ "$rc" -lt 128 ] || { echo "FAIL: crashed (signal $((rc - 128)))"; exit 1; }
[ "$(wc -l < "$err")" -eq 1 ] || { echo "FAIL: expected exactly one line on stderr"; exit 1; }
grep -Eq -- "$regex" "$err" || { echo "FAIL: stderr does not match /$regex/"; exit 1; }
echo "ok"
