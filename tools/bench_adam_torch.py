#!/usr/bin/env python3
"""PyTorch CPU AdamW timing for `zero bench adam`: same param count and thread count as ours.

Prints a human-readable table and one machine-readable line
`RESULT adamw_foreach_params_per_s=<float>` that the C++ benchmark parses.
"""
import argparse
import statistics
import time

import torch


def time_adamw(numel, tensors, iters, foreach):
    # A few large tensors, as an offloaded flat fp32 partition would be.
    sizes = [numel // tensors] * tensors
    sizes[-1] += numel - sum(sizes)
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    kwargs = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=foreach)
    try:
        opt = torch.optim.AdamW(params, fused=False, **kwargs)
    except TypeError:  # torch < 2.0 has no `fused` argument for AdamW
        opt = torch.optim.AdamW(params, **kwargs)
    opt.step()  # warm-up: allocates exp_avg / exp_avg_sq
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--numel", type=int, default=32 << 20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tensors", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.numel} params in {args.tensors} tensors, median of {args.iters}")
    results = {}
    for foreach in (True, False):
        sec = time_adamw(args.numel, args.tensors, args.iters, foreach)
        results[foreach] = args.numel / sec
        print(f"| torch.optim.AdamW(foreach={foreach}) | {sec * 1e3:.2f} ms/step | "
              f"{args.numel / sec / 1e9:.3f} Gparams/s |")
    print(f"RESULT adamw_foreach_params_per_s={results[True]:.6g}")
    print(f"RESULT adamw_single_tensor_params_per_s={results[False]:.6g}")


if __name__ == "__main__":
    main()
