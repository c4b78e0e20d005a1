"""Two PEFT adapters written by hlp-train --save-adapter hold the same tensors: the same keys and
every tensor within BOUND of its largest entry in the first (relative), and some lora_B whose
key contains MOVED moved from zero in one step (so the comparison is not of zeros).
  compare_adapters.py FIRST_DIR SECOND_DIR LABEL BOUND MOVED [EXPECT_MOVED_KEYS]
EXPECT_MOVED_KEYS: how many keys contain MOVED (e.g. every expert's lora_A / lora_B)."""
import json
import struct
import sys

import numpy as np


def tensors(path):
    with open(path + "/adapter_model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


first, second = tensors(sys.argv[1]), tensors(sys.argv[2])
label, bound, moved_key = sys.argv[3], float(sys.argv[4]), sys.argv[5]
assert first.keys() == second.keys(), sorted(first.keys() ^ second.keys())[:4]
selected = {k for k in first if moved_key in k}
if len(sys.argv) > 6:
    assert len(selected) == int(sys.argv[6]), (len(selected), sys.argv[6])
worst = max(float(np.abs(first[k] - second[k]).max() / max(np.abs(first[k]).max(), 1e-30))
            for k in first)
assert worst <= bound, f"{label} adapter differs from single's by {worst:.2e} of the largest entry"
moved = sum(bool(np.abs(first[k]).max() > 0) for k in selected if k.endswith("lora_B.weight"))
assert moved > 0, f"no {moved_key} lora_B moved in one step"
print(f"ok: {label} --save-adapter = single's ({len(first)} tensors, {len(selected)} {moved_key}, "
      f"largest difference {worst:.1e} relative; {moved} of their lora_B moved from zero)")
