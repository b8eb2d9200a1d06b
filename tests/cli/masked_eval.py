#!/usr/bin/env python3
"""Evaluation honours the loss mask (issue 12): on prepared prompt/completion data, the initial
model's eval loss (`zero train --eval_on_start`, and `zero eval`) equals step 1's training loss
when step 1's batch is every sample, both the mean over the unmasked targets only.
Usage: masked_eval.py ZERO MODEL_DIR PC_JSONL WORK_DIR"""
import json
import os
import subprocess
import sys

zero, model, pc, work = sys.argv[1:5]
os.makedirs(work, exist_ok=True)
prefix, run = os.path.join(work, "ev"), os.path.join(work, "ev_run")
subprocess.run([zero, "data", "prepare", "--model", model, "--output", prefix, pc], check=True,
               stdout=subprocess.DEVNULL)
manifest = json.load(open(prefix + ".manifest.json"))
T = 16
samples = (manifest["num_tokens"] - 1) // T
subprocess.run([zero, "train", "--model", model, "--train_file", prefix, "--validation_file",
                prefix, "--eval_on_start", "--block_size", str(T), "--per_device_train_batch_size",
                str(samples), "--per_device_eval_batch_size", "8", "--max_steps", "1", "--quiet",
                "--overwrite_output_dir", "--output_dir", run], check=True,
               stdout=subprocess.DEVNULL)
metrics = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
ev = json.loads(subprocess.run([zero, "eval", "--model", model, "--validation_file", prefix,
                                "--block_size", str(T)], check=True, capture_output=True,
                               text=True).stdout)
print(metrics[0], ev)
assert len(metrics) == 2 and metrics[1]["tokens"] == samples * T
# Masked targets are left out of the eval loss: fewer counted targets than the samples hold.
assert 0 < ev["eval_tokens"] <= manifest["num_trained_tokens"] < samples * T
pairs = [(metrics[0]["eval_loss"], metrics[1]["loss"]), (ev["eval_loss"], metrics[1]["loss"])]
print(pairs)
assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in pairs), pairs
print("MASKED_EVAL_OK")
