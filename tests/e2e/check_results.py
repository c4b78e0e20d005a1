"""check_results.py SWEEP_DIR RESULTS_DIR REPORT_DIR: every configuration of the rendered sweep
has a complete result file that satisfies the minimum contract (docs/results-schema.md, "The
minimum contract"), and the report exists."""
import glob
import math
import os
import sys

import h5py

sweep_dir, results_dir, report_dir = sys.argv[1:4]
configs = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(sweep_dir, "configs", "*.ini")))
assert configs, f"no configurations in {sweep_dir}/configs"
problems = []
for name in configs:
    path = os.path.join(results_dir, name + ".h5")
    if not os.path.exists(path):
        problems.append(f"{name}: no result file {path}")
        continue
    ranks = int(name.split("-n")[1].split("-")[0])
    with h5py.File(path, "r") as f:
        attrs = f.attrs
        if int(attrs.get("complete", 0)) != 1:
            problems.append(f"{name}: complete != 1")
        if int(attrs.get("world_size", -1)) != ranks:
            problems.append(f"{name}: world_size {attrs.get('world_size')} != {ranks}")
        strategy = attrs.get("strategy")
        strategy = strategy.decode() if isinstance(strategy, bytes) else str(strategy)
        if not strategy.startswith(name.split("-n")[0].split("+")[0]):
            problems.append(f"{name}: strategy attribute '{strategy}'")
        if "steps/loss" not in f:
            problems.append(f"{name}: no /steps/loss")
            continue
        loss = f["steps/loss"][()]
        if loss.shape[0] != ranks or loss.shape[1] < 1:
            problems.append(f"{name}: /steps/loss shape {loss.shape}")
        if not all(math.isfinite(x) for x in loss.flatten()):
            problems.append(f"{name}: non-finite loss")
index = os.path.join(report_dir, "index.md")
if not os.path.exists(index) or os.path.getsize(index) == 0:
    problems.append(f"no report: {index}")
for p in problems:
    print("FAIL:", p)
print(f"{len(configs)} configurations checked, {len(problems)} problems")
sys.exit(1 if problems else 0)
