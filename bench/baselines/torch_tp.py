#!/usr/bin/env python3
"""The tensor-parallel baseline of issue 19: what serving stacks do today with a vocabulary-sharded
LM head (vLLM, SGLang): each rank computes its logits shard, an NCCL all-gather assembles the
[B, V] logits on every rank, then softmax + multinomial. One process per GPU, under torchrun:

    NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone --nproc_per_node 2 \\
        bench/baselines/torch_tp.py --vocab 128256 --hidden 8192 --batches 1,16,64,256

Per batch, CUDA events on every rank around `iters` steps after `warmup`: the whole step and the
all-gather alone (median over the calls, then the largest over the ranks: the step ends when the
slowest rank does). Rank 0 prints one JSON object: {"tp", "vocab", "hidden", "rows": [{"batch",
"step_us", "gather_us"}], "nccl"}.
"""

import argparse
import json
import os
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    shard = -(-args.vocab // world)  # padded shards, as vLLM pads the vocabulary
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    w = (torch.randn(shard, args.hidden, device="cuda", generator=g) / args.hidden**0.5 * 4).to(torch.bfloat16)
    rows = []
    for b in [int(x) for x in args.batches.split(",")]:
        h = torch.randn(b, args.hidden, device="cuda", generator=g).to(torch.bfloat16)
        gathered = torch.empty(world, b, shard, device="cuda", dtype=torch.float32)

        def gather(local_logits):
            dist.all_gather_into_tensor(gathered, local_logits)
            return gathered.permute(1, 0, 2).reshape(b, world * shard)[:, : args.vocab]

        def step():
            local_logits = (h @ w.t()).float()
            logits = gather(local_logits)
            probs = torch.softmax(logits, dim=-1)
            return torch.multinomial(probs, 1)

        def timed(fn):
            for _ in range(args.warmup):
                fn()
            times = []
            for _ in range(args.iters):
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) * 1e3)
            return statistics.median(times)

        local_logits = (h @ w.t()).float()
        step_us = timed(step)
        gather_us = timed(lambda: gather(local_logits))
        worst = torch.tensor([step_us, gather_us], device="cuda")
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        rows.append({"batch": b, "step_us": worst[0].item(), "gather_us": worst[1].item()})
    if rank == 0:
        nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        print(json.dumps({"tp": world, "vocab": args.vocab, "hidden": args.hidden, "rows": rows, "nccl": nccl}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
