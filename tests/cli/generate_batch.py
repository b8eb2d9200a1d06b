#!/usr/bin/env python3
"""CLI test of `zero generate --prompts_file` (issue 29 item 3) on the tiny BPE model of
bpe_model.py. Greedy: every output line (in completion order, with its prompt's index) holds the
completion a single `--prompt` run prints for that prompt, and the same whatever --batch_size
(1: one at a time, and 3); per-line max_new_tokens, stop strings (the completion cut before the stop
string, finish_reason "stop") and ids are honoured; sampled lines are the same across batch sizes
(each line its own seed stream). Bad input is refused with exit 2, naming the file and the line,
before any output file is made; a run killed mid-batch leaves its finished lines whole.
Usage: generate_batch.py ZERO BPE_MODEL_DIR WORK_DIR"""
import json
import os
import signal
import subprocess
import sys
import time

zero, model, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(*args):
    p = subprocess.run([zero, *args], capture_output=True)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def write(name, lines):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def batch(prompts_file, *args):
    out = os.path.join(work, "out.jsonl")
    if os.path.exists(out):
        os.remove(out)
    rc, _, err = run("generate", "--model", model, "--prompts_file", prompts_file, "--output", out,
                     *args)
    lines = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    return rc, lines, err


greedy = ["--temperature", "0", "--max_new_tokens", "10"]
prompts = ["Hello wörld", "a", "The quick fox", "", "Once upon"]
prompts_file = write("prompts.jsonl", [json.dumps({"prompt": p}) for p in prompts])

# Single runs: the reference completions (stdout echoes the prompt, then a newline at the end).
single = []
for p in prompts:
    rc, out, err = run("generate", "--model", model, "--prompt", p, *greedy)
    check(rc == 0 and out.startswith(p) and out.endswith("\n"), f"single run of {p!r}: {err}")
    single.append(out[len(p):-1])

by_size = {}
for size in ["1", "3"]:
    rc, lines, err = batch(prompts_file, *greedy, "--batch_size", size)
    check(rc == 0, f"--batch_size {size} exits 0: {err}")
    check(sorted(l["index"] for l in lines) == list(range(len(prompts))),
          f"--batch_size {size}: one line per prompt")
    by_index = {l["index"]: l for l in lines}
    by_size[size] = by_index
    for i, p in enumerate(prompts):
        line = by_index.get(i, {})
        check(line.get("prompt") == p and line.get("completion") == single[i],
              f"--batch_size {size}, prompt {i}: the single run's completion "
              f"({line.get('completion')!r} vs {single[i]!r})")
        check(line.get("tokens") == len(line.get("completion_tokens", [])) and
              line.get("finish_reason") in ("eos", "length"),
              f"--batch_size {size}, prompt {i}: tokens and finish_reason")
    check("prompts done" in err and "tokens/s" in err, f"--batch_size {size}: speed on stderr")
check(by_size["1"] == by_size["3"], "the same lines whatever the batch size")

# Per-line settings: max_new_tokens and an id; a stop string taken from a sampled completion (the
# line's own seed and temperature: the same tokens with and without the stop string until it).
sampled_line = {"prompt": prompts[2], "seed": 11, "temperature": 0.9, "max_new_tokens": 12}
rc, lines, err = batch(write("sampled.jsonl", [json.dumps(sampled_line)]), *greedy)
full = lines[0]["completion"] if rc == 0 and lines else ""
check(len(full) >= 6, f"a sampled completion to cut: {full!r} {err}")
stop = full[3:6]
cut = full[:full.find(stop)]
special = write("special.jsonl", [
    json.dumps({"prompt": prompts[0], "max_new_tokens": 3, "id": "q0"}),
    json.dumps({**sampled_line, "stop": ["zzzz-never", stop]}),
])
rc, lines, err = batch(special, *greedy)
by_index = {l["index"]: l for l in lines}
check(rc == 0 and len(lines) == 2, "per-line settings exit 0: " + err)
check(by_index[0]["tokens"] == 3 and by_index[0]["finish_reason"] == "length" and
      by_index[0]["id"] == "q0", "per-line max_new_tokens and id")
