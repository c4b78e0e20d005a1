#!/usr/bin/python3
"""Checks `hlp-analyze table` on the known-value files of write_fixtures.cpp EXACTLY (medians,
warm-up exclusion, rank reductions, grouping, reruns counted), and every broken-input case.
Usage: check_table.py HLP_ANALYZE KNOWN_DIR SCRATCH_DIR"""
import csv
import io
import math
import os
import shutil
import subprocess
import sys

import h5py

from checks import expect, finish

ANALYZE, KNOWN, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]


def run(*args):
    p = subprocess.run([ANALYZE, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def table(*args):
    code, out, err = run("table", *args, "--csv")
    expect(code == 0, f"table {args} exit {code}: {err}")
    return list(csv.DictReader(io.StringIO(out))), err


def num(row, col):
    return float(row[col]) if row[col] != "" else math.nan


def find(rows, **kv):
    hits = [r for r in rows if all(r[k] == str(v) for k, v in kv.items())]
    expect(len(hits) == 1, f"exactly one row with {kv}, got {len(hits)}")
    return hits[0] if hits else None


def check_values(row, name, **expected):
    if row is None:
        return
    for col, want in expected.items():
        got = num(row, col) if isinstance(want, float) else row[col]
        ok = (math.isnan(want) and math.isnan(got)) if isinstance(want, float) and math.isnan(want) \
            else got == want
        expect(ok, f"{name}.{col}: want {want!r}, got {got!r}")


NAN = math.nan

# ---- default warm-up (1): the known table --------------------------------------------------------
rows, err = table(KNOWN)
# 16 configurations: seven of context parallelism (cp: first by name), ddp at T 64 and 128, the
# MoE file ddp+ep2 (after "ddp": a longer name), fsdp, four pipelines, single
expect([r["strategy"] for r in rows] ==
       ["cp"] * 7 + ["ddp", "ddp", "ddp+ep2", "fsdp", "pp", "pp", "pp", "pp", "single"],
       f"rows and their order: {[r['strategy'] for r in rows]}")
expect("incomplete.h5" in err and "incomplete" in err and len(err.strip().splitlines()) == 1,
       f"one stderr line for the incomplete file, got: {err!r}")
ddp = find(rows, strategy="ddp", seq_len=64)
# A: per-step max over ranks [9,2,3,4,5] -> [2,3,4,5]; B [7,6,7] -> [6,7]; pooled median 4.5.
# tokens/s: min over ranks A [1,100,250,100,400] -> [100,250,100,400], B [50,60] -> median 100.
check_values(ddp, "ddp64", runs="2", incomplete_runs="0", steps_used="6", world_size="2", dp="2",
             pp="1", tp="1", model="tiny", pattern="GGAS", lora_rank="8", micro_batch="2",
             global_batch="4", micro_batches="1", pp_split="-", precision="fp32",
             step_time_s_median=4.5, step_time_s_min=2.0, step_time_s_max=7.0,
             tokens_per_s_median=100.0, tokens_per_s_min=50.0, tokens_per_s_max=400.0,
             tokens_per_s_per_device_median=50.0, peak_bytes_max=1600.0,
             param_bytes_median=100.0, grad_bytes_median=10.0, optimizer_bytes_median=20.0,
             activation_bytes_median=1000.0, forward_s_median=0.25, backward_s_median=0.5,
             comm_exposed_s_median=1.0, comm_exposed_fraction=0.375, mfu_model_median=0.4,
             final_loss=1.25, bubble_fraction=NAN, data_wait_s_median=NAN, ep="1",
             expert_imbalance_median=NAN, all_to_all_mib_per_step_median=NAN)
check_values(find(rows, strategy="ddp", seq_len=128), "ddp128", runs="1", steps_used="1",
             step_time_s_median=4.0)
check_values(find(rows, strategy="fsdp"), "fsdp", runs="1", steps_used="3", seq_len="64",
             step_time_s_median=2.0, step_time_s_min=1.0, step_time_s_max=3.0,
             tokens_per_s_median=1000.0, final_loss=2.0, comm_exposed_fraction=NAN)
check_values(find(rows, strategy="single"), "single", world_size="1", dp="1", micro_batches="2",
             step_time_s_median=1.5, tokens_per_s_per_device_median=1000.0)
check_values(find(rows, strategy="pp", pp_split="balanced", micro_batches=4), "pp-bal-m4",
             dp="1", pp="2", pp_schedule="1f1b", tokens_per_s_median=800.0, bubble_fraction=0.25,
             bubble_fraction_theory=0.2)
check_values(find(rows, strategy="pp", pp_split="uniform"), "pp-uni-m4", micro_batches="4",
             tokens_per_s_median=900.0, bubble_fraction=0.3, bubble_fraction_trace=NAN)
check_values(find(rows, strategy="pp", pp_split="balanced", micro_batches=8), "pp-bal-m8",
             tokens_per_s_median=1000.0, bubble_fraction=0.15, bubble_fraction_trace=NAN)
check_values(ddp, "ddp64", bubble_fraction_trace=NAN, bubble_fraction_theory=NAN)

# ---- sparse MoE layers with expert parallelism (write_fixtures.cpp moe_expert_parallel) ---------
# ep from mesh_axes / mesh_sizes (not in `mesh`: dp stays 2); expert_imbalance per step
# {3, 1.5, 1.25, 2}, all-to-all MiB per step (max over ranks) {0, 2, 4, 3}; warm-up 1 leaves
# {1.5, 1.25, 2} and {2, 4, 3}
moe = find(rows, strategy="ddp+ep2")
check_values(moe, "moe", ep="2", dp="2", pp="1", tp="1", cp="1", world_size="2", model="tiny-moe",
             runs="1", steps_used="3", expert_imbalance_median=1.5,
             all_to_all_mib_per_step_median=3.0, step_time_s_median=2.0)
for r in rows:  # dense models (and files without mesh_axes): ep 1, no expert columns
    if r["strategy"] != "ddp+ep2":
        expect(r["ep"] == "1" and r["expert_imbalance_median"] == "" and
               r["all_to_all_mib_per_step_median"] == "",
               f"{r['strategy']} T{r['seq_len']}: ep 1 and empty expert columns: "
               f"{r['ep']!r} {r['expert_imbalance_median']!r} "
               f"{r['all_to_all_mib_per_step_median']!r}")
code, out, _ = run("table", KNOWN)
md = [l for l in out.splitlines() if l.startswith("|")]
md_rows = []
if code == 0 and len(md) >= 3:
    header = [c.strip() for c in md[0].strip("|").split("|")]
    md_rows = [dict(zip(header, (c.strip() for c in l.strip("|").split("|")))) for l in md[2:]]
moe_md = [r for r in md_rows if r.get("strategy") == "ddp+ep2"]
expect(len(moe_md) == 1 and moe_md[0].get("ep") == "2" and
       moe_md[0].get("expert imbalance") == "1.50" and
       moe_md[0].get("all-to-all MiB/step") == "3.00",
       f"markdown: the MoE row's ep and expert columns: {moe_md}")
expect(all(r.get("expert imbalance") == "–" and r.get("all-to-all MiB/step") == "–"
           for r in md_rows if r.get("strategy") != "ddp+ep2") and len(md_rows) == 16,
       f"markdown: dense rows show – in the expert columns: {md_rows}")

# ---- context parallelism (write_fixtures.cpp context_parallel) -----------------------------------
# cp_layout, cp_scheme and cp_attention from the INI ("-" without cp); the cp 4 file has none of
# the lines (before the options): zigzag, chain, ring. Sorted by cp, T, then the schemes by name.
# Medians of steps 1 and 2 (warm-up 1).
CP_ROWS = [  # cp, T, cp_scheme, cp_attention, step_time_s, comm_exposed_s, pipeline_wait_s
    (2, 64, "allgather", "ring", 4.0, 1.0, 0.5),
    (2, 64, "alltoall", "alltoall", 3.0, 1.0, 0.25),
    (2, 64, "chain", "ring", 5.0, 0.25, 2.0),
    (2, 128, "allgather", "ring", 9.0, 2.0, 1.0),
    (2, 128, "alltoall", "alltoall", 7.0, 3.0, 0.5),
    (2, 128, "chain", "ring", 11.0, 0.5, 4.5),
    (4, 64, "chain", "ring", 3.0, 0.25, 1.0)]
got = [(int(r["cp"]), int(r["seq_len"]), r["cp_scheme"], r["cp_attention"]) for r in rows
       if r["strategy"] == "cp"]
expect(got == [c[:4] for c in CP_ROWS], f"cp rows and their order: {got}")
for cp, t, scheme, attention, step, collectives, point_to_point in CP_ROWS:
    check_values(find(rows, strategy="cp", cp=cp, seq_len=t, cp_scheme=scheme,
                      cp_attention=attention), f"cp{cp} T{t} {scheme}/{attention}",
                 cp_layout="zigzag", dp="1", world_size="2", runs="1", steps_used="2",
                 step_time_s_median=step, comm_exposed_s_median=collectives,
                 pipeline_wait_s_median=point_to_point)
for r in rows:
    if r["cp"] == "1":
        expect((r["cp_layout"], r["cp_scheme"], r["cp_attention"]) == ("-", "-", "-"),
               f"{r['strategy']} T{r['seq_len']}: no cp, no cp columns: "
               f"{(r['cp_layout'], r['cp_scheme'], r['cp_attention'])}")
expect([r.get("cp_attention") for r in md_rows] ==
       [c[3] for c in CP_ROWS] + ["–"] * 9,
       f"markdown: cp_attention per row, – without cp: {[r.get('cp_attention') for r in md_rows]}")


# ---- the pipeline bubble measured from hand-placed trace spans (write_fixtures.cpp) -------------
def close(row, col, want, name):
    """Equal to 1e-12 (the CSV prints the shortest text that reads back as the same double)."""
    got = num(row, col) if row is not None else math.nan
    ok = math.isnan(got) if math.isnan(want) else abs(got - want) <= 1e-12
    expect(ok, f"{name}.{col}: want {want!r} to 1e-12, got {got!r}")


for warmup, want in [("1", 0.53125), ("0", 0.625), ("2", 0.5), ("3", NAN)]:
    traced = find(table(KNOWN, "--warmup", warmup)[0], strategy="pp", micro_batches=2)
    close(traced, "bubble_fraction_trace", want, f"pp-traced warm-up {warmup}")
    check_values(traced, f"pp-traced warm-up {warmup}", bubble_fraction=0.4)
    close(traced, "bubble_fraction_theory", 1.0 / 3.0, f"pp-traced warm-up {warmup}")
code, out, _ = run("table", os.path.join(KNOWN, "pp"))
cells = {}
lines = [l for l in out.splitlines() if l.startswith("|")]
if code == 0 and len(lines) >= 3:
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        row = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        cells[row.get("micro_batches"), row.get("pp_split")] = row
expect(all(h in (lines[0] if lines else "") for h in
           ("bubble (in-process) %", "bubble (trace) %", "bubble theory %")),
       f"markdown bubble columns: {lines[:1]}")
traced_md = cells.get(("2", "balanced"), {})
expect((traced_md.get("bubble (in-process) %"), traced_md.get("bubble (trace) %"),
        traced_md.get("bubble theory %")) == ("40.0", "53.1", "33.3"),
       f"markdown bubbles of the traced pipeline: {traced_md}")
expect(cells.get(("8", "balanced"), {}).get("bubble (trace) %") == "–",
       f"markdown: a pipeline without a trace shows – : {cells.get(('8', 'balanced'))}")
expect(lines and "expert imbalance" not in lines[0] and "all-to-all" not in lines[0],
       f"markdown: no expert columns without a MoE row: {lines[:1]}")

# ---- warm-up is configurable ----------------------------------------------------------------------
rows, _ = table(KNOWN, "--warmup", "0")
check_values(find(rows, strategy="ddp", seq_len=64), "ddp64 w0", steps_used="8",
             step_time_s_median=5.5, step_time_s_max=9.0, peak_bytes_max=9999.0)
check_values(find(rows, strategy="ddp+ep2"), "moe w0", steps_used="4",
             expert_imbalance_median=1.75, all_to_all_mib_per_step_median=2.5)
rows, _ = table(KNOWN, "--warmup", "2")
check_values(find(rows, strategy="ddp", seq_len=64), "ddp64 w2", steps_used="4",
             step_time_s_median=4.5, step_time_s_min=3.0)
check_values(find(rows, strategy="fsdp"), "fsdp w2", step_time_s_median=2.5)
rows, _ = table(KNOWN, "--warmup", "10")  # longer than every run: each keeps its last step
check_values(find(rows, strategy="ddp", seq_len=64), "ddp64 w10", steps_used="2",
             step_time_s_median=6.0)

# ---- --include-incomplete -------------------------------------------------------------------------
rows, err = table(KNOWN, "--include-incomplete")
# the 16 configurations above and the incomplete file's
expect(len(rows) == 17 and err.strip() == "",
       f"17 rows, quiet stderr with --include-incomplete: {err!r}")
check_values(find(rows, strategy="ddp", seq_len=256), "incomplete", runs="1", incomplete_runs="1",
             step_time_s_median=3.0)

# ---- files given one by one + Markdown ------------------------------------------------------------
code, out, err = run("table", os.path.join(KNOWN, "sub1/ddp_a.h5"),
                     os.path.join(KNOWN, "sub2/deeper/ddp_b.h5"))
expect(code == 0, "markdown table of two files")
table_lines = [l for l in out.splitlines() if l.startswith("|")]
expect("tok/s [min–max]" in out and len(table_lines) == 3,
       f"markdown: header, rule and one row: {out}")
expect("| 2 | 6 | 4500.0 [2000.0–7000.0] | 100 [50–400] | 50 |" in out,
       f"markdown row of the combined ddp runs: {out}")

# ---- broken inputs: one stderr line each, skipped; the good file still tabled ---------------------
bad = os.path.join(SCRATCH, "broken")
shutil.rmtree(bad, ignore_errors=True)
os.makedirs(bad)
good = os.path.join(bad, "good.h5")
shutil.copy(os.path.join(KNOWN, "fsdp.h5"), good)
size = os.path.getsize(good)
shutil.copy(good, os.path.join(bad, "truncated.h5"))
os.truncate(os.path.join(bad, "truncated.h5"), size // 2)           # `truncate -s 50%`
shutil.copy(good, os.path.join(bad, "corrupt.h5"))
with open(os.path.join(bad, "corrupt.h5"), "r+b") as f:             # overwrite the superblock
    f.write(b"\xde\xad\xbe\xef" * 64)
with h5py.File(os.path.join(bad, "foreign.h5"), "w") as f:          # valid HDF5, not ours
    f["data"] = [1.0, 2.0, 3.0]
    f.attrs["creator"] = "someone else"
with open(os.path.join(bad, "text.h5"), "w") as f:
    f.write("not hdf5 at all\n")
shutil.copy(os.path.join(KNOWN, "incomplete.h5"), os.path.join(bad, "incomplete.h5"))
os.makedirs(os.path.join(bad, "empty_subdir"))
os.makedirs(os.path.join(bad, "zz_copy"))
shutil.copy(good, os.path.join(bad, "zz_copy", "good.h5"))      # the same job copied: counted once

code, out, err = run("table", bad, "--csv")
expect(code == 0, f"a broken set with one good file exits 0: {code} {err}")
rows = list(csv.DictReader(io.StringIO(out)))
expect(len(rows) == 1 and rows[0]["strategy"] == "fsdp" and rows[0]["runs"] == "1",
       f"only the good file is tabled, once: {out}")
err_lines = err.strip().splitlines()
expect(len(err_lines) == 6, f"one stderr line per bad file or copy (6): {err_lines}")
for name, why in [("truncated.h5", "truncated"), ("corrupt.h5", "not an HDF5 file"),
                  ("foreign.h5", "not an HLP result file"), ("text.h5", "not an HDF5 file"),
                  ("incomplete.h5", "incomplete"), ("zz_copy/good.h5", "a copy of")]:
    hits = [l for l in err_lines if name in l]
    expect(len(hits) == 1 and why in hits[0], f"{name}: one line saying '{why}': {hits}")

# corruption deeper in the file: skipped or read, never a crash
shutil.copy(good, os.path.join(bad, "corrupt_middle.h5"))
with open(os.path.join(bad, "corrupt_middle.h5"), "r+b") as f:
    f.seek(size // 3)
    f.write(b"\xff" * 4096)
code, out, err = run("table", os.path.join(bad, "corrupt_middle.h5"))
expect(code in (0, 1) and "internal error" not in err, f"mid-file corruption: {code} {err}")

# ---- nothing usable: clear error, exit 1 -----------------------------------------------------------
empty = os.path.join(SCRATCH, "empty")
shutil.rmtree(empty, ignore_errors=True)
os.makedirs(empty)
code, out, err = run("table", empty)
expect(code == 1 and "no usable result files" in err and "no *.h5 found" in err,
       f"empty dir: {code} {err}")
only_bad = os.path.join(SCRATCH, "only_bad")
shutil.rmtree(only_bad, ignore_errors=True)
os.makedirs(only_bad)
shutil.copy(os.path.join(bad, "foreign.h5"), only_bad)
code, out, err = run("table", only_bad)
expect(code == 1 and "foreign.h5" in err and "every file was skipped" in err,
       f"only broken files: {code} {err}")
code, out, err = run("table", os.path.join(SCRATCH, "does-not-exist"))
expect(code == 1 and "does not exist" in err, f"missing input: {code} {err}")
code, out, err = run("table")
expect(code == 1 and "no inputs" in err, f"no inputs: {code} {err}")
code, out, err = run("frobnicate")
expect(code == 1 and "unknown command" in err, f"unknown command: {code} {err}")
code, out, err = run("--help")
expect(code == 0 and "table" in out and "report" in out and "trace" in out, "--help")

finish("check_table")
