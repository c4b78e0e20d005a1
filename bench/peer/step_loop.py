"""The timed training steps both PyTorch peers run (peer_step.py: HLP's architecture in plain
PyTorch; hf_peft_step.py: transformers + PEFT), so the two measure the same thing.

A step = zero_grad + forward + loss (cross-entropy over the full logits in fp32) + backward +
global-norm clipping at 1.0 + AdamW (betas 0.9 / 0.999, eps 1e-8, weight decay 0) on the trainable
parameters, under torch.autocast(bfloat16) when precision is bf16, on random token ids (uniform
over the vocabulary), the device synchronised before and after (as hlp-train's step_time_s). The
CUDA peak statistics are reset once the model and the optimizer exist, so the peak includes the
weights (what hlp-train records as peak_bytes from the same caching-allocator counters).
"""
import platform
import statistics
import time

import torch
import torch.nn.functional as F


def timed_steps(logits_of, trainable, vocab, batch, seq_len, steps, device, precision, lr, seed,
                label):
    """Runs `steps` steps of logits_of(input_ids) -> [B, T, V] logits; prints one line a step
    prefixed by `label`; returns (losses, step seconds)."""
    opt = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        sync()
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for step in range(steps):
        tokens = torch.randint(0, vocab, (batch, seq_len + 1), device=dev, generator=gen)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        sync()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = logits_of(inputs)
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        sync()
        times.append(time.perf_counter() - t)
        losses.append(loss.item())
        del logits, loss
        print("[%s] step %d loss %.4f step %.3f s tokens/s %.0f"
              % (label, step, losses[-1], times[-1], batch * seq_len / times[-1]), flush=True)
    return losses, times


def summary(losses, times, warmup, batch, seq_len, device, **fields):
    """The JSON summary both peers write: throughput over the steps after `warmup`, the device's
    peak (CUDA) or threads (CPU), versions, and the caller's `fields`."""
    med = statistics.median(times[warmup:])
    out = {"tokens_per_s": batch * seq_len / med, "step_time_s": times, "losses": losses,
           "median_step_s": med, "warmup": warmup, "micro_batch": batch, "seq_len": seq_len}
    out.update(fields)
    out.update({"torch": torch.__version__, "python": platform.python_version(), "device": device})
    if device == "cuda":
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
        out["gpu"] = torch.cuda.get_device_name()
        out["cuda"] = torch.version.cuda
    else:
        out["threads"] = torch.get_num_threads()
    return out


def peak_text(out):
    return "%.2f GiB" % (out["peak_bytes"] / 2**30) if "peak_bytes" in out else "n/a"
