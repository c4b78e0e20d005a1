#!/usr/bin/python3
"""Real pipeline runs: `mpiexec -n 2 hlp-train --strategy pp --pp-schedule gpipe` (tiny model)
with 1, 2 and 4 micro-batches, then `hlp-analyze table --csv`. The bubble measured from the
trace must behave like a pipeline bubble:
  - m = 1: the four spans of a step (F stage 0, F stage 1, B stage 1, B stage 0) run one after
    the other, so both stages' busy time together is at most the window and the mean bubble is
    at least 1/2 (the theory), minus the clock alignment error; gaps (communication) add to it;
  - m = 2, 4: not far from (p-1)/(m+p-1): stage imbalance and communication add idle time,
    while two ranks sharing busy cores stretch overlapping spans and take some away;
  - m = 4 idles a smaller share of the step than m = 1.
Prints trace / in-process / theory for each m.
Usage: check_trace_bubble_real.py MPIEXEC HLP_TRAIN HLP_ANALYZE OUTDIR"""
import csv
import io
import math
import os
import shutil
import subprocess
import sys

from checks import expect, finish

MPIEXEC, TRAIN, ANALYZE, OUT = sys.argv[1:5]


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
for m in (1, 2, 4):
    name = os.path.join(OUT, f"gpipe-m{m}")
    cmd = [MPIEXEC, "-n", "2", TRAIN, "--strategy", "pp", "--pp-schedule", "gpipe",
           "--micro-batches", str(m), "--steps", "5", "--seq-len", "32", "--loader-threads", "1",
           "--out", name + ".h5"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    open(name + ".log", "w").write(p.stdout + p.stderr)
    if p.returncode != 0:
        print(p.stdout, p.stderr, file=sys.stderr)
        sys.exit(f"hlp-train m={m} failed ({p.returncode})")

p = subprocess.run([ANALYZE, "table", OUT, "--csv"], capture_output=True, text=True, timeout=60)
expect(p.returncode == 0, f"table exit {p.returncode}: {p.stderr}")
rows = {int(r["micro_batches"]): r for r in csv.DictReader(io.StringIO(p.stdout))}
expect(sorted(rows) == [1, 2, 4], f"one row per micro-batch count: {sorted(rows)}")


def val(m, col):
    v = rows.get(m, {}).get(col, "")
    return float(v) if v != "" else math.nan


print("pp=2 gpipe, 4 steps after warm-up   m   trace   in-process   theory")
for m in sorted(rows):
    trace, inproc, theory = (val(m, c) for c in
                             ("bubble_fraction_trace", "bubble_fraction", "bubble_fraction_theory"))
    print(f"{'':35} {m}   {trace:.4f}  {inproc:.4f}       {theory:.4f}")
    expect(rows[m]["pp"] == "2" and rows[m]["pp_schedule"] == "gpipe", f"m={m}: pp2 gpipe row")
    expect(abs(theory - 1.0 / (m + 1)) < 1e-12, f"m={m}: theory {theory} = 1/(m+1)")
    expect(theory - 0.15 < trace < 0.95, f"m={m}: trace bubble {trace} in (theory - 0.15, 0.95)")
expect(0.48 <= val(1, "bubble_fraction_trace") < 0.85,
       f"m=1 on 2 stages: sequential spans idle at least half the window: "
       f"{val(1, 'bubble_fraction_trace')} in [0.48, 0.85)")
expect(val(4, "bubble_fraction_trace") < val(1, "bubble_fraction_trace"),
       f"more micro-batches, smaller bubble: m=4 {val(4, 'bubble_fraction_trace')} < "
       f"m=1 {val(1, 'bubble_fraction_trace')}")

finish("check_trace_bubble_real")
