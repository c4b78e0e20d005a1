#!/usr/bin/env bash
# Prints the ctest regex (entries joined with '|') of a test list in tests/sanitize/: one regex
# of ctest test names a line; lines starting with '#' (the reason for the entry below) and blank
# lines are skipped. `make sanitize` passes it to ctest -E (asan-exclude.txt) or -R
# (tsan-tests.txt). An empty list prints a regex that matches no test name.
#   tools/sanitize-tests.sh tests/sanitize/asan-exclude.txt
set -euo pipefail
list="${1:?usage: $0 LIST}"
regex="$({ grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$list" || true; } | paste -sd'|' -)"
echo "${regex:-^\$hlp-no-test^}"
