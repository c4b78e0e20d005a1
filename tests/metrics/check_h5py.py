"""Reads an HLP result file written by metrics_tool with h5py and checks the contract.
usage: check_h5py.py FILE WORLD STEPS"""
import os
import sys

import h5py
import numpy as np

path, world, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
f = h5py.File(path, "r")
a = f.attrs
assert a["hlp_schema_version"] == 1, a["hlp_schema_version"]
assert a["complete"] == 1
assert a["world_size"] == world
assert a["strategy"] == "ddp", a["strategy"]
assert list(a["mesh"]) == [world, 1, 1]
assert a["config"].startswith("[run]")
# the build's MPI (cmake -DHLP_MPI, in the test environment as HLP_MPI)
assert {"openmpi": "Open MPI"}.get(os.environ.get("HLP_MPI"), "MPICH") in a["mpi_version"], a["mpi_version"]
assert len(a["clock_offset_s"]) == world

contract = ["loss", "tokens", "step_time_s", "tokens_per_s", "data_wait_s", "forward_s",
            "backward_s", "optimizer_s", "comm_exposed_s", "comm_bytes", "peak_bytes",
            "param_bytes", "grad_bytes", "optimizer_bytes", "mfu"]
for name in contract:
    d = f["steps"][name]
    assert d.shape == (world, steps), (name, d.shape)
    assert d.dtype == np.float64, (name, d.dtype)
assert list(f["steps/step"][:]) == list(range(steps))
loss = f["steps/loss"][:]
expected = np.array([[r * 1000.0 + s for s in range(steps)] for r in range(world)])
assert np.array_equal(loss, expected), loss
tokens = f["steps/tokens"][:]  # metric index 1 -> + 0.01
assert np.allclose(tokens, expected + 0.01)

m = f["model"].attrs
assert m["params_total"] == 7400000 and m["params_trainable"] == 65536
assert m["flops_per_token"] == 4.5e7
p = f["pipeline"].attrs
assert list(p["stage_first_layer"]) == [0, 4] and p["bubble_fraction"] == 0.3

su = f["summary"].attrs
assert su["skip_steps"] == 1 and su["steps_used"] == steps - 1
median_step = (1 + steps - 1) / 2
assert np.allclose(su["loss_median_per_rank"], [r * 1000.0 + median_step for r in range(world)])
assert su["loss_median_max_over_ranks"] == (world - 1) * 1000.0 + median_step

for r in range(world):
    t = f["trace"][f"rank{r}"][:]
    assert len(t) == 7 * steps + 1, len(t)
    names = [n.decode() for n in t["name"]]
    assert names.count("forward") == 2 * steps
    ar = t[t["name"] == b"all_reduce"]
    assert all(ar["lane"] == 1)
    assert list(ar["bytes"]) == [1000 * (r + 1) + s for s in range(steps)]
    assert np.all(t["end_s"] >= t["start_s"])
print(f"h5py ok: {path}")
