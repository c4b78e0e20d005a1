#!/usr/bin/python3
"""Random-weight checkpoints written by transformers 5's save_pretrained, and transformers' own
losses on fixed token sequences: the reference hlp-eval is tested against (tests/hf/CMakeLists.txt,
hf_transformers5_*). Runs where transformers 5 is installed: the Debian sid root
(tools/debian-root.sh; python3-transformers 5.12.1, python3-torch 2.14.1, CPU):

    python3 tests/hf/transformers5/make_reference.py OUTDIR

OUTDIR/<name>/config.json, model.safetensors   the checkpoint, as save_pretrained wrote it
OUTDIR/<name>/tokens.txt                        the sequences, one a line (hlp-eval --tokens)
OUTDIR/<name>/reference.json                    transformers' loss of each sequence (fp32
                                                weights, its `loss`), the same model's loss in
                                                fp64 (its logits in float64, cross-entropy
                                                here: transformers' loss casts logits to float32),
                                                its versions, and the model's fields
The committed copy is tests/hf/transformers5/fixtures/ (each checkpoint under 2 MB): ctest reads it,
so CI needs no sid root. Regenerate it only with a reason (a new transformers release, a new
model), and say which.
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

torch.set_num_threads(1)
torch.manual_seed(0)

# Each model: (name, model_type, fields). Small shapes; T not a multiple of 64, several chunks.
MODELS = [
    ("qwen2_v5", "qwen2", dict(vocab_size=384, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=1024, tie_word_embeddings=False,
                               rope_theta=50000.0, rms_norm_eps=1e-6)),
    ("qwen2_v5_tied", "qwen2", dict(vocab_size=300, hidden_size=48, intermediate_size=80,
                                    num_hidden_layers=2, num_attention_heads=6,
                                    num_key_value_heads=2, max_position_embeddings=1024,
                                    tie_word_embeddings=True, rms_norm_eps=1e-5)),
]
LENGTHS = [2, 17, 150, 201]  # tokens per sequence: T = 1, 16, 149, 200


def main(out):
    summary = {}
    for name, model_type, fields in MODELS:
        cfg = AutoConfig.for_model(model_type, **fields)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        # transformers initialises with std 0.02: scale up so the losses are far from log(V)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.mul_(5.0)
        model.eval()
        d = os.path.join(out, name)
        model.save_pretrained(d)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(d, extra)):
                os.remove(os.path.join(d, extra))
        gen = torch.Generator().manual_seed(len(name))
        seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in LENGTHS]
        with open(os.path.join(d, "tokens.txt"), "w") as f:
            for s in seqs:
                f.write(" ".join(str(int(t)) for t in s) + "\n")
        losses32, losses64 = [], []
        model64 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64).eval()
        with torch.no_grad():
            for s in seqs:
                ids = s.unsqueeze(0)
                losses32.append(float(model(input_ids=ids, labels=ids).loss))
                # transformers' loss casts the logits to float32: the fp64 loss is taken here
                logits = model64(input_ids=ids).logits[0, :-1]
                losses64.append(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))
        ref = {"transformers": transformers.__version__, "torch": torch.__version__,
               "model_type": model_type, "fields": fields, "lengths": LENGTHS,
               "loss_fp32": losses32, "loss_fp64": losses64}
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        summary[name] = losses32
        print(name, "fp32", losses32, "fp64", losses64)
    return summary


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures")
