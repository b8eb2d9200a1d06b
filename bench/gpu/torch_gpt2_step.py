#!/usr/bin/env python3
"""PyTorch's GPT-2 124M training step on one GPU: the baseline beside `zero train --device cuda`.

HF transformers' GPT2LMHeadModel (random init, SDPA attention), fp32 master weights with bf16
autocast (what DeepSpeed's bf16 mode and ours compute in), fused AdamW, batch x seq random tokens.
Prints tokens/s over the timed steps (after two warm-up steps) and peak memory. Eager by default;
--compile adds torch.compile (its compile time is not counted).

    python3 torch_gpt2_step.py --batch 8 --seq 1024 --steps 8 [--compile]
"""
import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab_size=50257)
    cfg._attn_implementation = "sdpa"
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if args.compile else model
    x = torch.randint(0, 256, (args.batch, args.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps - 2):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    n = args.steps - 2
    tok = n * args.batch * args.seq
    name = "torch.compile" if args.compile else "eager"
    print(f"PyTorch {torch.__version__} ({name}, SDPA, fused AdamW, bf16 autocast): {tok / dt:,.0f} tok/s "
          f"({dt / n * 1e3:.1f} ms/step), peak {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB, "
          f"loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
