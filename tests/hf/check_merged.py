#!/usr/bin/python3
"""Checks hlp-train --save-merged independently of HLP: every tensor of MERGED/model.safetensors
equals the base checkpoint's plus (lora_alpha / r) * B @ A of the PEFT adapter (json + torch).

    /usr/bin/python3 check_merged.py MERGED_DIR BASE_DIR ADAPTER_DIR
"""
import json
import os
import sys

import torch

from check_adapter import read_safetensors


def read_checkpoint(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    out = {}
    for f in sorted(set(json.load(open(index))["weight_map"].values())):
        out.update(read_safetensors(os.path.join(d, f)))
    return out


def main(merged_dir, base_dir, adapter_dir):
    merged, base = read_checkpoint(merged_dir), read_checkpoint(base_dir)
    adapter = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    cfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    scale = cfg["lora_alpha"] / cfg["r"]
    assert set(merged) == set(base), sorted(set(merged) ^ set(base))[:5]
    changed = 0
    for name, w in base.items():
        expected = w.clone()
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        a = adapter.get("base_model.model.%s.lora_A.weight" % module)
        if a is not None:
            expected += scale * adapter["base_model.model.%s.lora_B.weight" % module] @ a
            changed += 1
        err = (merged[name] - expected).abs().max().item()
        assert err < 1e-6, (name, err)
    assert os.path.exists(os.path.join(merged_dir, "config.json"))
    print("merged weights OK: %d tensors, %d with a merged adapter" % (len(base), changed))


if __name__ == "__main__":
    main(*sys.argv[1:4])
