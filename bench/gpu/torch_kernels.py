#!/usr/bin/env python3
"""PyTorch's equivalents of bench/gpu/kernels_gpu_bench.cc's ops, same shapes and dtype (bf16),
timed the same way (CUDA events, 3 warm-ups, mean of `iters`). Prints "op<TAB>ms<TAB>what".
Eager PyTorch as a user runs it: cuDNN/flash SDPA, cuBLAS(Lt) linear, fused AdamW."""
import argparse

import torch
import torch.nn.functional as F


def time_ms(iters, op):
    for _ in range(3):
        op()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        op()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def report(op, ms, what):
    print(f"{op}\t{ms:.4f}\t{what}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    B, T, C, H, D, V = a.batch, 1024, 768, 12, 64, 50257
    N = B * T
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, lo=-1.0, hi=1.0, dtype=bf):
        return (torch.rand(*shape, device=dev, generator=g) * (hi - lo) + lo).to(dtype)

    x, dy = rnd(N, C), rnd(N, C)
    # Clocks up before the first timing: ~1 s of GEMMs (the C++ side does the same).
    warm_w = rnd(4 * C, C)
    for _ in range(5000):
        F.linear(x, warm_w)
    torch.cuda.synchronize()
    w, b = rnd(C, lo=0.5, hi=1.5), rnd(C, lo=-0.1, hi=0.1)
    report("layernorm_fwd", time_ms(a.iters, lambda: F.layer_norm(x, (C,), w, b, 1e-5)),
           f"N={N} C=768 bf16")
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [C], w, b, 1e-5)
    report("layernorm_bwd", time_ms(a.iters, lambda: torch.ops.aten.native_layer_norm_backward(
        dy, x, [C], mean, rstd, w, b, [True, True, True])), "aten native_layer_norm_backward")

    q, k, v = (rnd(B, H, T, D).requires_grad_() for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    flops = 4.0 * B * H * T * T * D / 2
    ms = time_ms(a.iters, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    report("attention_fwd", ms, f"SDPA (default backend) causal bf16, {flops / ms / 1e9:.0f} TFLOP/s")
    dout = rnd(B, H, T, D)

    def attn_bwd():
        q.grad = k.grad = v.grad = None
        out.backward(dout, retain_graph=True)

    ms = time_ms(a.iters, attn_bwd)
    report("attention_bwd", ms, f"SDPA backward, {2.5 * flops / ms / 1e9:.0f} TFLOP/s")

    W, bias = rnd(4 * C, C, lo=-0.05, hi=0.05), rnd(4 * C, lo=-0.05, hi=0.05)
    flops = 2.0 * N * C * 4 * C
    ms = time_ms(a.iters, lambda: F.linear(x, W, bias))
    report("matmul_fwd", ms, f"F.linear +bias bf16, {flops / ms / 1e9:.0f} TFLOP/s")
    report("matmul_gelu_fwd", time_ms(a.iters, lambda: F.gelu(F.linear(x, W, bias), approximate="tanh")),
           "F.linear then F.gelu (eager: two kernels)")
    dh, pre = rnd(N, 4 * C), rnd(N, 4 * C)

    def mm_bwd():
        dh @ W  # dinp
        dh.t() @ x  # dweight
        dh.sum(0)  # dbias

    ms = time_ms(a.iters, mm_bwd)
    report("matmul_bwd", ms, f"dinp, dweight (bf16), dbias as autograd runs them, {2 * flops / ms / 1e9:.0f} TFLOP/s")
    report("gelu_fwd", time_ms(a.iters, lambda: F.gelu(pre, approximate="tanh")), "N*3072 bf16")
    report("gelu_bwd", time_ms(a.iters, lambda: torch.ops.aten.gelu_backward(dh, pre, approximate="tanh")),
           "aten gelu_backward")
    del q, k, v, out, dout, dh, pre

    logits = rnd(N, V, lo=-4, hi=4).requires_grad_()
    targets = torch.randint(0, V, (N,), device=dev, generator=g)

    def ce():
        logits.grad = None
        F.cross_entropy(logits.float(), targets).backward()

    report("cross_entropy_fused", time_ms(a.iters, ce), "F.cross_entropy(logits.float()) forward + backward")
    del logits

    P = 124439808
    p = torch.nn.Parameter(rnd(P, lo=-0.05, hi=0.05, dtype=torch.float32))
    p.grad = rnd(P, lo=-0.01, hi=0.01, dtype=torch.float32)
    p16 = torch.empty(P, dtype=bf, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=True)

    def adam():
        opt.step()
        p16.copy_(p)

    ms = time_ms(a.iters, adam)
    report("adamw", ms, f"fused AdamW + bf16 copy, {(7 * 4 + 2) * P / ms / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()
