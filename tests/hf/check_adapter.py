#!/usr/bin/python3
"""Opens a PEFT adapter directory written by hlp-train with json + torch only (what a PEFT user
has) and checks PEFT's file names, tensor names and config keys.

    /usr/bin/python3 check_adapter.py DIR R
"""
import json
import os
import re
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32).view(e["shape"])
    return out


def main(d, r):
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    for key in ("peft_type", "r", "lora_alpha", "lora_dropout", "target_modules",
                "base_model_name_or_path", "task_type", "bias"):
        assert key in cfg, "adapter_config.json lacks " + key
    assert cfg["peft_type"] == "LORA" and cfg["r"] == r, cfg
    tensors = read_safetensors(os.path.join(d, "adapter_model.safetensors"))
    pattern = re.compile(r"base_model\.model\.model\.layers\.\d+\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")
    modules = set()
    for name, t in tensors.items():
        m = pattern.match(name)
        assert m, "not a PEFT LoRA name: " + name
        assert m.group(2) in cfg["target_modules"], name
        assert (t.shape[0] if m.group(3) == "A" else t.shape[1]) == r, (name, tuple(t.shape))
        assert torch.isfinite(t).all(), name
        modules.add(name.rsplit(".lora_", 1)[0])
    for mod in modules:
        assert mod + ".lora_A.weight" in tensors and mod + ".lora_B.weight" in tensors, mod
    trained = sum(int(t.abs().sum() > 0) for n, t in tensors.items() if ".lora_B." in n)
    assert trained == len(modules), "some lora_B are still zero: %d of %d" % (trained, len(modules))
    print("PEFT adapter OK: %d modules, r %d, alpha %s, targets %s, base %s"
          % (len(modules), r, cfg["lora_alpha"], cfg["target_modules"], cfg["base_model_name_or_path"]))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
