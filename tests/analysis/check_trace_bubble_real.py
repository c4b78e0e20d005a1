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
Then 1f1b, interleaved (V = 2) and zb-h1 at m = 4, and for every run the replay
(bubble_fraction_replay: the trace's own span durations run through the schedule's tables on
the ideal clock): it exists for every schedule, is exactly 1/2 for gpipe at m = 1 (four spans in
sequence on two stages), and never exceeds the measured bubble (the same durations without
message latency), up to the clock alignment error. The step theory (bubble_fraction_step_theory:
the tables at each step's mean F / B / W per chunk) exists for every schedule and is exactly 1/2
for gpipe at m = 1 too.
Prints trace / in-process / replay / theory for each run.
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

def train(name, schedule, m, *extra):
    cmd = [MPIEXEC, "-n", "2", TRAIN, "--strategy", "pp", "--pp-schedule", schedule,
           "--micro-batches", str(m), "--steps", "5", "--seq-len", "32", "--loader-threads", "1",
           "--out", os.path.join(OUT, name + ".h5"), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    open(os.path.join(OUT, name + ".log"), "w").write(p.stdout + p.stderr)
    if p.returncode != 0:
        print(p.stdout, p.stderr, file=sys.stderr)
        sys.exit(f"hlp-train {name} failed ({p.returncode})")


def table(path):
    p = subprocess.run([ANALYZE, "table", path, "--csv"], capture_output=True, text=True,
                       timeout=60)
    expect(p.returncode == 0, f"table exit {p.returncode}: {p.stderr}")
    return list(csv.DictReader(io.StringIO(p.stdout)))


for m in (1, 2, 4):
    train(f"gpipe-m{m}", "gpipe", m)
rows = {int(r["micro_batches"]): r for r in table(OUT)}
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

expect(abs(val(1, "bubble_fraction_step_theory") - 0.5) < 1e-9,
       f"m=1 gpipe at its step's stage costs: idle exactly half: "
       f"{val(1, 'bubble_fraction_step_theory')}")
expect(abs(val(1, "bubble_fraction_replay") - 0.5) < 1e-9,
       f"m=1 gpipe replayed: four spans in sequence on two stages idle exactly half: "
       f"{val(1, 'bubble_fraction_replay')}")

SCHEDULES = os.path.join(OUT, "schedules")
os.makedirs(SCHEDULES)
for schedule, extra in (("1f1b", []), ("interleaved", ["--pp-virtual", "2"]), ("zb-h1", [])):
    train(os.path.join("schedules", schedule), schedule, 4, *extra)
runs = list(rows.values()) + table(SCHEDULES)
print("pp=2 run                         trace   replay   step theory   theory")
for r in runs:
    name = f"{r['pp_schedule']} V={r['pp_virtual']} m={r['micro_batches']}"
    trace, replay, step_theory, theory = (float(r[c]) for c in
                                          ("bubble_fraction_trace", "bubble_fraction_replay",
                                           "bubble_fraction_step_theory",
                                           "bubble_fraction_theory"))
    print(f"  {name:30} {trace:.4f}  {replay:.4f}   {step_theory:.4f}        {theory:.4f}")
    expect(0 < replay < 1, f"{name}: replayed bubble {replay} in (0, 1)")
    expect(0 < step_theory < 1, f"{name}: step theory {step_theory} in (0, 1)")
    expect(replay <= trace + 0.02,
           f"{name}: the replay (no message latency) {replay} <= the measured {trace} + 0.02")

finish("check_trace_bubble_real")
