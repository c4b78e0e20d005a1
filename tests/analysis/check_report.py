#!/usr/bin/python3
"""Runs `hlp-analyze report INPUT -o OUTDIR` and checks that every expected figure exists as a
valid PNG and SVG (+ its .gp script and .dat data), that index.md embeds each one and notes the
skipped ones, and that the tables were written. Optionally checks `trace` on one file, and that a
missing gnuplot is a clear error; with --moe-fixture, the points of expert_load.dat against the
MoE file of write_fixtures.cpp (moe_expert_parallel); with --cp-fixture, those of
cp_schemes_cp2.dat and cp_schemes_cp4.dat against its context-parallel files (context_parallel).
Usage: check_report.py HLP_ANALYZE INPUT OUTDIR --figures a,b,c --skipped d,e [--trace FILE.h5]
                       [--plan] [--moe-fixture] [--cp-fixture]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from checks import expect, finish

ap = argparse.ArgumentParser()
ap.add_argument("analyze")
ap.add_argument("input")
ap.add_argument("outdir")
ap.add_argument("--figures", default="")
ap.add_argument("--skipped", default="")
ap.add_argument("--trace", default="")
# real runs carry hlp-plan's prediction (hlp-train writes it): the CSV puts it beside the
# measurement, the predicted peak within 10 % of the measured one
ap.add_argument("--plan", action="store_true")
ap.add_argument("--moe-fixture", action="store_true")
ap.add_argument("--cp-fixture", action="store_true")
args = ap.parse_args()

# write_fixtures.cpp moe_expert_parallel: /experts tokens_per_expert [step][sparse layer][expert]
# of the one MoE configuration (tiny-moe ddp+ep2, 2 ranks, T 64), sparse layers 1 and 3
MOE_SERIES = "tiny-moe ddp+ep2 n=2 T=64"
MOE_LAYERS = (1, 3)
MOE_TOKENS = (((384, 64, 32, 32), (128, 128, 128, 128)),
              ((192, 128, 96, 96), (160, 128, 112, 112)),
              ((128, 160, 96, 128), (128, 128, 128, 128)),
              ((128, 128, 128, 128), (64, 256, 96, 96)))

# write_fixtures.cpp context_parallel: per cp size, per pair of schemes (state / attention, in
# name order), per T: the medians after warm-up 1 of step_time_s, comm_exposed_s + pipeline_wait_s,
# comm_exposed_s, pipeline_wait_s (the .dat's columns after seq_len)
CP_POINTS = {
    "cp_schemes_cp2": {"allgather / ring": [(64, 4, 1.5, 1, 0.5), (128, 9, 3, 2, 1)],
                       "alltoall / alltoall": [(64, 3, 1.25, 1, 0.25), (128, 7, 3.5, 3, 0.5)],
                       "chain / ring": [(64, 5, 2.25, 0.25, 2), (128, 11, 5, 0.5, 4.5)]},
    # the file from before the scheme options: chain and ring
    "cp_schemes_cp4": {"chain / ring": [(64, 3, 1.25, 0.25, 1)]}}


def dat_series(path):
    """A .dat file of blocks after "# series: NAME" lines: {series name: [(x, y, ...), ...]},
    every column of each point."""
    series, name = {}, None
    for line in open(path):
        if line.startswith("# series: "):
            name = line[len("# series: "):].rstrip("\n")
            series[name] = []
        elif line.strip() and not line.startswith("#") and name is not None:
            series[name].append(tuple(float(v) for v in line.split()))
    return series


shutil.rmtree(args.outdir, ignore_errors=True)
p = subprocess.run([args.analyze, "report", args.input, "-o", args.outdir],
                   capture_output=True, text=True, timeout=100)
expect(p.returncode == 0, f"report exit {p.returncode}: {p.stderr}")
print(p.stderr.strip())
index_path = os.path.join(args.outdir, "index.md")
index = open(index_path).read() if os.path.exists(index_path) else ""
expect(index != "", "index.md written")
for t in ("table.md", "table.csv"):
    expect(os.path.getsize(os.path.join(args.outdir, t)) > 0 if os.path.exists(os.path.join(args.outdir, t)) else False, t)
    expect(f"]({t})" in index, f"index links {t}")

for name in filter(None, args.figures.split(",")):
    png = os.path.join(args.outdir, name + ".png")
    svg = os.path.join(args.outdir, name + ".svg")
    if not (os.path.exists(png) and os.path.exists(svg)):
        expect(False, f"{name}: png and svg exist")
        continue
    with open(png, "rb") as f:
        expect(f.read(8) == b"\x89PNG\r\n\x1a\n", f"{name}.png has the PNG signature")
    expect(os.path.getsize(png) > 2000, f"{name}.png is not empty")
    try:
        root = ET.parse(svg).getroot()
        expect(root.tag.endswith("svg"), f"{name}.svg root is <svg>")
    except ET.ParseError as e:
        expect(False, f"{name}.svg parses as XML: {e}")
    for ext in (".gp", ".dat"):
        expect(os.path.exists(os.path.join(args.outdir, name + ext)), f"{name}{ext} kept for re-rendering")
    expect(f"]({name}.png)" in index and f"({name}.svg)" in index, f"index.md embeds {name}")
    expect(f"Skipped (`{name}`)" not in index, f"{name} not marked skipped")

if args.plan:
    import csv
    with open(os.path.join(args.outdir, "table.csv")) as f:
        rows = list(csv.DictReader(f))
    expect(len(rows) > 0, "table.csv has rows")
    for r in rows:
        what = f"{r['strategy']} n={r['world_size']} T{r['seq_len']}"
        try:
            peak = float(r["predicted_over_measured_peak"])
            tokens = float(r["predicted_tokens_per_s"])
            ratio = float(r["predicted_over_measured_tokens_per_s"])
        except (KeyError, ValueError) as e:
            expect(False, f"{what}: plan columns present and numeric ({e})")
            continue
        expect(0.9 <= peak <= 1.1, f"{what}: predicted / measured peak {peak:.3f} within 10 %")
        expect(tokens > 0 and ratio > 0, f"{what}: predicted tokens/s {tokens:.0f} (ratio {ratio:.2f})")
    md = open(os.path.join(args.outdir, "table.md")).read()
    expect("peak pred / meas" in md and "tok/s pred / meas" in md, "table.md has the plan columns")

if args.moe_fixture:
    # per sparse layer: slots summed over the steps, busiest expert / mean expert
    want = []
    for layer_index, layer in enumerate(MOE_LAYERS):
        totals = [sum(step[layer_index][e] for step in MOE_TOKENS) for e in range(4)]
        want.append((float(layer), max(totals) / (sum(totals) / len(totals))))
    expect(want == [(1.0, 1.625), (3.0, 1.25)], f"the fixture's expert load: {want}")
    dat = os.path.join(args.outdir, "expert_load.dat")
    got = dat_series(dat) if os.path.exists(dat) else {}
    expect(list(got) == [MOE_SERIES], f"expert_load.dat: one series, {MOE_SERIES!r}: {list(got)}")
    points = got.get(MOE_SERIES, [])
    expect(len(points) == len(want) and
           all(gx == wx and abs(gy - wy) <= 1e-9 for (wx, wy), (gx, gy) in zip(want, points)),
           f"expert_load.dat points {points}, want {want}")
    gp = os.path.join(args.outdir, "expert_load.gp")
    expect(os.path.exists(gp) and "even routing" in open(gp).read(),
           "expert_load.gp draws the even-routing line at 1")

if args.cp_fixture:
    for name, want in CP_POINTS.items():
        dat = os.path.join(args.outdir, name + ".dat")
        got = dat_series(dat) if os.path.exists(dat) else {}
        expect(list(got) == list(want), f"{name}.dat: the series {list(want)}: {list(got)}")
        for pair, points in want.items():
            have = got.get(pair, [])
            expect(len(have) == len(points) and
                   all(len(g) == len(w) and all(abs(a - b) <= 1e-9 for a, b in zip(g, w))
                       for g, w in zip(have, points)),
                   f"{name}.dat {pair}: points {have}, want {points}")
        gp = os.path.join(args.outdir, name + ".gp")
        text = open(gp).read() if os.path.exists(gp) else ""
        expect(all(f"'{pair} step'" in text and f"'{pair} exposed comm'" in text for pair in want),
               f"{name}.gp draws each pair's step time and exposed communication")
    expect("Skipped (`cp_schemes`)" not in index, "cp_schemes not skipped with cp runs")

for name in filter(None, args.skipped.split(",")):
    expect(f"*Skipped (`{name}`)" in index, f"index.md notes that {name} was skipped")
    expect(not os.path.exists(os.path.join(args.outdir, name + ".png")), f"no {name}.png")

# The re-render path a person uses: gnuplot NAME.gp inside OUTDIR.
first = next(iter(filter(None, args.figures.split(","))), None)
if first:
    os.remove(os.path.join(args.outdir, first + ".png"))
    r = subprocess.run(["gnuplot", first + ".gp"], cwd=args.outdir, capture_output=True, text=True)
    expect(r.returncode == 0 and os.path.exists(os.path.join(args.outdir, first + ".png")),
           f"gnuplot {first}.gp re-renders: {r.stderr}")

# gnuplot missing: the tables, CSV and the figures' data and scripts are written, one note line.
env = dict(os.environ, PATH="/nonexistent")
nognu = args.outdir + "-nognuplot"
shutil.rmtree(nognu, ignore_errors=True)
r = subprocess.run([os.path.abspath(args.analyze), "report", args.input, "-o", nognu],
                   capture_output=True, text=True, env=env, timeout=60)
notes = [l for l in r.stderr.splitlines() if "gnuplot is not on PATH" in l]
expect(r.returncode == 0 and len(notes) == 1, f"missing gnuplot: exit {r.returncode}, one note line: {r.stderr}")
for t in ("index.md", "table.md", "table.csv", "headline.md", "table.tex"):
    expect(os.path.exists(os.path.join(nognu, t)), f"without gnuplot: {t} written")
expect(not any(n.endswith(".png") for n in os.listdir(nognu)) if os.path.isdir(nognu) else False,
       "without gnuplot: nothing rendered")
expect("Figures not rendered: gnuplot is not on PATH" in open(os.path.join(nognu, "index.md")).read()
       if os.path.exists(os.path.join(nognu, "index.md")) else False, "index.md says the figures are not rendered")

if args.trace:
    out = os.path.join(args.outdir, "trace.json")
    r = subprocess.run([args.analyze, "trace", args.trace, "-o", out], capture_output=True, text=True, timeout=60)
    expect(r.returncode == 0, f"trace exit {r.returncode}: {r.stderr}")
    doc = json.load(open(out)) if os.path.exists(out) else {}
    events = doc.get("traceEvents", [])
    expect(any(e.get("ph") == "X" for e in events), "trace has complete events")
    expect({e.get("pid") for e in events if e.get("ph") == "X"} == {0, 1}, "trace: one pid per rank (2)")

finish("check_report")
