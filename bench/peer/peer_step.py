#!/usr/bin/python3
"""One-process training-step throughput of the PyTorch peer (hlp_peer_model.py), on a GPU or CPU.

The peer of `hlp-train --strategy single` for the throughput comparison of issue 33: the same
architecture op for op, the same adapted modules, the same precision policy, its own random
weights (throughput does not depend on their values; `hlp-export-init --weights no` writes only
config.json and params.json, a 2 B model's weights would be 8 GB):
  - bf16: frozen matrices (projections, embedding = tied LM head) stored in bf16, adapters and
    frozen vectors / convolution kernels in fp32, the step under torch.autocast(bfloat16), the
    Gated DeltaNet core in fp32 (as HLP's --precision bf16 --base-dtype auto);
  - attention: torch's scaled_dot_product_attention on CUDA (--attention sdpa), the materialised
    [T, T] scores on CPU (naive, HLP's reference kernel);
  - AdamW (torch.optim, betas 0.9/0.999, eps 1e-8, weight decay 0) on the adapters, global-norm
    clipping at 1.0, random token ids (uniform over the vocabulary).
Step time = zero_grad + forward + loss + backward + clip + optimizer step, with the device
synchronised before and after (as hlp-train's step_time_s). tokens/s = B * T / median step time
of the steps after --warmup; peak = torch.cuda.max_memory_allocated over the run (weights
included: what hlp-train records as peak_bytes from the same caching-allocator statistics).

  python3 bench/peer/peer_step.py --export-dir DIR --device cuda --precision bf16 \
      --steps 8 --warmup 2 --out peer.json
Prints one line per step and a JSON summary (also to --out).
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hlp_peer_model as pm  # noqa: E402
import step_loop  # noqa: E402


def build(export_dir, device, precision, seed):
    cfg, index, adapted = pm.read_export_index(export_dir)
    lora = cfg["lora"]
    torch.manual_seed(seed)
    if hasattr(torch.device, "__enter__"):  # torch >= 2.0: allocate on the device directly
        with torch.device(device):
            model = pm.HybridLM(cfg["model"], int(lora["rank"]), float(lora["alpha"]), adapted)
    else:
        model = pm.HybridLM(cfg["model"], int(lora["rank"]), float(lora["alpha"]), adapted)
        model.to(device)
    try:
        params = pm.export_params(model, index)
    except ValueError as e:
        raise SystemExit(str(e))
    with torch.no_grad():
        for e in index:
            p, name = params[e["name"]], e["name"]
            if name.endswith("lora_B") or name.endswith(".bias") or name.endswith("dt_bias"):
                p.zero_()
            elif name.endswith("lora_A"):
                bound = 1.0 / math.sqrt(p.size(1))
                p.uniform_(-bound, bound)
            elif name.endswith("A_log"):
                p.uniform_(1.0, 16.0).log_()
            elif p.dim() == 1:
                p.fill_(1.0)  # norm weights
            else:
                p.normal_(0.0, 0.02)
            p.requires_grad_(bool(e["trainable"]))
            # bf16 storage of the frozen matrices (2-D); vectors and 3-D conv kernels stay fp32
            if precision == "bf16" and not e["trainable"] and p.dim() == 2:
                p.data = p.data.to(torch.bfloat16)
    return cfg, model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--export-dir", required=True, help="hlp-export-init --out-dir (--weights no)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--attention", default=None, choices=["naive", "sdpa"],
                    help="default: sdpa on cuda, naive on cpu")
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=None, help="default: the export's seq_len")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--out", default=None, help="write the JSON summary here too")
    a = ap.parse_args()
    if a.steps <= a.warmup:
        raise SystemExit("--steps %d must exceed --warmup %d" % (a.steps, a.warmup))
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("peer_step: torch %s sees no CUDA device" % torch.__version__)
    if a.threads:
        torch.set_num_threads(a.threads)
    pm.CausalSelfAttention.impl = a.attention or ("sdpa" if a.device == "cuda" else "naive")
    dev = torch.device(a.device)
    t0 = time.perf_counter()
    cfg, model = build(a.export_dir, dev, a.precision, a.seed)
    T = a.seq_len or int(cfg["data"]["seq_len"])
    B, V = a.micro_batch, int(cfg["model"]["vocab"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    setup_s = time.perf_counter() - t0
    losses, times = step_loop.timed_steps(model, trainable, V, B, T, a.steps, a.device, a.precision,
                                          a.lr, a.seed, "peer step")
    out = step_loop.summary(
        losses, times, a.warmup, B, T, a.device, precision=a.precision,
        attention=pm.CausalSelfAttention.impl,
        params_total=sum(p.numel() for p in model.parameters()),
        params_trainable=sum(p.numel() for p in trainable),
        model=cfg["model"]["name"], lora=cfg["lora"], setup_s=setup_s)
    print("[peer step] %s %s %s: %.0f tokens/s (median of steps %d-%d), peak %s, finite %s"
          % (out["model"], a.precision, out["attention"], out["tokens_per_s"], a.warmup + 1,
             a.steps, step_loop.peak_text(out),
             all(math.isfinite(x) for x in losses)), flush=True)
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if all(math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
