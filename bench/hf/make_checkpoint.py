#!/usr/bin/python3
"""Writes a random Hugging Face-format Jet-Nemotron checkpoint (config.json + sharded
safetensors + index) for the --init-from load benchmark, tensor by tensor (bounded memory), in
F32 (default) or BF16 as a released checkpoint stores it.

    /usr/bin/python3 bench/hf/make_checkpoint.py small|1gb|jet-nemotron-2b OUTDIR [F32|BF16]
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hf"))
from make_fixture import CONFIG, write_safetensors  # noqa: E402

SHAPES = {
    # HLP's `small` preset (src/model/config.cpp) as a config.json
    "small": dict(hidden=256, mlp=768, vocab=4096, layers="GGGGGGAGGASG", heads=4, kv=2, hd=64,
                  window=256, jet_heads=4, dk=48, dv=128),
    # about 307 M parameters = 1.23 GB in F32
    "1gb": dict(hidden=1024, mlp=4096, vocab=32768, layers="GGGGGAGGGSGG", heads=8, kv=2, hd=128,
                window=512, jet_heads=8, dk=96, dv=256),
    # Jet-Nemotron-2B's shapes (1.96 B parameters: 3.9 GB in BF16, 7.9 GB in F32)
    "jet-nemotron-2b": dict(hidden=1536, mlp=8960, vocab=151936,
                            layers="GGGGGGGGGGGGGGAGGGGASSGGGGGG", heads=12, kv=2, hd=128,
                            window=1152, jet_heads=12, dk=96, dv=256),
}


def tensors(s):
    D, H, KV, hd, J, dk, dv = s["hidden"], s["heads"], s["kv"], s["hd"], s["jet_heads"], s["dk"], s["dv"]
    yield "model.embed_tokens.weight", [s["vocab"], D]
    for i, kind in enumerate(s["layers"]):
        p = "model.layers.%d." % i
        yield p + "input_layernorm.weight", [D]
        yield p + "post_attention_layernorm.weight", [D]
        for m, shape in (("gate_proj", [s["mlp"], D]), ("up_proj", [s["mlp"], D]), ("down_proj", [D, s["mlp"]])):
            yield p + "mlp." + m + ".weight", shape
        a = p + "self_attn."
        if kind == "G":
            for m, shape in (("q_proj", [J * dk, D]), ("k_proj", [J * dk, D]), ("v_proj", [J * dv, D]),
                             ("a_proj", [J, D]), ("b_proj", [J, D]), ("g_proj", [J * dv, D]),
                             ("o_proj", [D, J * dv])):
                yield a + m + ".weight", shape
            yield a + "dynamic_conv1d.kernel_generator.w1.weight", [J * dv // 8, D]
            yield a + "dynamic_conv1d.kernel_generator.w2.weight", [J * dv * 4, J * dv // 8]
            yield a + "dynamic_conv1d.kernel_generator.w2.bias", [J * dv * 4]
            yield a + "A_log", [J]
            yield a + "dt_bias", [J]
            yield a + "o_norm.weight", [dv]
        else:
            for m, rows in (("q_proj", H * hd), ("k_proj", KV * hd), ("v_proj", KV * hd)):
                yield a + m + ".weight", [rows, D]
                yield a + m + ".bias", [rows]
            yield a + "o_proj.weight", [D, H * hd]
    yield "model.norm.weight", [D]


def main(which, out, dtype="F32"):
    s = SHAPES[which]
    store = {"F32": torch.float32, "BF16": torch.bfloat16}[dtype]
    os.makedirs(out, exist_ok=True)
    cfg = dict(CONFIG)
    cfg["torch_dtype"] = {"F32": "float32", "BF16": "bfloat16"}[dtype]
    cfg.update(hidden_size=s["hidden"], intermediate_size=s["mlp"], vocab_size=s["vocab"],
               num_attention_heads=s["heads"], num_key_value_heads=s["kv"],
               num_hidden_layers=len(s["layers"]), rope_theta=1e6, max_window_layers=len(s["layers"]),
               layer_types=[{"G": "jet", "A": "attn", "S": "swa"}[k] for k in s["layers"]])
    cfg["efficient_attention_config"] = {
        "jet": {"conv_size": 4, "dconv_generator_reduction": 8, "expand_v": s["dv"] / s["dk"],
                "head_dim": s["dk"], "mode": "chunk", "norm_eps": "1e-5", "num_heads": s["jet_heads"]},
        "swa": {"window_size": s["window"]}}
    if s["hd"] * s["heads"] != s["hidden"]:
        cfg["head_dim"] = s["hd"]
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    # Shards of at most ~256 MB, written one at a time.
    g = torch.Generator().manual_seed(0)
    shard, shard_bytes, shards, weight_map, total = [], 0, [], {}, 0

    def flush():
        nonlocal shard, shard_bytes
        if shard:
            shards.append(shard)
            name = "model-%05d.safetensors" % len(shards)
            write_safetensors(os.path.join(out, name), shard)
            weight_map.update({n: name for n, _ in shard})
            shard, shard_bytes = [], 0

    for name, shape in tensors(s):
        t = 0.02 * torch.randn(shape, generator=g)
        if name.endswith("norm.weight"):
            t += 1
        t = t.to(store)
        shard.append((name, t))
        shard_bytes += t.numel() * t.element_size()
        total += t.numel() * t.element_size()
        if shard_bytes > 256 << 20:
            flush()
    flush()
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
    print("%s: %d tensors, %.1f MB in %d shards -> %s" % (which, len(weight_map), total / 1e6, len(shards), out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
