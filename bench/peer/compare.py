#!/usr/bin/python3
"""Table of the strategy benchmark (bench/train/run_strategies.sh) from its result files.

Reads DIR/<strategy>.h5 (hlp-train result files: /steps/<metric> float64 [world, steps]) and
DIR/peer_ddp.json (bench/peer/peer_ddp.py) and prints:
  1. per strategy: global tokens/s, tokens/s per device, peak bytes (max over ranks),
     parameter / gradient / optimizer bytes (max over ranks), exposed-communication fraction;
  2. HLP ddp tokens/s / PyTorch DDP tokens/s;
  3. the loss curves of HLP ddp and the peer side by side, max relative difference.
Throughput for every row, HLP and peer alike: per step, the slowest rank's step time
(max over ranks); tokens/s = G*T / median of that over the steps after the first (warm-up) of
every run (repeats <stem>.r2.h5, peer_ddp.r2.json, ... are pooled); "best step" = G*T / the
fastest such step (the least disturbed by other load on a shared machine).
Exposed-communication fraction = median over steps >= 1 of max over ranks of comm_exposed_s /
step_time_s. Also writes DIR/summary.json and DIR/loss_curves.csv.

  /usr/bin/python3 bench/peer/compare.py DIR [--tolerance 1e-4]
Exit code 0 (the verdicts are printed: a benchmark reports), except with --require-agreement:
1 when the HLP ddp and peer loss curves are missing or differ by more than --tolerance.
"""
import argparse
import re
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
        # the pools every rank was bounded to (hlp-train --threads): LibTorch / OpenBLAS
        m["threads"] = "%s/%s" % (int(f.attrs.get("threads_intra_op", -1)),
                                  int(f.attrs.get("blas_threads", -1)))
    return world, m


def runs_of(directory, stem, ext):
    """stem.ext, then the interleaved repeats stem.r2.ext, stem.r3.ext, ..."""
    first = os.path.join(directory, stem + ext)
    pattern = re.compile(re.escape(stem) + r"\.r(\d+)" + re.escape(ext) + "$")
    rest = sorted((int(m.group(1)), os.path.join(directory, name))
                  for name in os.listdir(directory) for m in [pattern.match(name)] if m)
    return ([first] if os.path.exists(first) else []) + [p for _, p in rest]


def cpu_per_step(paths, steps_per_run):
    """CPU seconds (user + sys, all ranks, whole run incl. start-up) per step, from the
    <run>.cpu.json files cpu_time.py wrote next to each run; None when any is missing."""
    total = 0.0
    for path in paths:
        cpu = os.path.splitext(path)[0] + ".cpu.json"
        if not os.path.exists(cpu):
            return None
        with open(cpu) as f:
            c = json.load(f)
        total += c["user_s"] + c["sys_s"]
    return total / (steps_per_run * len(paths))


def throughput(tokens_per_step, slowest_after_warmup):
    """median-step and best-step global tokens/s from per-step slowest-rank times."""
    return (float(np.median(tokens_per_step / np.asarray(slowest_after_warmup))),
            float(np.max(tokens_per_step / np.asarray(slowest_after_warmup))))


def cpu_of(path):
    with open(path) as f:
        c = json.load(f)
    return c["user_s"] + c["sys_s"]


def marginal_cpu_per_step(directory, paths, stem, ext, steps):
    """(mean CPU of the full runs - CPU of the 1-step run <stem>.steps1) / (steps - 1), or None."""
    one = os.path.join(directory, stem + ".steps1.cpu.json")
    cpus = [os.path.splitext(p)[0] + ".cpu.json" for p in paths]
    if steps < 2 or not os.path.exists(one) or not all(os.path.exists(c) for c in cpus):
        return None
    return (sum(cpu_of(c) for c in cpus) / len(cpus) - cpu_of(one)) / (steps - 1)


def hlp_row(name, paths):
    """All runs' steps after the warm-up are pooled; losses and bytes come from the first run."""
    pooled, frac, world, first = [], [], None, None
    for path in paths:
        world, m = read_h5(path)
        st = m["step_time_s"]  # [world, steps]
        if st.shape[1] <= WARMUP:
            raise SystemExit("%s: %d steps, need more than the %d warm-up step(s)" % (path, st.shape[1], WARMUP))
        tokens_per_step = float(m["tokens"][:, 0].sum())  # each rank's tokens, summed: G*T
        pooled += list(st.max(axis=0)[WARMUP:])
        frac += list((m["comm_exposed_s"] / st).max(axis=0)[WARMUP:])
        first = first or m
    tps, best = throughput(tokens_per_step, pooled)
    return {
        "name": "hlp " + name, "world": world, "threads": first["threads"], "runs": len(paths), "steps_used": len(pooled),
        "tokens_per_s": tps, "tokens_per_s_per_device": tps / world, "best_step_tokens_per_s": best,
        "hlp_reported_tokens_per_s": float(np.median(first["tokens_per_s"][:, WARMUP:])),
        "step_time_s": float(np.median(pooled)), "step_times_s": pooled,
        "peak_bytes": int(np.nanmax(first["peak_bytes"])),
        "param_bytes": int(np.nanmax(first["param_bytes"])),
        "grad_bytes": int(np.nanmax(first["grad_bytes"])),
        "optimizer_bytes": int(np.nanmax(first["optimizer_bytes"])),
        "comm_exposed_fraction": float(np.median(frac)),
        "cpu_s_per_step": cpu_per_step(paths, first["step_time_s"].shape[1]),
        "losses": [float(x) for x in first["loss"][0]],
    }


