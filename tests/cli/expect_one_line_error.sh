# Sourced by the CLI error tests (broken_configs.sh, device_check.sh, hostile_inputs.sh).
# Needs $tmp (a scratch directory) and a `fail` variable; sets fail=1 on a mismatch.
# expect_one_line_error NAME WANT_RC EXPECTED_SUBSTRING -- command...
#   WANT_RC: an exit code, or "nonzero" (any failure but a timeout). The command must also print
#   exactly one line on stderr, in valid UTF-8, containing EXPECTED_SUBSTRING (a fixed string),
#   within 60 s (no hang).
expect_one_line_error() {
  local name=$1 want_rc=$2 want=$3; shift 4
  local rc
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  local lines; lines=$(grep -c . "$tmp/err")
  if [ "$want_rc" = nonzero ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; }; then
    echo "FAIL $name: exit code $rc (want non-zero, no timeout)"; fail=1
  elif [ "$want_rc" != nonzero ] && [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL $name: exit code $rc (want $want_rc)"; cat "$tmp/err"; fail=1
  elif [ "$lines" -ne 1 ]; then
    echo "FAIL $name: $lines stderr lines (want exactly 1):"; cat "$tmp/err"; fail=1
  elif ! iconv -f UTF-8 -t UTF-8 "$tmp/err" >/dev/null 2>&1; then
    echo "FAIL $name: stderr is not valid UTF-8:"; od -c "$tmp/err" | head -5; fail=1
  elif ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: stderr lacks '$want':"; cat "$tmp/err"; fail=1
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}
