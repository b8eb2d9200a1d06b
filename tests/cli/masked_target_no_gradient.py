#!/usr/bin/env python3
"""Masked tokens carry no gradient, in a batch that also trains (issue 12): prompt/completion data
from `zero data prepare`, one step of 2 samples x 16 tokens, so token 32 is only a target (of
sample 1's last position), never an input. With its mask byte 0, replacing token 32 by another id
leaves the loss and the gradient norm bitwise unchanged; with its mask byte 1 (control), the same
replacement changes both. Usage: masked_target_no_gradient.py ZERO MODEL_DIR PC_JSONL WORK_DIR"""
import json
import os
import shutil
import subprocess
import sys

zero, model, pc, work = sys.argv[1:5]
T, B = 16, 2
P = B * T  # the step's last target
os.makedirs(work, exist_ok=True)
base = os.path.join(work, "mt")
subprocess.run([zero, "data", "prepare", "--model", model, "--output", base, pc], check=True,
               stdout=subprocess.DEVNULL)
with open(base + ".manifest.json") as f:
    manifest = json.load(f)
assert manifest["token_dtype"] == "uint16", manifest
tokens = bytearray(open(base + ".tokens", "rb").read())
mask = bytearray(open(base + ".mask", "rb").read())
assert len(mask) > P and 0 in mask[1:P] and 1 in mask[1:P], "the step mixes masked and trained targets"
token = int.from_bytes(tokens[2 * P:2 * P + 2], "little")
other = (token + 1) % manifest["vocab_size"]


def step(name, token_id, mask_byte):
    prefix = os.path.join(work, name)
    shutil.copy(base + ".manifest.json", prefix + ".manifest.json")
    t, m = bytearray(tokens), bytearray(mask)
    t[2 * P:2 * P + 2] = token_id.to_bytes(2, "little")
    m[P] = mask_byte
    open(prefix + ".tokens", "wb").write(t)
    open(prefix + ".mask", "wb").write(m)
    out = os.path.join(work, "run_" + name)
    subprocess.run([zero, "train", "--model", model, "--train_file", prefix, "--block_size", str(T),
                    "--per_device_train_batch_size", str(B), "--max_steps", "1", "--quiet",
                    "--overwrite_output_dir", "--output_dir", out], check=True,
                   stdout=subprocess.DEVNULL)
    line = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())
    return line["loss"], line["grad_norm"]


masked, masked_other = step("masked", token, 0), step("masked_other", other, 0)
trained, trained_other = step("trained", token, 1), step("trained_other", other, 1)
print("mask 0: token %d -> %s, token %d -> %s" % (token, masked, other, masked_other))
print("mask 1: token %d -> %s, token %d -> %s" % (token, trained, other, trained_other))
ok = masked == masked_other and trained[0] != trained_other[0] and trained[1] != trained_other[1]
print("NO_GRADIENT_OK" if ok else "FAIL")
sys.exit(0 if ok else 1)
