#!/usr/bin/env python3
"""Checks the cost block hlp-sweep printed against the sweep it rendered (cost_test.sh).

usage: cost_check.py STDOUT SWEEP_DIR --rate R|none|rank [--startup-s S]

  --rate R     the SU rate the block must use (SUs = GPU-hours x R)
  --rate none  a GPU site without a rate: GPU-hours, every SU amount marked "no rate"
  --rate rank  CPU ranks: rank-hours, no SUs at all
  --startup-s  the start-up allowance each configuration's line must add

Numbers are parsed, not grepped: every configuration's hours = devices x (steps x step time +
start-up) / 3600 with its devices, steps and step time taken from the rendered scripts, its INI
and hlp-plan's plan.csv; SUs = hours x R; the total is the sum; each array's worst case = its
tasks x GPUs x time limit as its #SBATCH lines say. Prints "totals HOURS SUS" last.
"""
import argparse
import csv
import os
import re
import sys

NUM = r"([0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)"


def fail(msg):
    print(f"cost_check: FAIL: {msg}")
    sys.exit(1)


def close(a, b, tol):
    return abs(a - b) <= tol


def amount_pattern(rate):
    """Regex of '<hours> GPU-hours = <sus> SUs' (or its no-rate / rank forms), groups hours[, sus]."""
    if rate == "rank":
        return NUM + r" rank-hours$"
    if rate == "none":
        return NUM + r" GPU-hours, SUs: no rate$"
    return NUM + r" GPU-hours = " + NUM + r" SUs$"


def check_sus(what, hours, groups, rate):
    if rate in ("none", "rank"):
        return 0.0
    sus = float(groups[-1])
    # both printed with 4 decimals: hours rounded by 0.00005, SUs computed from the exact hours
    if not close(sus, hours * rate, 0.00005 * rate + 0.0001):
        fail(f"{what}: {sus} SUs is not {hours} GPU-hours x {rate}")
    return sus


def time_limit_hours(text):
    days, _, rest = text.rpartition("-")
    fields = [int(f) for f in rest.split(":")]
    if days:
        fields += [0] * (3 - len(fields))
        return int(days) * 24 + fields[0] + fields[1] / 60 + fields[2] / 3600
    if len(fields) == 1:
        return fields[0] / 60
    if len(fields) == 2:
        return fields[0] / 60 + fields[1] / 3600
    return fields[0] + fields[1] / 60 + fields[2] / 3600


def read_arrays(sweep_dir):
    """{script: (tasks, gpus per task or None, time limit text, [config names])}"""
    arrays = {}
    for name in sorted(os.listdir(sweep_dir)):
        if not name.endswith(".sbatch") or name.endswith("-analyze.sbatch"):
            continue
        text = open(os.path.join(sweep_dir, name)).read()
        last = int(re.search(r"^#SBATCH --array=0-(\d+)$", text, re.M).group(1))
        gpus = re.search(r"^#SBATCH --gpus=[^:]+:(\d+)$", text, re.M)
        ntasks = re.search(r"^#SBATCH --ntasks=(\d+)$", text, re.M)
        per_task = re.search(r"^#SBATCH --gpus-per-task=(\d+)$", text, re.M)
        if gpus:
            devices = int(gpus.group(1))
        elif ntasks and per_task:
            devices = int(ntasks.group(1)) * int(per_task.group(1))
        elif ntasks:
            devices = int(ntasks.group(1))  # CPU ranks
        else:
            fail(f"{name}: no --gpus, --ntasks line to count devices from")
        limit = re.search(r"^#SBATCH --time=(\S+)$", text, re.M).group(1)
        configs = re.findall(r"^\s+\d+\) config=(\S+) ;;$", text, re.M)
        if len(configs) != last + 1:
            fail(f"{name}: --array=0-{last} but {len(configs)} configurations in its case statement")
        arrays[name] = (last + 1, devices, limit, configs)
    return arrays


