#!/usr/bin/python3
"""Shell scripts under `set -o pipefail` must not end a pipeline with a reader that exits before
its input ends (`grep -q`, `grep -m N`, `head`): the writer then dies of SIGPIPE, the pipeline
returns 141, and a test that matched reads as failed (issue 33: `hlp-train --help | grep -q` made
tools/gpu-check.sh report that hlp-train had no --device option). Use `grep PATTERN >/dev/null`,
`sed -n 1p` or `awk 'NR == 1'`, which read to the end; or end the line with `|| true` where the
status does not matter.

    check_pipefail.py SOURCE_DIR      (every tracked *.sh, *.sbatch and Makefile under it)
"""
import re
import subprocess
import sys

root = sys.argv[1]
files = subprocess.run(["git", "-C", root, "ls-files", "*.sh", "*.sbatch", "*.sh.in"],
                       capture_output=True, text=True, check=True).stdout.split()
early = re.compile(r"\|\s*(grep\s+(-[A-Za-z]*[qm][A-Za-z]*\b|--quiet|--max-count)|head\b)")
problems, scanned = [], 0
for name in files:
    text = open(f"{root}/{name}", errors="replace").read()
    if not re.search(r"set\s+-[A-Za-z]*o\s+pipefail|set\s+-o\s+pipefail|pipefail", text):
        continue
    scanned += 1
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split(" #")[0]
        if code.lstrip().startswith("#") or not early.search(code):
            continue
        if re.search(r"\|\|\s*true", code) or "<<<" in code.split("|")[0]:
            continue
        problems.append(f"{name}:{number}: {line.strip()}")
for p in problems:
    print(p)
print(f"{scanned} scripts under pipefail scanned, {len(problems)} early-exit reader(s) in a pipeline")
sys.exit(1 if problems else 0)
