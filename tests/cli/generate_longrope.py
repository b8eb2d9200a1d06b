#!/usr/bin/env python3
"""CLI test of `zero generate` on Phi-3 with longrope (issue 31): the hf_matrix fixture
phi3_longrope_untied_fp32_single_hf5, whose recorded greedy prompt (5 tokens) is under its
original_max_position_embeddings (8) and whose 8 tokens, from transformers' own generate, pass it
(transformers re-encodes the sequence with the long factors there). Greedy on the CPU: one
--prompt_tokens run prints transformers' tokens; a --prompts_file batch of three (the recorded
prompt beside its first 2 tokens and a 10-token prompt already past the original context, so the
three switch tables at different steps) gives the recorded prompt transformers' tokens and each
line the tokens of its own single run.
Usage: generate_longrope.py ZERO FIXTURE_DIR WORK_DIR"""
import json
import os
import subprocess
import sys

zero, model, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
with open(os.path.join(model, "expected.json")) as f:
    greedy = json.load(f)["greedy"]
prompt, want = greedy["prompt"], greedy["tokens"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def alone(ids):
    """The new tokens of one greedy run (it prints the prompt's ids, then the new ones)."""
    out = subprocess.run([zero, "generate", "--model", model, "--prompt_tokens",
                          ",".join(map(str, ids)), "--temperature", "0", "--max_new_tokens",
                          str(len(want))], capture_output=True, check=True).stdout.decode()
    return [int(t) for t in out.split()][len(ids):]


got = alone(prompt)
check(got == want, f"one prompt: {got} == transformers' {want}")

prompts = [prompt[:2], prompt, [5, 51, 2, 53, 36, 44, 17, 26, 31, 34]]
path = os.path.join(work, "prompts.jsonl")
with open(path, "w") as f:
    f.write("".join(json.dumps({"prompt_tokens": p}) + "\n" for p in prompts))
out = subprocess.run([zero, "generate", "--model", model, "--prompts_file", path, "--temperature",
                      "0", "--max_new_tokens", str(len(want)), "--batch_size", "3"],
                     capture_output=True, check=True).stdout.decode()
lines = {line["index"]: line["completion_tokens"] for line in map(json.loads, out.splitlines())}
check(lines.get(1) == want, f"batched, the recorded prompt: {lines.get(1)} == transformers' {want}")
for i, p in enumerate(prompts):
    single = alone(p)
    check(lines.get(i) == single, f"batched line {i}: {lines.get(i)} == its own run {single}")

print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)
