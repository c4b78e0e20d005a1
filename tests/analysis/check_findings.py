#!/usr/bin/python3
"""Checks that a report answers the study's question from its data: index.md begins with the
Findings; per group (model, device, precision, base dtype, T, ranks) the fastest and the least
memory are the ones table.csv says (or a tie among the top), with their numbers; the Pareto front
is the one recomputed from table.csv; every configuration has a reason line; the headline table
has at most ten columns; table.tex is a well-formed booktabs tabular (compiled with pdflatex when
pdflatex and booktabs.sty are installed, otherwise checked by the parser below — the output says
which).
Usage:
  check_findings.py HLP_ANALYZE INPUT OUTDIR [--tie-fixture] [--sweep-fixture]   runs the report
  check_findings.py --existing REPORT_DIR                                        checks a report"""
import argparse
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import expect, finish  # noqa: E402

GROUP = ("model", "device", "precision", "base_dtype", "seq_len", "world_size")


def num(s):
    return float(s) if s not in ("", None) else math.nan


def groups_of(rows):
    out = {}
    for r in rows:
        out.setdefault(tuple(r[c] for c in GROUP), []).append(r)
    return out


def pareto(rows):
    front = []
    for r in rows:
        t, m = num(r["tokens_per_s_per_device_median"]), num(r["peak_bytes_max"])
        dominated = any(
            o is not r and num(o["tokens_per_s_per_device_median"]) >= t and num(o["peak_bytes_max"]) <= m
            and (num(o["tokens_per_s_per_device_median"]) > t or num(o["peak_bytes_max"]) < m) for o in rows)
        if not dominated:
            front.append(r["strategy"])
    return sorted(front)


def group_section(index, key):
    """The text of the ### heading of group `key` up to the next heading."""
    model, device, precision, base, seq, ranks = key
    unit = "rank(s)" if device == "cpu" else "GPU(s)"
    title = f"### {model} · {device} · {precision} (base {base}) · T {seq} · {ranks} {unit}"
    start = index.find(title + "\n")
    if start < 0:
        return None
    end = index.find("\n#", start + len(title))
    return index[start:end if end > 0 else len(index)]


def names_in(line):
    return re.findall(r"\*\*([^*]+)\*\*", line)


def strategy_of(label):
    return label.split(" (")[0]


def check_group(index, key, rows):
    text = group_section(index, key)
    expect(text is not None, f"Findings have a section for {key}")
    if text is None:
        return
    fastest = next((l for l in text.splitlines() if l.startswith("- Fastest:")), "")
    leanest = next((l for l in text.splitlines() if l.startswith("- Least memory:")), "")
    expect(re.search(r"\(\d+ tok/s per device\)", fastest), f"{key}: fastest line has a number: {fastest}")
    expect(re.search(r"\([\d.]+ (B|KiB|MiB|GiB)\)", leanest), f"{key}: memory line has a number: {leanest}")
    by_speed = sorted(rows, key=lambda r: -num(r["tokens_per_s_per_device_median"]))
    by_memory = sorted(rows, key=lambda r: num(r["peak_bytes_max"]))
    named = [strategy_of(n) for n in names_in(fastest) if n != "tie"]
    expect(named and named[0] == by_speed[0]["strategy"] or "**tie**" in fastest and
           by_speed[0]["strategy"] in named, f"{key}: fastest is {by_speed[0]['strategy']}: {fastest}")
    named = [strategy_of(n) for n in names_in(leanest) if n != "tie"]
    expect(named and named[0] == by_memory[0]["strategy"] or "**tie**" in leanest and
           by_memory[0]["strategy"] in named, f"{key}: leanest is {by_memory[0]['strategy']}: {leanest}")
    if len(rows) > 1:
        line = next((l for l in text.splitlines() if l.startswith("- Pareto front")), "")
        members = line.split(":", 1)[1].split(";")[0] if ":" in line else ""
        listed = sorted(strategy_of(m.strip()) for m in re.split(r",(?![^(]*\))", members))
        expect(listed == pareto(rows), f"{key}: Pareto front {listed} == recomputed {pareto(rows)}")
    for r in rows:
        expect(re.search(r"^  - \*\*" + re.escape(r["strategy"]) + r"( \([^)]*\))?\*\*: .*\d", text, re.M),
               f"{key}: a reason line with numbers for {r['strategy']}")


