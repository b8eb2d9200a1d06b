#!/usr/bin/env python3
"""DeepSpeedCPUAdam with bf16 state next to ours, for `zero bench adam --deepspeed-python PY`.

`zero bench adam` writes a bf16 state (p0, m0, v0), K steps of bf16 gradients and our state after
those K steps (ours_p, ours_m, ours_v: raw little-endian bf16) into --dir. This script repeats the K
steps with DeepSpeed's CPU Adam as ZeRO-Offload runs it under bf16.bf16_optimizer_states
(DeepSpeedCPUAdam(fp32_optimizer_states=False): bf16 params, grads and moments), compares the
values, then times DeepSpeed's update at --bench-numel parameters.

Prints a markdown report and `RESULT deepspeed_bf16_state_params_per_s=<float>`.
Needs deepspeed >= 0.19 (its cpu_adam op JIT-builds with ninja on first use).
"""
import argparse
import os
import statistics
import time

import numpy as np
import torch


def load_bf16(path):
    return torch.from_numpy(np.fromfile(path, dtype=np.int16).copy()).view(torch.bfloat16)


def ulp_distance(a, b):
    """|a - b| in bf16 units in the last place (bit patterns mapped to a monotonic integer line)."""
    def line(t):
        x = t.view(torch.int16).to(torch.int32)
        return torch.where(x < 0, -(x & 0x7FFF), x)
    return (line(a) - line(b)).abs()


def make_optimizer(p, lr, wd):
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    return DeepSpeedCPUAdam([p], lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd,
                            adamw_mode=True, fp32_optimizer_states=False)


def compare(args):
    d = args.dir
    p = torch.nn.Parameter(load_bf16(os.path.join(d, "p0.bf16")), requires_grad=False)
    opt = make_optimizer(p, args.lr, args.weight_decay)
    state = opt.state[p]
    state["step"] = 0
    state["exp_avg"] = load_bf16(os.path.join(d, "m0.bf16"))
    state["exp_avg_sq"] = load_bf16(os.path.join(d, "v0.bf16"))
    for k in range(1, args.steps + 1):
        p.grad = load_bf16(os.path.join(d, f"g{k}.bf16"))
        opt.step()
    print(f"values: {args.numel} elements, {args.steps} steps from the same bf16 state and bf16 "
          "gradients (AdamW, lr %g, weight decay %g)\n" % (args.lr, args.weight_decay))
    print("| tensor | bitwise equal | differ by 1 bf16 ulp | by more | max ulp | max abs. diff / RMS |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, short, theirs in (("param", "p", p.data), ("exp_avg", "m", state["exp_avg"]),
                                ("exp_avg_sq", "v", state["exp_avg_sq"])):
        ours = load_bf16(os.path.join(d, f"ours_{short}.bf16"))
        ulps = ulp_distance(ours, theirs)
        # Relative to the tensor's scale: a few elements where b1*m and (1-b1)*g cancel differ by
        # many ulps of their tiny result (DeepSpeed fuses a*b+c into FMA, we do not).
        rms = theirs.float().pow(2).mean().sqrt().item()
        diff = (ours.float() - theirs.float()).abs().max().item() / max(rms, 1e-30)
        n = ulps.numel()
        print(f"| {name} | {(ulps == 0).sum().item() / n:.4%} | {(ulps == 1).sum().item() / n:.4%} "
              f"| {(ulps > 1).sum().item() / n:.4%} | {ulps.max().item()} | {diff:.3g} |")


def bench(args):
    n = args.bench_numel
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(n, generator=gen).to(torch.bfloat16), requires_grad=False)
    p.grad = torch.randn(n, generator=gen).to(torch.bfloat16)
    opt = make_optimizer(p, args.lr, args.weight_decay)
    opt.step()  # warm-up: allocates the bf16 moments
    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    # bf16 param, exp_avg, exp_avg_sq read and written, bf16 gradient read: 14 B/param.
    print(f"\n| DeepSpeedCPUAdam bf16 state ({os.environ.get('OMP_NUM_THREADS', '?')} OpenMP "
          f"threads, {n} params) | {sec * 1e3:.2f} ms/step (median) | {min(times) * 1e3:.2f} "
          f"ms/step (best) | {n / sec / 1e9:.3f} Gparams/s | {14 * n / sec / 1e9:.1f} GB/s "
          "(14 B/param: bf16 gradient) |")
    print(f"RESULT deepspeed_bf16_state_params_per_s={n / sec:.6g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--numel", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--bench-numel", type=int, default=32 << 20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import deepspeed
    print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}\n")
    compare(args)
    bench(args)


if __name__ == "__main__":
    main()
