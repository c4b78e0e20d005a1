#!/usr/bin/python3
"""Checks analysis/python/hlp_results.py against `hlp-analyze table --csv` on the same files:
every cell of every column both have, every row, at several warm-ups and with and without
--include-incomplete; the files skipped; the steps frame's rows. Fails at the first differing
cell, naming it.
Usage: check_python_reader.py HLP_ANALYZE DIR [PYTHON_DIR]   (PYTHON_DIR: analysis/python; by
default found from this script's place in the checkout)"""
import csv
import io
import math
import os
import subprocess
import sys

import h5py

ANALYZE, DIR = sys.argv[1], sys.argv[2]
PY_DIR = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis", "python")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, PY_DIR)
import hlp_results  # noqa: E402

REL_TOL = 1e-12
# The columns that must be compared, or the check would pass on nothing.
REQUIRED = list(hlp_results.CONFIG_COLUMNS) + [
    "runs", "incomplete_runs", "steps_used",
    "step_time_s_median", "step_time_s_min", "step_time_s_max",
    "tokens_per_s_median", "tokens_per_s_min", "tokens_per_s_max",
    "tokens_per_s_per_device_median", "peak_bytes_max", "mfu_model_median", "mfu_executed_median",
    "comm_exposed_fraction", "final_loss", "param_bytes_median", "forward_s_median",
    "bubble_fraction", "bubble_fraction_trace", "oversubscribed_runs",
    "expert_imbalance_median", "all_to_all_mib_per_step_median"]  # the known set's MoE file
# Columns that must hold a number (not only empty cells) in some row of every variant.
MUST_HAVE_VALUES = ["step_time_s_median", "tokens_per_s_median", "tokens_per_s_per_device_median",
                    "peak_bytes_max", "mfu_model_median", "final_loss"]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def same_number(cell, value):
    """A CSV cell (shortest round-trip double, "" = absent) against the reader's value."""
    want = math.nan if cell == "" else float(cell)
    got = float(value)
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got), False
    if want == got:
        return True, True
    if math.isinf(want) or math.isinf(got):
        return False, False
    return abs(want - got) <= REL_TOL * max(abs(want), abs(got)), False


def check(flags, warmup, include_incomplete):
    name = " ".join(["table", DIR, "--csv", *flags])
    p = subprocess.run([ANALYZE, "table", DIR, "--csv", *flags], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        fail(f"hlp-analyze {name}: exit {p.returncode}: {p.stderr}")
    reader = csv.reader(io.StringIO(p.stdout))
    header = next(reader)
    table = list(reader)
    skip_lines = [l for l in p.stderr.splitlines() if l.startswith("hlp-analyze: skipping ")]

    r = hlp_results.load_results(DIR, warmup=warmup, include_incomplete=include_incomplete)
    configs = r.configs

    # columns: every one the reader leaves out is a documented one, the required ones are shared
    shared = [c for c in header if c in configs.columns]
    only_csv = [c for c in header if c not in configs.columns]
    undocumented = [c for c in only_csv if c not in hlp_results.NOT_REPRODUCED]
    if undocumented:
        fail(f"{name}: CSV columns the reader neither computes nor lists in NOT_REPRODUCED: "
             f"{undocumented}")
    missing = [c for c in REQUIRED if c not in shared]
    if missing:
        fail(f"{name}: required columns not shared by the CSV and the reader: {missing}")

    # rows, in table order, cell by cell
    if not table:
        fail(f"{name}: hlp-analyze printed no rows")
    if len(table) != len(configs):
        fail(f"{name}: {len(table)} rows from hlp-analyze, {len(configs)} configs in the reader")
    numeric = exact = 0
    has_value = {c: False for c in MUST_HAVE_VALUES}
    for i, cells in enumerate(table):
        if len(cells) != len(header):
            fail(f"{name}: CSV row {i} has {len(cells)} cells, header {len(header)}")
        row = dict(zip(header, cells))
        label = ", ".join(f"{c}={row[c]}" for c in ("strategy", "world_size", "seq_len",
                                                    "micro_batches", "pp_split"))
        for c in shared:
            value = configs.iloc[i][c]
            if c in hlp_results.CONFIG_COLUMNS or c in ("runs", "incomplete_runs", "steps_used"):
                ok = str(value) == row[c]
            else:
                ok, is_exact = same_number(row[c], value)
                numeric += row[c] != ""
                exact += is_exact
                if c in has_value and row[c] != "":
                    has_value[c] = True
            if not ok:
                fail(f"{name}: row {i} ({label}), column {c}: hlp-analyze {row[c]!r}, "
                     f"reader {value!r}")
    empty = [c for c, seen in has_value.items() if not seen]
    if empty:
        fail(f"{name}: columns without a single value, nothing compared: {empty}")

    # skipped files: the same ones (hlp-analyze's line names the path)
    if len(skip_lines) != len(r.skipped):
        fail(f"{name}: hlp-analyze skipped {len(skip_lines)} file(s), the reader "
             f"{len(r.skipped)}:\n  " + "\n  ".join(skip_lines) + "\n  reader: " +
             str(r.skipped.to_dict("records")))
    for path in r.skipped["path"]:
        if not any(path in l for l in skip_lines):
            fail(f"{name}: the reader skipped {path}, hlp-analyze did not: {skip_lines}")

    # runs and steps: one runs row per file counted, one steps row per (file, step)
    runs_in_table = sum(int(row[header.index("runs")]) for row in table)
    if len(r.runs) != runs_in_table:
        fail(f"{name}: {len(r.runs)} runs in the reader, {runs_in_table} in the table")
    steps_in_files = 0
    for path in r.runs["path"]:
        with h5py.File(path, "r") as f:
            steps_in_files += f["steps/step"].shape[0]
    if len(r.steps) != steps_in_files:
        fail(f"{name}: steps frame has {len(r.steps)} rows, the files {steps_in_files} steps")
    used = r.steps[r.steps["used"]].groupby("config_id").size()
    for i, cells in enumerate(table):
        want = int(cells[header.index("steps_used")])
        if int(used.get(i, 0)) != want:
            fail(f"{name}: steps frame uses {int(used.get(i, 0))} steps of config {i}, "
                 f"the table {want}")
    # the steps frame's reductions against the configs' medians (same pool, other path)
    for i in range(len(configs)):
        pool = r.steps[(r.steps["config_id"] == i) & r.steps["used"]]["step_time_s"].dropna()
        med = configs.iloc[i]["step_time_s_median"]
        if len(pool) and not same_number(repr(float(pool.median())), med)[0]:
            fail(f"{name}: config {i}: median of the steps frame's step_time_s "
                 f"{pool.median()!r} != configs' {med!r}")

    print(f"{name}: {len(table)} rows x {len(shared)} shared columns compared "
          f"({len(only_csv)} CSV-only: {', '.join(only_csv) or 'none'}); {numeric} numeric cells, "
          f"{exact} bit-identical; {len(r.skipped)} skipped alike; {len(r.runs)} runs, "
          f"{len(r.steps)} step rows")


if not os.path.isdir(DIR):
    fail(f"{DIR} is not a directory (the fixture did not run?)")
check([], 1, False)
check(["--warmup", "0"], 0, False)
check(["--warmup", "3"], 3, False)
check(["--include-incomplete", "--warmup", "2"], 2, True)
print("check_python_reader: 0 failure(s)")
