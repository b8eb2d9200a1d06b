#!/usr/bin/env python3
"""PyTorch's training step on one GPU: the baseline beside `zero train --device cuda` (bench/gpu).

HF transformers' GPT2LMHeadModel / LlamaForCausalLM (random init, SDPA attention), fp32 master weights
with bf16 autocast (what DeepSpeed's bf16 mode and ours compute in), fused AdamW, gradient clipping
1.0, batch x seq random byte tokens. Modes: eager; compile (torch.compile of the model, compile time
not counted); fsdp2 (fully_shard over a world of one with bf16 parameters for compute: what ZeRO-3
compares with). Prints one line: tokens/s over the timed steps (after two warm-ups), MFU against the
GPU's dense bf16 peak, peak memory.

    python3 torch_step.py --model gpt2-124m --batch 8 --seq 1024 --steps 8 --mode eager
    python3 torch_step.py --model llama-1b --flops-per-token --seq 1024   (the FLOP count alone)
"""
import argparse
import os
import time

# The presets of src/model/model_config.cc (name -> shape).
MODELS = {
    "gpt2-tiny": dict(arch="gpt2", vocab=256, ctx=64, C=64, L=2, H=4),
    "gpt2-124m": dict(arch="gpt2", vocab=50257, ctx=1024, C=768, L=12, H=12),
    "gpt2-350m": dict(arch="gpt2", vocab=50257, ctx=1024, C=1024, L=24, H=16),
    "gpt2-774m": dict(arch="gpt2", vocab=50257, ctx=1024, C=1280, L=36, H=20),
    "gpt2-1558m": dict(arch="gpt2", vocab=50257, ctx=1024, C=1600, L=48, H=25),
    "llama-1b": dict(arch="llama", vocab=128256, ctx=131072, C=2048, L=16, H=32, KV=8, I=8192),
}
PEAK_BF16 = 989e12  # H100 / H200 SXM dense bf16 tensor-core peak


def num_params(m):
    C, L, V = m["C"], m["L"], m["vocab"]
    if m["arch"] == "gpt2":  # tied head
        return V * C + m["ctx"] * C + L * (12 * C * C + 13 * C) + 2 * C
    kv = C // m["H"] * m["KV"]
    return V * C + L * (2 * C * C + 2 * C * kv + 3 * C * m["I"] + 2 * C) + C  # tied (1B)


def flops_per_token(m, T):
    # 6N for the matmuls of forward + backward, plus attention's QK^T and AV (PaLM's 12*L*C*T).
    return 6 * num_params(m) + 12 * m["L"] * m["C"] * T


def build(m):
    import transformers as tf
    if m["arch"] == "gpt2":
        cfg = tf.GPT2Config(n_positions=m["ctx"], n_embd=m["C"], n_layer=m["L"], n_head=m["H"],
                            vocab_size=m["vocab"])
        cls = tf.GPT2LMHeadModel
    else:
        cfg = tf.LlamaConfig(vocab_size=m["vocab"], hidden_size=m["C"], num_hidden_layers=m["L"],
                             num_attention_heads=m["H"], num_key_value_heads=m["KV"],
                             intermediate_size=m["I"], max_position_embeddings=8192,
                             tie_word_embeddings=True)
        cls = tf.LlamaForCausalLM
    cfg._attn_implementation = "sdpa"
    return cls(cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "fsdp2"])
    ap.add_argument("--flops-per-token", action="store_true")
    args = ap.parse_args()
    m = MODELS[args.model]
    if args.flops_per_token:
        print(flops_per_token(m, args.seq))
        return
    import torch
    torch.manual_seed(0)
    model = build(m).cuda()
    step_model = model
    if args.mode == "compile":
        step_model = torch.compile(model)
    elif args.mode == "fsdp2":
        import torch.distributed as dist
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=0, world_size=1)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        blocks = model.transformer.h if m["arch"] == "gpt2" else model.model.layers
        for b in blocks:
            fully_shard(b, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    x = torch.randint(0, 256, (args.batch, args.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.mode != "fsdp2"):
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
    n = max(args.steps - 2, 1)
    for _ in range(n):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tps = n * args.batch * args.seq / dt
    mfu = tps * flops_per_token(m, args.seq) / PEAK_BF16
    print(f"torch-{args.mode} {args.model}: {tps:,.0f} tok/s ({dt / n * 1e3:.1f} ms/step), "
          f"MFU {mfu:.1%}, peak {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB, "
          f"loss {loss.item():.3f} (PyTorch {torch.__version__})")


if __name__ == "__main__":
    main()
