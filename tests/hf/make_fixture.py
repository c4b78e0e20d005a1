#!/usr/bin/python3
"""Writes a tiny Hugging Face-format Jet-Nemotron checkpoint and its reference logits, using only
struct + json + torch (no safetensors package, no HLP C++ code), for tests/hf.

    /usr/bin/python3 tests/hf/make_fixture.py OUTDIR

OUTDIR/
  config.json                          model_type jet_nemotron, layers jet, attn, jet, swa
  model-0000{1,2}-of-00002.safetensors  F32, Hugging Face names, split across two shards
  model.safetensors.index.json
  bf16/model.safetensors, fp16/model.safetensors   the same weights stored as BF16 / F16
  reference.safetensors                 tokens I64 [4, 17], logits F64 [4, 16, V], loss F64 [1]:
                                        the fp32 weights' exact forward (computed in float64)
                                         (bench/peer/hlp_peer_model.py on the F32 weights)
  broken/<case>/...                     one defect each: corrupted_header, truncated,
                                         wrong_dtype, missing_shard, shape_mismatch
"""
import copy
import json
import math
import os
import shutil
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "peer"))
import hlp_peer_model as peer  # noqa: E402

VOCAB, HIDDEN, MLP = 272, 32, 64
CONFIG = {
    "architectures": ["JetNemotronForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "efficient_attention_config": {
        "jet": {"conv_size": 4, "dconv_generator_reduction": 8, "dconv_implementation": "triton",
                "expand_v": 2.0, "head_dim": 8, "mode": "chunk", "norm_eps": "1e-5",
                "num_heads": 2},
        "swa": {"window_size": 5},
    },
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": MLP,
    "layer_types": ["jet", "attn", "jet", "swa"],
    "max_position_embeddings": 4096,
    "max_window_layers": 4,
    "model_type": "jet_nemotron",
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "transformers_version": "4.51.3",
    "use_cache": True,
    "use_mrope": False,
    "vocab_size": VOCAB,
}
# The same model in the peer's terms (its config dict).
PEER = {"pattern": "GAGS", "hidden": HIDDEN, "mlp_hidden": MLP, "vocab": VOCAB, "attn_heads": 4,
        "attn_kv_heads": 2, "attn_head_dim": 8, "attn_qkv_bias": True, "window": 5,
        "rope_theta": 10000.0, "gdn_heads": 2, "gdn_head_dim_k": 8, "gdn_head_dim_v": 16,
        "gdn_conv_width": 4, "gdn_chunk": 64, "gdn_variant": "jetblock", "gdn_dconv_reduction": 8,
        "rms_eps": 1e-6, "gdn_norm_eps": 1e-5, "tied_embeddings": True}


def hf_name(peer_name):
    """The Hugging Face name of a peer (= HLP) parameter, from the Jet-Nemotron / Qwen2 code."""
    if peer_name.startswith("embed_tokens."):
        return "model." + peer_name
    if peer_name.startswith("final_norm."):
        return "model.norm." + peer_name[len("final_norm."):]
    parts = peer_name.split(".")  # blocks, N, part, rest...
    assert parts[0] == "blocks", peer_name
    layer, part, rest = parts[1], parts[2], ".".join(parts[3:])
    prefix = "model.layers.%s." % layer
    return prefix + {"mixer_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
                     "mixer": "self_attn", "mlp": "mlp"}[part] + "." + rest


DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
          torch.int64: "I64", torch.int32: "I32"}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: go through int16 bits
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, header_override=None):
    """tensors: list of (name, tensor). Format: u64 LE header length, JSON header, raw data."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in sorted(tensors):
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if header_override:
        header_override(header)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def build_model():
    torch.manual_seed(1234)
    model = peer.HybridLM(PEER, 0, 0.0, set())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(1, 16).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty_like(p).uniform_(-4, -1))
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.startswith("embed_tokens"):
                p.copy_(0.1 * torch.randn_like(p))  # logits of order 1: fp32 noise well below 1e-5
            else:  # projections, biases, kernel generator
                p.copy_(0.2 * torch.randn_like(p))
    return model


def main(out):
    os.makedirs(out, exist_ok=True)
    model = build_model()
    weights = [(hf_name(n), p.detach().clone()) for n, p in model.named_parameters()]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)

    # Two shards: embedding + layers 0, 1 in the first; the rest in the second.
    first = [(n, t) for n, t in weights
             if n.startswith("model.embed") or n.startswith("model.layers.0.")
             or n.startswith("model.layers.1.")]
    first_names = {n for n, _ in first}
    second = [(n, t) for n, t in weights if n not in first_names]
    shards = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
    weight_map = {}
    for file, tensors in shards.items():
        write_safetensors(os.path.join(out, file), tensors)
        weight_map.update({n: file for n, _ in tensors})
    total = sum(t.numel() * 4 for _, t in weights)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    for sub, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        write_safetensors(os.path.join(out, sub, "model.safetensors"),
                          [(n, t.to(dtype)) for n, t in weights])
        shutil.copy(os.path.join(out, "config.json"), os.path.join(out, sub, "config.json"))

    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, VOCAB, (4, 17), generator=g)
    # The reference is the same math in float64 on the very fp32 weights written above: HLP's fp32
    # forward is then compared with the exact values, and the tolerance covers HLP's rounding
    # alone, not two fp32 computations whose BLAS sums in a CPU-dependent order.
    with torch.no_grad():
        exact = copy.deepcopy(model).double()
        logits = exact(tokens[:, :-1])
        loss = peer.cross_entropy_loss(logits, tokens[:, 1:])
    write_safetensors(os.path.join(out, "reference.safetensors"),
                      [("tokens", tokens), ("logits", logits.contiguous()),
                       ("loss", loss.reshape(1).double())])

    # Defective copies, one defect each.
    broken = os.path.join(out, "broken")
    single = os.path.join(out, "single.safetensors")
    write_safetensors(single, weights)
    data = open(single, "rb").read()

    def case(name):
        d = os.path.join(broken, name)
        os.makedirs(d, exist_ok=True)
        return d

    with open(os.path.join(case("corrupted_header"), "model.safetensors"), "wb") as f:
        n = struct.unpack("<Q", data[:8])[0]
        f.write(data[:8] + b"{\"oops" + data[14:8 + n].replace(b"{", b"[") + data[8 + n:])
    with open(os.path.join(case("truncated"), "model.safetensors"), "wb") as f:
        f.write(data[: len(data) - 1000])

    def as_int32(header):  # claims I32 for the embedding (same byte count as F32)
        header["model.embed_tokens.weight"]["dtype"] = "I32"
    write_safetensors(os.path.join(case("wrong_dtype"), "model.safetensors"), weights, as_int32)

    d = case("missing_shard")
    for file in shards:
        if file.startswith("model-00001"):
            shutil.copy(os.path.join(out, file), os.path.join(d, file))
    shutil.copy(os.path.join(out, "model.safetensors.index.json"), d)

    mis = [(n, t[:-1] if n.endswith("mlp.up_proj.weight") else t) for n, t in weights]
    write_safetensors(os.path.join(case("shape_mismatch"), "model.safetensors"), mis)
    os.remove(single)
    print("fixture written to %s (%d tensors, %d bytes F32)" % (out, len(weights), total))


if __name__ == "__main__":
    main(sys.argv[1])
