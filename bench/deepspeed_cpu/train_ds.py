#!/usr/bin/env python3
"""DeepSpeed-on-CPU side of bench/deepspeed_cpu: trains the HF model written by make_model.py with
deepspeed.initialize on the given ds_config.json, the same data order as `zero train`'s sequential
sampler (docs/formats/data.md), and writes one JSON line per optimizer step (step, loss, step_s).

Run under torchrun (world 1 or 2) with DS_ACCELERATOR=cpu; the process group is gloo:
  DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 train_ds.py --model DIR/model \
      --tokens DIR/tokens.bin --deepspeed ds.json --block_size 128 --steps 15 --threads 1 --out ds.jsonl

What is timed (per step, on rank 0): the grad_accum micro-steps (batch slicing, forward, loss,
backward, engine.step) and the all-reduce of the step's mean loss, which `zero train`'s step also
does before it writes metrics.jsonl (its elapsed_s differences are the times compared with these).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F


def param_groups(model, weight_decay):
    # As ZeRO.cpp groups them (docs/optim.md): weight decay on tensors of two or more dimensions
    # (matrices and embeddings), none on biases and LayerNorm gains. The tied lm_head is wte.
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--deepspeed", required=True)
    ap.add_argument("--block_size", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher passes it
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    import deepspeed  # after set_num_threads: importing it reads the accelerator
    from transformers import GPT2LMHeadModel

    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()

    with open(args.deepspeed) as f:
        ds_config = json.load(f)
    micro = ds_config["train_micro_batch_size_per_gpu"]
    gas = ds_config["gradient_accumulation_steps"]
    weight_decay = ds_config["optimizer"]["params"].get("weight_decay", 0.0)

    model = GPT2LMHeadModel.from_pretrained(args.model, dtype=torch.float32,
                                            attn_implementation="sdpa")
    model.config.use_cache = False
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds_config,
                                           model_parameters=param_groups(model, weight_decay))

    T = args.block_size
    tokens = torch.from_numpy(np.fromfile(args.tokens, dtype="<u2").astype(np.int64))
    num_samples = (tokens.numel() - 1) // T
    tbs = micro * gas * world

    def micro_batch(step, m):
        # Sequential order: step s takes positions s*TBS + j; rank r at micro-step m takes
        # j = m*(micro*world) + r*micro + i (GlobalBatchSampler in src/data/batch_sampler.h).
        rows = []
        for i in range(micro):
            p = step * tbs + m * micro * world + rank * micro + i
            g = p % num_samples
            rows.append(tokens[g * T:g * T + T + 1])
        batch = torch.stack(rows)
        return batch[:, :T], batch[:, 1:]

    out = open(args.out, "w") if rank == 0 else None
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), dtype=torch.float64)
        for m in range(gas):
            x, y = micro_batch(step, m)
            logits = engine(input_ids=x).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
            engine.backward(loss)
            engine.step()
            loss_sum += loss.detach().double()
        torch.distributed.all_reduce(loss_sum)
        step_s = time.perf_counter() - t0
        if out:
            out.write(json.dumps({"step": step + 1, "loss": loss_sum.item() / (gas * world),
                                  "step_s": step_s}) + "\n")
            out.flush()
    if out:
        out.close()
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
