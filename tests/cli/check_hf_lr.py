#!/usr/bin/python3
"""Checks the lr column of a `zero train` metrics.jsonl against HF's schedule formulas, transcribed
here from transformers' get_scheduler (independently of src/optim/hf_lr_schedule.cc).

    check_hf_lr.py METRICS TYPE LR WARMUP TOTAL STEPS   (STEPS: expected number of lines)
TYPE is linear or cosine, or deepspeed_warmup_decay (DeepSpeed's WarmupDecayLR with
warmup_num_steps 0 -> 2, linear warmup from 0: a scheduler block keeps DeepSpeed's formula).
"""
import json
import math
import sys


def hf_lambda(kind, s, w, n):
    if kind in ("linear", "cosine") and s < w:
        return float(s) / float(max(1, w))
    if kind == "linear":
        return max(0.0, float(n - s) / float(max(1, n - w)))
    if kind == "cosine":
        progress = float(s - w) / float(max(1, n - w))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    raise SystemExit(f"unknown type {kind}")


def deepspeed_warmup_decay(update, lr, w, n):
    t = update - 2  # DeepSpeed's last_batch_iteration while update u runs
    w = max(2, w)
    if t < 0:
        return 0.0
    if t < w:
        return lr * t / w
    return lr * max(0.0, (n - t) / max(1.0, n - w))


def main():
    path, kind, lr, w, n, steps = sys.argv[1:7]
    lr, w, n, steps = float(lr), int(w), int(n), int(steps)
    got = [json.loads(line)["lr"] for line in open(path)]
    if len(got) != steps:
        raise SystemExit(f"{path}: {len(got)} lines, expected {steps}")
    for update, value in enumerate(got, start=1):
        if kind == "deepspeed_warmup_decay":
            want = deepspeed_warmup_decay(update, lr, w, n)
        else:
            want = lr * hf_lambda(kind, update - 1, w, n)
        if abs(value - want) > 1e-12 * lr:
            raise SystemExit(f"{path}: update {update}: lr {value!r}, expected {want!r}")
    print(f"{path}: {steps} updates follow {kind}")


main()
