"""Shared by the check_*.py scripts of tests/analysis: expect() counts failed checks and prints
each on stderr; finish() prints the count and exits non-zero if any failed."""
import sys

_failures = 0


def expect(cond, what):
    global _failures
    if not cond:
        _failures += 1
        print("FAIL:", what, file=sys.stderr)


def finish(name):
    print(f"{name}: {_failures} failure(s)")
    sys.exit(1 if _failures else 0)
