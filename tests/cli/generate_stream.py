"""ZeRO-Inference's weight stream from the command line (issue 29 items 2 and 5), on the CPU (this
machine has no GPU; the CUDA path's equality is emu/cuda_generate_emu_test.cc):

  generate_stream.py ZERO OUT_DIR equal     --offload_param nvme gives the resident tokens (one
                                            prompt, a --prompts_file batch) and eval loss; the nvme
                                            directory is empty after a run and after a failed one;
                                            bad flags and too-small budgets are exit 2 with one
                                            line naming the numbers
  generate_stream.py ZERO OUT_DIR host_budget --max_host_memory: the process's peak RSS grows by
                                            less than the budget over a tiny model's run, for a
                                            model whose weights are larger than the budget
"""

import json
import os
import resource
import shutil
import subprocess
import sys

ZERO, OUT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = "preset:gpt2-mini"  # 4 blocks: two slots stream them
VALID = os.path.join(os.path.dirname(__file__), "..", "fixtures", "golden", "tokens.bin")


def run(args, rc=0):
    p = subprocess.run([ZERO] + args, capture_output=True, text=True)
    if p.returncode != rc:
        sys.exit(f"{args}: exit {p.returncode} (want {rc})\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def fresh(name):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def assert_empty(nvme):
    left = os.listdir(nvme) if os.path.exists(nvme) else []
    if left:
        sys.exit(f"files left under {nvme}: {left}")


def check_equal():
    os.makedirs(OUT, exist_ok=True)
    nvme = fresh("nvme")
    stream = ["--offload_param", "nvme", "--nvme_path", nvme]
    gen = ["generate", "--model", MODEL, "--prompt_tokens", "10,20,30", "--temperature", "0",
           "--max_new_tokens", "6"]
    want = run(gen).stdout
    p = run(gen + stream)
    if p.stdout != want:
        sys.exit(f"streamed tokens {p.stdout!r} != resident {want!r}")
    if "blocks streamed from nvme through 2 host slots" not in p.stderr:
        sys.exit(f"no placement line: {p.stderr}")
    assert_empty(nvme)

    # A batch: the same lines.
    prompts = os.path.join(OUT, "prompts.jsonl")
    with open(prompts, "w") as f:
        for i, ids in enumerate([[1, 2, 3], [7], [40, 41, 42, 43, 44], [9, 9]]):
            f.write(json.dumps({"prompt_tokens": ids, "max_new_tokens": 2 + i, "id": i}) + "\n")
    batch = ["generate", "--model", MODEL, "--prompts_file", prompts, "--temperature", "0",
             "--batch_size", "3", "--output"]
    run(batch + [os.path.join(OUT, "resident.jsonl")])
    run(batch + [os.path.join(OUT, "streamed.jsonl")] + stream)
    a = open(os.path.join(OUT, "resident.jsonl")).read()
    b = open(os.path.join(OUT, "streamed.jsonl")).read()
    if a != b or a.count("\n") != 4:
        sys.exit(f"batch lines differ:\n{a}\n{b}")
    assert_empty(nvme)

    # The same from a ds_config's zero_optimization.offload_param (and its aio block); a flag that
    # contradicts the file is refused naming both.
    ds = os.path.join(OUT, "ds_inference.json")
    with open(ds, "w") as f:
        json.dump({"zero_optimization": {"stage": 3, "offload_param": {
            "device": "nvme", "nvme_path": nvme, "pin_memory": True}},
            "aio": {"block_size": 262144, "queue_depth": 4}}, f)
    p = run(gen + ["--deepspeed_config", ds])
    if p.stdout != want or "from nvme" not in p.stderr:
        sys.exit(f"--deepspeed_config: {p.stdout!r} != {want!r}, {p.stderr}")
    assert_empty(nvme)

    # zero eval: the same JSON line (the loss bitwise: the same forward over the same bytes).
    ev = ["eval", "--model", MODEL, "--validation_file", VALID, "--block_size", "16",
          "--per_device_eval_batch_size", "3"]
    want = run(ev).stdout
    got = run(ev + stream).stdout
    if got != want:
        sys.exit(f"streamed eval {got!r} != resident {want!r}")
    assert_empty(nvme)

    # A run that fails after the blocks were written (--no_kv_cache is for the GPU) removes them.
    run(gen + stream + ["--no_kv_cache"], rc=2)
    assert_empty(nvme)

    # Bad input: exit 2, one line, naming the flag and the numbers.
    def refused(args, *parts):
        p = run(args, rc=2)
        lines = p.stderr.strip().split("\n")
        if len(lines) != 1 or p.stdout or any(part not in lines[0] for part in parts):
            sys.exit(f"{args}: want one line with {parts}, got {p.stderr!r}")

    refused(gen + ["--offload_param", "disk"], "--offload_param 'disk': expected none, cpu or nvme")
    refused(gen + ["--offload_param", "nvme"], "--nvme_path")
    refused(gen + ["--deepspeed_config", ds, "--offload_param", "cpu"],
            '--offload_param cpu contradicts zero_optimization.offload_param.device "nvme"')
    refused(gen + ["--offload_param", "cpu"], "--offload_param cpu is for --device cuda")
    refused(gen + ["--max_gpu_memory", "1GB"], "--max_gpu_memory is for --device cuda")
    refused(gen + ["--max_gpu_memory", "lots", "--device", "cuda"], "--max_gpu_memory lots")
    # gpt2-mini in fp32: 197632 resident bytes and blocks of 793088, so two slots need 1783808
    # (refused before the GPU is probed: the same on a machine without one).
    refused(gen + ["--device", "cuda", "--offload_param", "cpu", "--max_gpu_memory", "1MB"],
            "--max_gpu_memory 1000000 is too small", "1783808 bytes needed",
            "2 block slots of 793088 bytes")
    refused(ev + ["--device", "cuda", "--offload_param", "nvme", "--nvme_path", nvme,
                  "--max_gpu_memory", "1MB"], "1783808 bytes needed")
    refused(gen + stream + ["--max_host_memory", "1MB"], "--max_host_memory 1000000 is too small",
            "3369984 bytes needed")
    assert_empty(nvme)
    print("streamed-equals-resident")


def peak_rss_bytes(args):
    """The peak resident set of one `zero` run (fork + getrusage of that child alone)."""
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execv(ZERO, [ZERO] + args)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{args}: exit {os.waitstatus_to_exitcode(status)}")
    return usage.ru_maxrss * 1024


def check_host_budget():
    os.makedirs(OUT, exist_ok=True)
    nvme = fresh("nvme_budget")
    budget = 320 * 10**6
    args = ["generate", "--prompt_tokens", "1,2,3", "--temperature", "0", "--max_new_tokens", "1"]
    # The process without weights to speak of (its libraries, threads, a forward of a tiny model).
    base = peak_rss_bytes(args + ["--model", "preset:gpt2-tiny"])
    # gpt2-124m in fp32: 497 MB of weights, 158 MB of them resident (embeddings, final norm).
    peak = peak_rss_bytes(args + ["--model", "preset:gpt2-124m", "--offload_param", "nvme",
                                  "--nvme_path", nvme, "--max_host_memory", str(budget)])
    grew = peak - base
    print(f"baseline {base / 1e6:.0f} MB, streamed gpt2-124m {peak / 1e6:.0f} MB: "
          f"+{grew / 1e6:.0f} MB for a budget of {budget / 1e6:.0f} MB (weights 497 MB)")
    assert_empty(nvme)
    if grew > budget:
        sys.exit("over the budget")
    print("within-host-budget")


{"equal": check_equal, "host_budget": check_host_budget}[MODE]()
