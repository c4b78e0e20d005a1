#!/usr/bin/python3
"""PyTorch DDP peer of `hlp-train --strategy ddp` (issue 6 benchmark).

Loads what hlp-export-init wrote (same initial weights, same global batches), trains the same
model (hlp_peer_model.py) with torch.nn.parallel.DistributedDataParallel over gloo, one process
a rank (torch.multiprocessing.spawn), 1 intra-op thread each, and the trainer of
src/train/trainer.cpp:
  - rank r takes rows [r*G/n, (r+1)*G/n) of each global batch, split into micro-batches of B
    rows; each micro-batch's mean loss is scaled by 1/M; only the last micro-batch syncs
    (DDP no_sync() before);
  - global-norm clipping as torch.nn.utils.clip_grad_norm_ (scale max/(norm+1e-6) when < 1);
  - torch.optim.AdamW (betas 0.9/0.999, eps 1e-8) with the LR of src/train/lr_schedule.h;
  - loss reported = global mean loss (mean over ranks of the rank's mean over micro-batches).
Step time = batch slicing + forward/backward + clip + optimizer, as hlp-train's step_time_s.

  /usr/bin/python3 bench/peer/peer_ddp.py --export-dir DIR --steps 6 --micro-batch 2 \
      --world 2 --out peer.json
Writes JSON: {"losses": [...], "step_time_s": [[per rank] per step], "tokens_per_step": G*T, ...}
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import sys
import time


def _threads_from_argv(default=1):
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    return default


# torch.set_num_threads() does not reach OpenBLAS's own pthread pool (sized to the machine):
# bound it, like hlp-train --threads does, before the library loads (spawned ranks inherit it).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(_threads_from_argv())

import torch  # noqa: E402
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hlp_peer_model import cross_entropy_loss, load_export  # noqa: E402


def lr_at(step, peak, warmup, total, min_ratio):
    """src/train/lr_schedule.h: linear warm-up, then cosine to min_ratio * peak (0-based step)."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = max(1, total - warmup)
    progress = min(max((step - warmup) / decay_steps, 0.0), 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (min_ratio + (1.0 - min_ratio) * cosine)


def blas_threads():
    """The pool size of the OpenBLAS this process loaded (-1 if none is loaded)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line and "/" in line}
    for path in sorted(paths):
        try:
            return int(ctypes.CDLL(path).openblas_get_num_threads())
        except (OSError, AttributeError):
            continue
    return -1


def worker(rank, args, port):
    torch.set_num_threads(args.threads)
    torch.ones(64, 64) @ torch.ones(64, 64)  # loads the BLAS, so blas_threads() sees it
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # PyTorch >= 2.4 starts its TCP store on libuv by default; Debian's build has no libuv and
    # then refuses to start ("use_libuv was requested"). 1.13 ignores the variable.
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=600))
    cfg, model, tokens = load_export(args.export_dir)
    G, T = cfg["data"]["global_batch"], cfg["data"]["seq_len"]
    if args.steps > tokens.size(0):
        raise SystemExit("--steps %d but the export holds %d batches" % (args.steps, tokens.size(0)))
    if G % args.world or (G // args.world) % args.micro_batch:
        raise SystemExit("global batch %d does not split into %d ranks x micro-batches of %d"
                         % (G, args.world, args.micro_batch))
    rows = G // args.world
    M = rows // args.micro_batch
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    losses, times = [], []
    dist.barrier()
    for step in range(args.steps):
        t0 = time.perf_counter()
        mine = tokens[step, rank * rows:(rank + 1) * rows]  # [rows, T+1]
        opt.zero_grad(set_to_none=True)
        local = 0.0
        for m in range(M):
            mb = mine[m * args.micro_batch:(m + 1) * args.micro_batch]
            inputs, targets = mb[:, :T].contiguous(), mb[:, 1:].contiguous()
            if m < M - 1:
                with ddp.no_sync():
                    loss = cross_entropy_loss(ddp(inputs), targets)
                    (loss / M).backward()
            else:
                loss = cross_entropy_loss(ddp(inputs), targets)
                (loss / M).backward()
            local += loss.item() / M
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(trainable, args.grad_clip)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.lr, args.warmup_steps, args.steps, args.min_lr_ratio)
        opt.step()
        dt = time.perf_counter() - t0
        # bookkeeping outside the timed step: global mean loss and every rank's step time
        stats = torch.tensor([local, 0.0])
        dist.all_reduce(stats)
        all_dt = [torch.zeros(1, dtype=torch.float64) for _ in range(args.world)]
        dist.all_gather(all_dt, torch.tensor([dt], dtype=torch.float64))
        losses.append(stats[0].item() / args.world)
        times.append([x.item() for x in all_dt])
        if rank == 0:
            print("[peer ddp] step %d loss %.6f step %.3f s tokens/s %.0f"
                  % (step, losses[-1], max(times[-1]), G * T / max(times[-1])), flush=True)
    if rank == 0:
        out = {"losses": losses, "step_time_s": times, "tokens_per_step": G * T,
               "world": args.world, "threads": args.threads, "blas_threads": blas_threads(),
               "micro_batch": args.micro_batch,
               "micro_batches": M, "torch": torch.__version__,
               "params_total": cfg["params_total"], "params_trainable": cfg["params_trainable"]}
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    # Both ranks leave together, and without tearing gloo down: a rank destroying the group (or
    # the interpreter's teardown) while its peer still used it was seen to hang the peer at exit
    # with one core spinning (2026-11-22, again 2026-11-23 in a fresh-clone `make test`). After
    # the barrier, a short grace lets the peer finish it; then leave at once.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(0.5)
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--export-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    args = p.parse_args()
    port = args.port
    if port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
