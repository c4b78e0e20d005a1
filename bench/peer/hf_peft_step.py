#!/usr/bin/python3
"""One-process training-step throughput of transformers + PEFT on a Hugging Face config.json.

The peer of `hlp-train --model-config DIR --strategy single` for a model family HLP reads from
Hugging Face checkpoints (Qwen3.5, Qwen3-Next): transformers' own model class for the config
(AutoModelForCausalLM.from_config, random weights: throughput does not depend on their values),
LoRA from PEFT (LoraConfig r / alpha on --lora-targets, dropout 0, no bias), the way users
finetune it:
  - bf16: the model stored in bf16 (dtype=bfloat16), PEFT's adapters in fp32 (its default
    autocast_adapter_dtype), the step under torch.autocast(bfloat16) as the Trainer's bf16 does;
  - attention: attn_implementation sdpa; the Gated DeltaNet layers take whatever path
    transformers picks on this machine (flash-linear-attention and causal-conv1d when installed,
    else its torch implementation), printed as "linear path";
  - AdamW (torch.optim, betas 0.9/0.999, eps 1e-8, weight decay 0) on the adapters, global-norm
    clipping at 1.0, random token ids (uniform over the vocabulary), the loss in fp32 over the
    full logits (what transformers' causal-LM loss does).
Step time = zero_grad + forward + loss + backward + clip + optimizer step, the device
synchronised before and after (as hlp-train's step_time_s). tokens/s = B * T / median step time
of the steps after --warmup; peak = torch.cuda.max_memory_allocated over the run.

  python3 bench/peer/hf_peft_step.py --config-dir bench/peer/qwen3_5_9b --device cuda \
      --precision bf16 --lora-rank 32 --lora-alpha 64 --seq-len 4096 --steps 6 --warmup 2 \
      --out peer.json
Prints one line per step and a JSON summary (also to --out). Exit 1 on a non-finite loss.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_loop  # noqa: E402

QWEN_TARGETS = ("in_proj_qkv,in_proj_z,in_proj_b,in_proj_a,in_proj_qkvz,in_proj_ba,out_proj,"
                "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")


def linear_path(model):
    """What the Gated DeltaNet layers run: the kernel functions a layer holds (flash-linear-
    attention's and causal-conv1d's when installed, else transformers' torch implementation),
    whether those packages are installed, and the modeling module's fast-path flag."""
    import importlib
    import importlib.util
    found = {p: importlib.util.find_spec(p) is not None for p in ("fla", "causal_conv1d")}
    for mod in model.modules():
        if "GatedDeltaNet" not in type(mod).__name__:
            continue
        fns = ["%s=%s.%s" % (k, getattr(v, "__module__", "?"), getattr(v, "__name__", type(v).__name__))
               for k, v in sorted(vars(mod).items())
               if callable(v) and not hasattr(v, "parameters") and ("delta" in k or "conv" in k)]
        fast = getattr(importlib.import_module(type(mod).__module__), "is_fast_path_available", None)
        return "%s: %s; fla installed %s, causal-conv1d installed %s%s" % (
            type(mod).__name__, ", ".join(fns) or "no kernel attributes", found["fla"],
            found["causal_conv1d"], "" if fast is None else ", is_fast_path_available %s" % fast)
    return "none (no Gated DeltaNet layer)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-dir", required=True, help="a directory with a config.json")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--lora-rank", type=int, default=32)
    ap.add_argument("--lora-alpha", type=float, default=64.0)
    ap.add_argument("--lora-targets", default=QWEN_TARGETS,
                    help="module-name suffixes (PEFT target_modules); names absent from the model "
                         "are dropped (default: every Qwen3.5 / Qwen3-Next projection)")
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--gradient-checkpointing", action="store_true",
                    help="transformers' gradient_checkpointing_enable (non-reentrant): each "
                         "decoder layer's activations recomputed in backward")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--out", default=None, help="write the JSON summary here too")
    a = ap.parse_args()
    if a.steps <= a.warmup:
        raise SystemExit("--steps %d must exceed --warmup %d" % (a.steps, a.warmup))
    import torch
    try:
        import transformers
        import peft
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as e:
        raise SystemExit("hf_peft_step: %s (needs transformers >= 5 and peft)" % e)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("hf_peft_step: torch %s sees no CUDA device" % torch.__version__)
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    t0 = time.perf_counter()
    cfg = AutoConfig.from_pretrained(a.config_dir)
    cfg.use_cache = False
    torch.manual_seed(a.seed)
    with torch.device(dev):  # initialise on the device: a 9 B model's fp32 init on the host is slow
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:  # transformers 4 names it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, attn_implementation="sdpa")
    if a.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    targets = [t for t in a.lora_targets.split(",") if t and t in names]
    if not targets:
        raise SystemExit("hf_peft_step: none of --lora-targets %s names a Linear of %s"
                         % (a.lora_targets, type(model).__name__))
    lcfg = peft.LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0, bias="none",
                           target_modules=targets)
    model = peft.get_peft_model(model, lcfg)
    model.train()
    V = int(cfg.get_text_config().vocab_size if hasattr(cfg, "get_text_config") else cfg.vocab_size)
    B, T = a.micro_batch, a.seq_len
    trainable = [p for p in model.parameters() if p.requires_grad]
    setup_s = time.perf_counter() - t0
    path = linear_path(model)
    print("[hf-peft step] %s (%s), transformers %s, peft %s, torch %s, linear path: %s, "
          "attention %s, gradient checkpointing %s, LoRA on %s, setup %.1f s"
          % (type(model.base_model.model).__name__, cfg.model_type, transformers.__version__,
             peft.__version__, torch.__version__, path,
             getattr(model.config, "_attn_implementation", "?"), a.gradient_checkpointing,
             ",".join(targets), setup_s),
          flush=True)
    losses, times = step_loop.timed_steps(lambda ids: model(input_ids=ids).logits, trainable, V, B,
                                          T, a.steps, a.device, a.precision, a.lr, a.seed,
                                          "hf-peft step")
    out = step_loop.summary(
        losses, times, a.warmup, B, T, a.device, precision=a.precision,
        attention=getattr(model.config, "_attn_implementation", "?"), linear_path=path,
        gradient_checkpointing=a.gradient_checkpointing, lora_targets=targets,
        lora_rank=a.lora_rank, lora_alpha=a.lora_alpha,
        params_total=sum(p.numel() for p in model.parameters()),
        params_trainable=sum(p.numel() for p in trainable), model=cfg.model_type, setup_s=setup_s,
        transformers=transformers.__version__, peft=peft.__version__)
    finite = all(math.isfinite(x) for x in losses)
    print("[hf-peft step] %s %s: %.0f tokens/s (median of steps %d-%d), peak %s, finite %s"
          % (out["model"], a.precision, out["tokens_per_s"], a.warmup + 1, a.steps,
             step_loop.peak_text(out), finite),
          flush=True)
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
