#!/usr/bin/python3
"""Golden values for src/optim/hf_lr_schedule_test.cc: HF Trainer's schedules, update by update.

The multipliers are transcribed from the formulas of transformers' get_scheduler
(transformers/optimization.py: get_linear_schedule_with_warmup, ..., get_wsd_schedule) and driven
by torch's own torch.optim.lr_scheduler.LambdaLR under the protocol DeepSpeed runs an HF scheduler
with: construct (lr = base * lambda(0)), then after each successful optimizer update
scheduler.step(). What is recorded is the lr each update 1..N runs at, read from the optimizer.
Needs only torch (any 1.x / 2.x):
    /usr/bin/python3 tools/golden/hf_lr_schedules.py > tests/fixtures/golden/hf_lr_schedules.json
"""
import json
import math

import torch


def warm(step, w):
    return float(step) / float(max(1, w))


def linear(w, n):
    def f(s):
        if s < w:
            return warm(s, w)
        return max(0.0, float(n - s) / float(max(1, n - w)))
    return f


def cosine(w, n, cycles=0.5, min_rate=0.0):
    def f(s):
        if s < w:
            return warm(s, w)
        progress = float(s - w) / float(max(1, n - w))
        factor = 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress))
        return max(0.0, factor * (1 - min_rate) + min_rate)
    return f


def restarts(w, n, cycles=1):
    def f(s):
        if s < w:
            return warm(s, w)
        progress = float(s - w) / float(max(1, n - w))
        if progress >= 1.0:
            return 0.0
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(cycles) * progress) % 1.0))))
    return f


def polynomial(w, n, lr_init, lr_end=1e-7, power=1.0):
    def f(s):
        if s < w:
            return warm(s, w)
        if s > n:
            return lr_end / lr_init
        pct = 1 - (s - w) / (n - w)
        return ((lr_init - lr_end) * pct**power + lr_end) / lr_init
    return f


def constant_with_warmup(w):
    def f(s):
        return float(s) / float(max(1.0, w)) if s < w else 1.0
    return f


def inverse_sqrt(w):
    ts = w or 10_000
    def f(s):
        if s < w:
            return warm(s, w)
        return 1.0 / math.sqrt((s + ts - w) / ts)
    return f


def wsd(w, n, decay, stable=None, warmup_type="linear", decay_type="cosine", min_lr_ratio=0.0,
        cycles=0.5):
    if stable is None:
        stable = n - w - decay
    def f(s):
        if s < w:
            p = float(s) / float(max(1, w))
            factor = {"linear": p, "cosine": 0.5 * (1.0 - math.cos(math.pi * p)),
                      "1-sqrt": 1.0 - math.sqrt(1.0 - p)}[warmup_type]
            return max(0.0, factor * (1.0 - min_lr_ratio) + min_lr_ratio)
        if s < w + stable:
            return 1.0
        if s < w + stable + decay:
            p = float(s - w - stable) / float(max(1, decay))
            factor = {"linear": 1.0 - p,
                      "cosine": 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * p)),
                      "1-sqrt": 1.0 - math.sqrt(p)}[decay_type]
            return max(0.0, factor * (1.0 - min_lr_ratio) + min_lr_ratio)
        return min_lr_ratio
    return f


LR = 1e-3
# name, kwargs (as --lr_scheduler_kwargs), warmup, total, multiplier, updates to record
CASES = [
    ("linear", {}, 0, 10, linear(0, 10), 12),
    ("linear", {}, 3, 10, linear(3, 10), 12),
    ("cosine", {}, 0, 10, cosine(0, 10), 12),
    ("cosine", {}, 4, 12, cosine(4, 12), 14),
    ("cosine", {"num_cycles": 1.5}, 2, 10, cosine(2, 10, cycles=1.5), 10),
    ("cosine_with_restarts", {}, 2, 12, restarts(2, 12), 14),
    ("cosine_with_restarts", {"num_cycles": 3}, 2, 14, restarts(2, 14, cycles=3), 16),
    ("polynomial", {}, 2, 10, polynomial(2, 10, LR), 12),
    ("polynomial", {"lr_end": 1e-4, "power": 2.0}, 3, 9, polynomial(3, 9, LR, 1e-4, 2.0), 11),
    ("constant_with_warmup", {}, 4, 10, constant_with_warmup(4), 8),
    ("constant_with_warmup", {}, 0, 10, constant_with_warmup(0), 3),
    ("inverse_sqrt", {}, 3, 10, inverse_sqrt(3), 10),
    ("inverse_sqrt", {}, 0, 10, inverse_sqrt(0), 5),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1}, 2, 10, cosine(2, 10, min_rate=0.1), 12),
    ("cosine_with_min_lr", {"min_lr": 2e-4}, 0, 8, cosine(0, 8, min_rate=2e-4 / LR), 9),
    ("warmup_stable_decay", {"num_decay_steps": 4}, 3, 12, wsd(3, 12, 4), 14),
    ("warmup_stable_decay",
     {"num_decay_steps": 5, "num_stable_steps": 2, "warmup_type": "cosine", "decay_type": "1-sqrt",
      "min_lr_ratio": 0.1}, 4, 20,
     wsd(4, 20, 5, stable=2, warmup_type="cosine", decay_type="1-sqrt", min_lr_ratio=0.1), 14),
    ("warmup_stable_decay",
     {"num_decay_steps": 4, "warmup_type": "1-sqrt", "decay_type": "linear"}, 2, 8,
     wsd(2, 8, 4, warmup_type="1-sqrt", decay_type="linear"), 10),
]


def run(multiplier, updates):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, multiplier)
    lrs = []
    for _ in range(updates):
        lrs.append(opt.param_groups[0]["lr"])  # the lr this update runs at
        opt.step()
        sched.step()
    return lrs


out = {"lr": LR, "generator": "tools/golden/hf_lr_schedules.py", "cases": []}
for name, kwargs, w, n, f, updates in CASES:
    out["cases"].append({"type": name, "kwargs": kwargs, "warmup": w, "total": n,
                         "lr_by_update": run(f, updates)})
print(json.dumps(out, indent=1))