def peer_row(paths):
    pooled, first = [], None
    for path in paths:
        with open(path) as f:
            p = json.load(f)
        pooled += [max(t) for t in p["step_time_s"]][WARMUP:]
        first = first or p
    tps, best = throughput(first["tokens_per_step"], pooled)
    return {"name": "pytorch ddp", "world": first["world"], "runs": len(paths),
            "threads": "%s/%s" % (first.get("threads", "?"), first.get("blas_threads", "?")),
            "steps_used": len(pooled), "tokens_per_s": tps,
            "tokens_per_s_per_device": tps / first["world"], "best_step_tokens_per_s": best,
            "step_time_s": float(np.median(pooled)), "step_times_s": pooled,
            "cpu_s_per_step": cpu_per_step(paths, len(first["losses"])),
            "losses": first["losses"]}


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
        paths = runs_of(args.dir, s, ".h5")
        if paths:
            rows.append(hlp_row(s, paths))
        else:
            print("no %s.h5 in %s (skipped)" % (s, args.dir), file=sys.stderr)
    peer_paths = runs_of(args.dir, "peer_ddp", ".json")
    peer = peer_row(peer_paths) if peer_paths else None

    print("\n## Strategies (medians after %d warm-up step; bytes: max over ranks, MiB)\n" % WARMUP)
    print("| run | ranks | threads per rank (torch/BLAS) | steps used | median step s | tokens/s global | tokens/s per device "
          "| best-step tokens/s | peak MiB | param MiB | grad MiB | optim MiB | exposed comm "
          "| CPU s/step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows + ([peer] if peer else []):
        print("| %s | %d | %s | %d | %.3f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s |" % (
            r["name"], r["world"], r["threads"], r["steps_used"], r["step_time_s"], r["tokens_per_s"],
            r["tokens_per_s_per_device"], r["best_step_tokens_per_s"], mib(r.get("peak_bytes")), mib(r.get("param_bytes")),
            mib(r.get("grad_bytes")), mib(r.get("optimizer_bytes")),
            "%.1f %%" % (100 * r["comm_exposed_fraction"]) if "comm_exposed_fraction" in r else "-",
            "%.2f" % r["cpu_s_per_step"] if r.get("cpu_s_per_step") else "-"))
    print("\nCPU s/step: user + sys seconds of all ranks over the whole run (start-up, init and "
          "the warm-up step included) / steps; less sensitive to other load than wall time, but "
          "includes MPI busy-polling while a rank waits.")

    summary = {"rows": rows, "peer": peer}
    ddp = next((r for r in rows if r["name"] == "hlp ddp"), None)
    if ddp and peer:
        ratio = ddp["tokens_per_s"] / peer["tokens_per_s"]
        best = ddp["best_step_tokens_per_s"] / peer["best_step_tokens_per_s"]
        summary["hlp_ddp_over_pytorch_ddp"] = ratio
        summary["hlp_ddp_over_pytorch_ddp_best_step"] = best
        print("\nHLP ddp tokens/s / PyTorch DDP tokens/s (medians, %d vs %d steps pooled over "
              "%d interleaved run(s) each) = %.0f / %.0f = %.2fx (target >= 1.2: %s)"
              % (ddp["steps_used"], peer["steps_used"], peer["runs"], ddp["tokens_per_s"],
                 peer["tokens_per_s"], ratio, "met" if ratio >= 1.2 else "NOT met"))
        print("best step (least disturbed by other load): %.0f / %.0f = %.2fx"
              % (ddp["best_step_tokens_per_s"], peer["best_step_tokens_per_s"], best))
        if ddp.get("cpu_s_per_step") and peer.get("cpu_s_per_step"):
            summary["pytorch_cpu_over_hlp_cpu"] = peer["cpu_s_per_step"] / ddp["cpu_s_per_step"]
            print("CPU seconds per step, PyTorch DDP / HLP ddp: %.2f / %.2f = %.2fx"
                  % (peer["cpu_s_per_step"], ddp["cpu_s_per_step"], summary["pytorch_cpu_over_hlp_cpu"]))
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
    if ddp and peer:
        n_steps = len(peer["losses"])
        a = marginal_cpu_per_step(args.dir, runs_of(args.dir, "ddp", ".h5"), "ddp", ".h5", n_steps)
        b = marginal_cpu_per_step(args.dir, runs_of(args.dir, "peer_ddp", ".json"), "peer_ddp",
                                  ".json", n_steps)
        if a and b:
            summary["hlp_ddp_cpu_s_per_step_marginal"] = a
            summary["pytorch_ddp_cpu_s_per_step_marginal"] = b
            print("CPU seconds per step without start-up (full runs minus a 1-step run), all ranks: "
                  "HLP ddp %.2f, PyTorch DDP %.2f (HLP / PyTorch = %.2fx)" % (a, b, a / b))
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