def read_step_times(sweep_dir):
    """hlp-plan's step_s of each planned configuration, by name (plan/runs.txt + plan/plan.csv)."""
    runs_path = os.path.join(sweep_dir, "plan", "runs.txt")
    if not os.path.exists(runs_path):
        return {}
    names = [os.path.basename(l.split(None, 1)[1].strip())[: -len(".ini")]
             for l in open(runs_path).read().splitlines()]
    rows = {}
    for row in csv.DictReader(open(os.path.join(sweep_dir, "plan", "plan.csv"))):
        rows[names[int(row["run"])]] = float(row["step_s"]) if row["step_s"] else None
    return rows


def ini_steps(sweep_dir, config):
    for line in open(os.path.join(sweep_dir, "configs", config + ".ini")):
        m = re.match(r"^steps\s*=\s*(\d+)\s*$", line)
        if m:
            return int(m.group(1))
    fail(f"{config}.ini has no steps line")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stdout")
    ap.add_argument("sweep_dir")
    ap.add_argument("--rate", required=True)
    ap.add_argument("--startup-s", type=float)
    args = ap.parse_args()
    rate = args.rate if args.rate in ("none", "rank") else float(args.rate)
    unit = "rank" if rate == "rank" else "GPU"
    out = open(args.stdout).read().splitlines()
    start = next((i for i, l in enumerate(out) if l.startswith("cost of sweep '")), None)
    if start is None:
        fail("no 'cost of sweep' heading in hlp-sweep's output")
    block = [out[start]]
    for line in out[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    heading = block[0]
    if rate == "none" and "no SU rate" not in heading:
        fail(f"heading does not say there is no SU rate: {heading}")
    if rate == "rank" and "rank-hours (CPU ranks: no SUs)" not in heading:
        fail(f"heading does not say rank-hours: {heading}")
    if isinstance(rate, float) and f" at {args.rate} SU/GPU-hour (" not in heading:
        fail(f"heading does not state the rate {args.rate}: {heading}")
    if rate == "rank" and any("SU" in l for l in block[1:]):
        fail("SUs printed for CPU ranks")
    cost_file = os.path.join(args.sweep_dir, "cost.txt")
    if open(cost_file).read().splitlines() != block:
        fail("cost.txt differs from the printed cost block")

    arrays = read_arrays(args.sweep_dir)
    array_of = {c: name for name, a in arrays.items() for c in a[3]}
    step_times = read_step_times(args.sweep_dir)
    amount = amount_pattern(rate)
    line_re = re.compile(r"^  cost (\S+): (\d+) " + unit + r"\(s\) x \((\d+) steps x " + NUM +
                         r" s \+ " + NUM + r" s\) = " + amount.rstrip("$") +
                         r"(?: \(longer than the time limit \S+: requeued, each resume adds a start-up\))?$")
    costed, hours_sum, sus_sum = set(), 0.0, 0.0
    for line in block:
        if not line.startswith("  cost "):
            continue
        m = line_re.match(line)
        if not m:
            fail(f"unparsable configuration line: {line}")
        name, devices, steps, step_s, startup = m.group(1), int(m.group(2)), int(m.group(3)), \
            float(m.group(4)), float(m.group(5))
        hours = float(m.group(6))
        if name not in array_of:
            fail(f"{name} is costed but in no rendered array")
        if devices != arrays[array_of[name]][1]:
            fail(f"{name}: {devices} {unit}(s), its array asks for {arrays[array_of[name]][1]}")
        if steps != ini_steps(args.sweep_dir, name):
            fail(f"{name}: {steps} steps, its INI says otherwise")
        planned = step_times.get(name)
        if planned is None or not close(step_s, planned, planned * 5e-4):
            fail(f"{name}: step time {step_s} s, hlp-plan predicted {planned}")
        if args.startup_s is not None and startup != args.startup_s:
            fail(f"{name}: start-up {startup} s, expected {args.startup_s}")
        expected = devices * (steps * planned + startup) / 3600
        if not close(hours, expected, 0.00005 + expected * 1e-6):
            fail(f"{name}: {hours} {unit}-hours, expected {devices} x ({steps} x {planned} + {startup}) / 3600 = {expected}")
        sus_sum += check_sus(name, hours, m.groups(), rate)
        hours_sum += hours
        costed.add(name)

    listed = set()
    for line in block:
        m = re.match(r"^  not costed \(no time prediction: .+\): (.+)$", line)
        if m:
            listed.update(n.strip() for n in m.group(1).split(","))
    if costed & listed:
        fail(f"costed and listed as not costed: {sorted(costed & listed)}")
    if costed | listed != set(array_of):
        fail(f"configurations neither costed nor listed: {sorted(set(array_of) - costed - listed)}")

    total = next((l for l in block if l.startswith("  predicted: ")), "")
    m = re.match(r"^  predicted: (\d+) configuration\(s\), " + amount.rstrip("$") +
                 r"(?: \(\+ (?P<uncosted>\d+) not costed, listed above\))?$", total)
    if not m:
        fail(f"unparsable total: {total!r}")
    if int(m.group(1)) != len(costed) or int(m.group("uncosted") or 0) != len(listed):
        fail(f"total counts {m.group(1)} costed + {m.group('uncosted')} not, the lines "
             f"{len(costed)} + {len(listed)}")
    total_hours = float(m.group(2))
    if not close(total_hours, hours_sum, 0.00005 * (len(costed) + 1)):
        fail(f"total {total_hours} is not the sum {hours_sum} of the configurations")
    total_sus = check_sus("total", total_hours, m.groups()[:3], rate)
    if isinstance(rate, float) and not close(total_sus, sus_sum, 0.00005 * (len(costed) + 1) * (1 + rate)):
        fail(f"total {total_sus} SUs is not the sum {sus_sum} of the configurations")

    worst_sum = 0.0
    worst_lines = [l for l in block if l.startswith("  worst case ") and not l.startswith("  worst case: ")]
    if len(worst_lines) != len(arrays):
        fail(f"{len(worst_lines)} worst-case lines for {len(arrays)} arrays")
    for line in worst_lines:
        m = re.match(r"^  worst case (\S+): (\d+) task\(s\) x (\d+) " + unit + r"\(s\) x (\S+) = " + amount, line)
        if not m:
            fail(f"unparsable worst case: {line}")
        script, tasks, devices, limit = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if script not in arrays:
            fail(f"worst case of {script}, which was not rendered")
        if (tasks, devices, limit) != arrays[script][:3]:
            fail(f"{script}: {tasks} x {devices} x {limit}, the script says {arrays[script][:3]}")
        hours = float(m.group(5))
        if not close(hours, tasks * devices * time_limit_hours(limit), 0.0001):
            fail(f"{script}: worst case {hours}, expected {tasks} x {devices} x {limit}")
        check_sus(script, hours, m.groups(), rate)
        worst_sum += hours
    m = re.match(r"^  worst case: " + amount.rstrip("$") + r" \(every task runs to its time limit\)$",
                 next((l for l in block if l.startswith("  worst case: ")), ""))
    if not m or not close(float(m.group(1)), worst_sum, 0.0001 * (len(arrays) + 1)):
        fail("worst-case total missing or not the sum of the arrays")
    check_sus("worst case", float(m.group(1)), m.groups(), rate)

    analyze = [n for n in os.listdir(args.sweep_dir) if n.endswith("-analyze.sbatch")][0]
    text = open(os.path.join(args.sweep_dir, analyze)).read()
    command = [l for l in text.splitlines() if l.startswith('"$HLP_BIN/hlp-analyze" report')][0]
    wanted = f" --su-per-gpu-hour {args.rate}" if isinstance(rate, float) else ""
    if not re.search(r'-o "\$REPORT_DIR" --sweep \S+' + re.escape(wanted) + "$", command):
        fail(f"analysis command {command!r} does not end with '{wanted}'")

    print(f"cost_check: {len(costed)} costed, {len(listed)} listed, {len(arrays)} arrays: ok")
    print(f"totals {total_hours:.4f} {total_sus:.4f}")


main()
