#!/usr/bin/python3
"""transformers' own Qwen3.5 Gated DeltaNet layer, forward + backward: the peer of
`hlp-bench-model --only qwen35` (same shapes: D 1024, 4 key / 8 value heads of 128, conv width 4,
B 1, float32; every parameter and the input take gradients). Runs where transformers >= 5 with
Qwen3.5 is installed, e.g. the Debian sid root of tools/debian-root.sh (python3-transformers
5.12.1, python3-torch 2.14.1); without fla / causal-conv1d it runs transformers' torch path
(torch_chunk_gated_delta_rule), which it prints.

    python3 bench/model/qwen35_layer_transformers.py [--threads 1] [--seq-len 2048] [--repeats 5]
"""
import argparse
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import torch
    import transformers
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = Qwen3_5TextConfig(hidden_size=1024, num_hidden_layers=1, layer_types=["linear_attention"],
                            linear_num_key_heads=4, linear_num_value_heads=8,
                            linear_key_head_dim=128, linear_value_head_dim=128,
                            linear_conv_kernel_dim=4, vocab_size=256)
    layer = m.Qwen3_5GatedDeltaNet(cfg, layer_idx=0).float().train()
    core = layer.chunk_gated_delta_rule.__name__
    conv = "torch F.conv1d" if layer.causal_conv1d_fn is None else layer.causal_conv1d_fn.__name__
    x = torch.randn(1, a.seq_len, 1024, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out = layer(x)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()

    step()  # warm-up
    wall, cpu = [], []
    for _ in range(a.repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        step()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
    med = statistics.median(wall)
    print(f"## transformers {transformers.__version__} Qwen3_5GatedDeltaNet (torch {torch.__version__}, "
          f"{a.threads} intra-op thread(s); core {core}, conv {conv}), forward + backward, B 1, "
          f"T {a.seq_len}, float32")
    print(f"{'':10s} {'min_ms':>9s} {'med_ms':>9s} {'cpu_ms':>9s} {'tokens/s':>10s}")
    print(f"{'torch':10s} {min(wall):9.1f} {med:9.1f} {statistics.median(cpu):9.1f} "
          f"{a.seq_len / (med / 1e3):10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