def check_tex(path):
    tex = open(path).read()
    depth = 0
    for ch in re.sub(r"\\[{}%&#$_]", "", tex):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        expect(depth >= 0, "table.tex: no '}' before its '{'")
    expect(depth == 0, "table.tex: braces balanced")
    spec = re.search(r"\\begin\{tabular\}\{([lrc]+)\}", tex)
    expect(spec is not None, "table.tex: \\begin{tabular}{...}")
    ncol = len(spec.group(1)) if spec else 0
    expect(ncol <= 10, f"table.tex: at most ten columns ({ncol})")
    for rule in ("\\toprule", "\\midrule", "\\bottomrule", "\\end{tabular}"):
        expect(tex.count(rule) == 1, f"table.tex: one {rule}")
    body = tex[tex.find("\\toprule") + 8:tex.find("\\bottomrule")]
    lines = [l for l in body.splitlines() if l.strip() and l.strip() != "\\midrule"]
    expect(len(lines) >= 2, "table.tex: a header and at least one row")
    for l in lines:
        expect(l.rstrip().endswith("\\\\"), f"table.tex row ends with \\\\: {l}")
        cells = re.split(r"(?<!\\)&", l.rstrip()[:-2])
        expect(len(cells) == ncol, f"table.tex: {len(cells)} cells, {ncol} columns: {l}")
        for c in cells:
            expect(not re.search(r"(?<!\\)[%#_$]", c), f"table.tex: specials escaped in '{c}'")
    if shutil.which("pdflatex") and subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True,
                                                    text=True).stdout.strip():
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "doc.tex"), "w") as f:
                f.write("\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n"
                        f"\\input{{{os.path.abspath(path)}}}\n\\end{{document}}\n")
            p = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                               cwd=d, capture_output=True, text=True, timeout=120)
            expect(p.returncode == 0 and os.path.exists(os.path.join(d, "doc.pdf")),
                   f"pdflatex compiles table.tex: {p.stdout[-800:]}")
            print("table.tex: compiled with pdflatex")
    else:
        print("table.tex: pdflatex or booktabs.sty not installed: syntax checked by the parser")


def check_report(outdir):
    index = open(os.path.join(outdir, "index.md")).read()
    sections = re.findall(r"^## (.+)$", index, re.M)
    expect(sections[:1] == ["Findings"], f"the first section is Findings: {sections[:3]}")
    expect(sections.index("Headline table") < sections.index("Full table") if
           "Headline table" in sections and "Full table" in sections else False,
           "the headline table comes before the full table")
    with open(os.path.join(outdir, "table.csv")) as f:
        rows = list(csv.DictReader(f))
    for key, members in groups_of(rows).items():
        check_group(index, key, members)
    head = index[index.find("## Headline table"):index.find("## Cost")]
    header = next((l for l in head.splitlines() if l.startswith("| strategy")), "")
    expect(0 < header.count("|") - 1 <= 10, f"headline table has at most ten columns: {header}")
    expect("## Cost" in index and "| **total** |" in index, "the cost section has a total")
    expect("### Not in the comparison" in index, "Findings list what was not measured")
    for r in rows:
        expect(re.search(r"^\| " + re.escape(r["strategy"]) + r"( \([^)]*\))? \| " + r["world_size"] + r" \| "
                         + r["seq_len"] + r" \|", head, re.M), f"headline row for {r['strategy']} n={r['world_size']} T{r['seq_len']}")
    check_tex(os.path.join(outdir, "table.tex"))
    return index


def run_report(analyze, inputs, outdir, extra):
    shutil.rmtree(outdir, ignore_errors=True)
    p = subprocess.run([analyze, "report", inputs, "-o", outdir] + extra, capture_output=True, text=True,
                       timeout=100)
    expect(p.returncode == 0, f"report exit {p.returncode}: {p.stderr}")
    return p


def tie_fixture(index):
    """write_fixtures tie: at T 64 ddp (510/device) and fsdp2 (520) tie, fsdp is leanest."""
    expect("- Fastest: **tie** between **fsdp2** (520 tok/s per device) and **ddp** (510 tok/s per "
           "device): the differences lie within the step-to-step spread" in index, "T 64: says tie")
    expect("- Least memory: **fsdp** (1.5 KiB), 25.0 % less than **fsdp2** (2.0 KiB)" in index,
           "T 64: fsdp leanest with its margin")
    expect("- Fastest: **ddp** (500 tok/s per device), 100.0 % more than **fsdp2** (250 tok/s per "
           "device)" in index, "T 128: ddp fastest by 100 %, no tie")
    expect(index.count("- Fastest: **tie**") + index.count("- Least memory: **tie**") == 1, "exactly one tie")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("analyze", nargs="?")
    ap.add_argument("input", nargs="?")
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--existing")
    ap.add_argument("--tie-fixture", action="store_true")
    args = ap.parse_args()
    if args.existing:
        check_report(args.existing)
        finish("check_findings")
    extra = []
    if args.tie_fixture:  # a sweep directory: one configuration failed, one was left out
        sweep = args.outdir + "-sweep"
        shutil.rmtree(sweep, ignore_errors=True)
        os.makedirs(os.path.join(sweep, "configs"))
        for name in ("ddp_t64", "fsdp_t64", "pp_t64"):
            open(os.path.join(sweep, "configs", name + ".ini"), "w").write("strategy = x\n")
        open(os.path.join(sweep, "pruned.txt"), "w").write(
            "# configurations hlp-plan predicted not to fit on a h100-80\n"
            "tp-n8-t64: predicted 91.3 GiB + 4.6 GiB reserve > 80.0 GiB of a h100-80\n")
        extra = ["--sweep", sweep]
    p = run_report(args.analyze, args.input, args.outdir, extra)
    index = check_report(args.outdir)
    if args.tie_fixture:
        tie_fixture(index)
        expect("- `pp_t64`: no result file" in index, "the failed configuration is listed")
        expect("- `tp-n8-t64`: left out before submission: predicted 91.3 GiB" in index,
               "the planner's left-out configuration is listed")
        expect("2 not measured" in p.stderr, f"stderr counts them: {p.stderr}")
    finish("check_findings")


main()