check(by_index[1]["completion"] == cut and by_index[1]["finish_reason"] == "stop",
      f"stop string {stop!r}: completion {by_index[1]['completion']!r}, want {cut!r}")

# Sampling: each line its own RNG stream, so the batch size does not change the samples.
sampled = ["--temperature", "0.9", "--top_k", "20", "--top_p", "0.95", "--repetition_penalty",
           "1.2", "--seed", "5", "--max_new_tokens", "12"]
_, one, _ = batch(prompts_file, *sampled, "--batch_size", "1")
_, four, _ = batch(prompts_file, *sampled, "--batch_size", "4")
check(sorted(one, key=lambda l: l["index"]) == sorted(four, key=lambda l: l["index"]) and
      len(one) == len(prompts), "sampled lines equal for --batch_size 1 and 4")
# Line 0 samples with the run's seed: a single --prompt run with the same settings.
rc, out, _ = run("generate", "--model", model, "--prompt", prompts[0], *sampled)
check(rc == 0 and out[len(prompts[0]):-1] == [l for l in one if l["index"] == 0][0]["completion"],
      "line 0 samples as a single run with --seed")

# Bad input: exit 2 naming the file and line, no output file.
bad_cases = [
    ("bad_json", ['{"prompt": "a"}', '{"prompt": "b"'], ":2: not valid JSON"),
    ("bad_key", ['{"prompt": "a", "max_tokens": 3}'],
     ':1: unknown key "max_tokens" (did you mean "max_new_tokens"?)'),
    ("too_long", ['{"prompt": "a"}', '{"prompt": "a"}', json.dumps({"prompt": "word " * 40})],
     ":3: the prompt is "),
]
for name, lines, message in bad_cases:
    path = write(name + ".jsonl", lines)
    rc, out_lines, err = batch(path, "--context_limit", "16")
    check(rc == 2 and (path + message) in err and not out_lines,
          f"{name}: exit 2 with {message!r}: {err.strip()}")
rc, _, err = run("generate", "--model", model, "--prompts_file", prompts_file, "--prompt", "x")
check(rc == 2 and "--prompts_file excludes --chat, --prompt and --prompt_tokens" in err,
      "--prompts_file with --prompt is refused")
rc, _, err = run("generate", "--model", model, "--prompt", "x", "--output", "o.jsonl")
check(rc == 2 and "--output is for --prompts_file" in err, "--output without --prompts_file")
# An output that cannot be written: exit 1 naming it (nothing lost: no line finished before).
if os.path.exists("/dev/full"):
    rc, _, err = run("generate", "--model", model, "--prompts_file", prompts_file, "--output",
                     "/dev/full", *greedy)
    check(rc == 1 and "--output /dev/full: writing the line of prompt" in err,
          "a failed write exits 1 naming the output: " + err.strip())

# Killed mid-batch (SIGKILL after the first line is out): every line written is whole JSON, for a
# prompt that finished, and nothing is lost of them.
long_file = write("long.jsonl", [json.dumps({"prompt_tokens": [3 + i, 7], "max_new_tokens": 3000 if i
                                             else 5}) for i in range(6)])
killed_out = os.path.join(work, "killed.jsonl")
proc = subprocess.Popen([zero, "generate", "--model", model, "--prompts_file", long_file, "--output",
                         killed_out, "--temperature", "0", "--batch_size", "1"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.time() + 60
while time.time() < deadline and proc.poll() is None:
    if os.path.exists(killed_out) and os.path.getsize(killed_out) > 0:
        break
    time.sleep(0.005)
proc.send_signal(signal.SIGKILL)
proc.wait()
with open(killed_out) as f:
    text = f.read()
kept = [json.loads(line) for line in text.splitlines()]
check(proc.returncode == -signal.SIGKILL and text.endswith("\n") and len(kept) >= 1 and
      kept[0]["index"] == 0 and kept[0]["tokens"] == 5,
      f"killed mid-batch: the finished lines are whole ({len(kept)} kept)")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
