#!/usr/bin/python3
"""Table of the strategy benchmark (bench/train/run_strategies.sh) from its result files.

Reads DIR/<strategy>.h5 (hlp-train result files: /steps/<metric> float64 [world, steps]) and
DIR/peer_ddp.json (bench/peer/peer_ddp.py) and prints:
  1. per strategy: global tokens/s, tokens/s per device, peak bytes (max over ranks),
     parameter / gradient / optimizer bytes (max over ranks), exposed-communication fraction;
  2. HLP ddp tokens/s / PyTorch DDP tokens/s;
  3. the loss curves of HLP ddp and the peer side by side, max relative difference.
Throughput for every row, HLP and peer alike: per step, the slowest rank's step time
(max over ranks); tokens/s = G*T / median of that over the steps after the first (warm-up).
Exposed-communication fraction = median over steps >= 1 of max over ranks of comm_exposed_s /
step_time_s. Also writes DIR/summary.json and DIR/loss_curves.csv.

  /usr/bin/python3 bench/peer/compare.py DIR [--tolerance 1e-4]
Exit code 0 (the verdicts are printed: a benchmark reports), except with --require-agreement:
1 when the HLP ddp and peer loss curves are missing or differ by more than --tolerance.
"""
import argparse
import json
import os
import statistics
import sys

import h5py
import numpy as np

STRATEGIES = ["single", "ddp", "fsdp", "fsdp2"]
WARMUP = 1


def read_h5(path):
    with h5py.File(path, "r") as f:
        steps = f["steps"]
        m = {k: np.asarray(steps[k]) for k in steps.keys() if k != "step"}
        world = int(f.attrs.get("world_size", m["step_time_s"].shape[0]))
    return world, m


def hlp_row(name, path):
    world, m = read_h5(path)
    st = m["step_time_s"]  # [world, steps]
    if st.shape[1] <= WARMUP:
        raise SystemExit("%s: %d steps, need more than the %d warm-up step(s)" % (path, st.shape[1], WARMUP))
    tokens_global = m["tokens"].sum(axis=0)  # tokens each rank processed, summed: G*T per step
    slowest = st.max(axis=0)
    tps = float(np.median(tokens_global[WARMUP:] / slowest[WARMUP:]))
    frac = m["comm_exposed_s"] / st
    return {
        "name": "hlp " + name, "world": world,
        "tokens_per_s": tps, "tokens_per_s_per_device": tps / world,
        "hlp_reported_tokens_per_s": float(np.median(m["tokens_per_s"][:, WARMUP:])),
        "step_time_s": float(np.median(slowest[WARMUP:])),
        "peak_bytes": int(np.nanmax(m["peak_bytes"])),
        "param_bytes": int(np.nanmax(m["param_bytes"])),
        "grad_bytes": int(np.nanmax(m["grad_bytes"])),
        "optimizer_bytes": int(np.nanmax(m["optimizer_bytes"])),
        "comm_exposed_fraction": float(np.median(frac.max(axis=0)[WARMUP:])),
        "losses": [float(x) for x in m["loss"][0]],
    }


def peer_row(path):
    with open(path) as f:
        p = json.load(f)
    slowest = [max(t) for t in p["step_time_s"]]
    step = statistics.median(slowest[WARMUP:])
    tps = p["tokens_per_step"] / step
    return {"name": "pytorch ddp", "world": p["world"], "tokens_per_s": tps,
            "tokens_per_s_per_device": tps / p["world"], "step_time_s": step,
            "losses": p["losses"]}


def mib(b):
    return "%.1f" % (b / 2**20) if b is not None else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--require-agreement", action="store_true",
                    help="exit 1 unless HLP ddp and the peer are both present and their losses "
                         "agree within --tolerance (the parity ctest)")
    args = ap.parse_args()
    rows = []
    for s in STRATEGIES:
        path = os.path.join(args.dir, s + ".h5")
        if os.path.exists(path):
            rows.append(hlp_row(s, path))
        else:
            print("missing %s (skipped)" % path, file=sys.stderr)
    peer_path = os.path.join(args.dir, "peer_ddp.json")
    peer = peer_row(peer_path) if os.path.exists(peer_path) else None

    print("\n## Strategies (medians after %d warm-up step; bytes: max over ranks, MiB)\n" % WARMUP)
    print("| run | ranks | step s | tokens/s global | tokens/s per device | peak MiB | param MiB "
          "| grad MiB | optim MiB | exposed comm |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows + ([peer] if peer else []):
        print("| %s | %d | %.3f | %.0f | %.0f | %s | %s | %s | %s | %s |" % (
            r["name"], r["world"], r["step_time_s"], r["tokens_per_s"],
            r["tokens_per_s_per_device"], mib(r.get("peak_bytes")), mib(r.get("param_bytes")),
            mib(r.get("grad_bytes")), mib(r.get("optimizer_bytes")),
            "%.1f %%" % (100 * r["comm_exposed_fraction"]) if "comm_exposed_fraction" in r else "-"))

    summary = {"rows": rows, "peer": peer}
    ddp = next((r for r in rows if r["name"] == "hlp ddp"), None)
    if ddp and peer:
        ratio = ddp["tokens_per_s"] / peer["tokens_per_s"]
        summary["hlp_ddp_over_pytorch_ddp"] = ratio
        print("\nHLP ddp tokens/s / PyTorch DDP tokens/s = %.0f / %.0f = %.2fx (target >= 1.2: %s)"
              % (ddp["tokens_per_s"], peer["tokens_per_s"], ratio, "met" if ratio >= 1.2 else "NOT met"))
        n = min(len(ddp["losses"]), len(peer["losses"]))
        print("\n## Loss curves (same initial weights, same batches)\n")
        print("| step | hlp ddp | pytorch ddp | rel diff |")
        print("|---|---|---|---|")
        worst = 0.0
        with open(os.path.join(args.dir, "loss_curves.csv"), "w") as f:
            f.write("step,hlp_ddp,pytorch_ddp,rel_diff\n")
            for i in range(n):
                a, b = ddp["losses"][i], peer["losses"][i]
                rel = abs(a - b) / max(abs(b), 1e-30)
                worst = max(worst, rel)
                print("| %d | %.7f | %.7f | %.2e |" % (i, a, b, rel))
                f.write("%d,%.9g,%.9g,%.3e\n" % (i, a, b, rel))
        summary["loss_max_rel_diff"] = worst
        print("\nmax relative loss difference over %d steps: %.2e (tolerance %.0e: %s)"
              % (n, worst, args.tolerance, "agree" if worst <= args.tolerance else "DISAGREE"))
    single = next((r for r in rows if r["name"] == "hlp single"), None)
    if single:
        for r in rows:
            if r is single:
                continue
            n = min(len(r["losses"]), len(single["losses"]))
            d = max(abs(r["losses"][i] - single["losses"][i]) / abs(single["losses"][i]) for i in range(n))
            print("%s vs hlp single: max relative loss difference %.2e" % (r["name"], d))
    with open(os.path.join(args.dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if args.require_agreement:
        worst = summary.get("loss_max_rel_diff")
        if worst is None or not worst <= args.tolerance:
            print("FAIL: HLP ddp and PyTorch DDP loss curves %s" %
                  ("missing" if worst is None else "differ by %.2e > %.0e" % (worst, args.tolerance)))
            sys.exit(1)
        print("PASS: loss curves agree within %.0e" % args.tolerance)


if __name__ == "__main__":
    main()
