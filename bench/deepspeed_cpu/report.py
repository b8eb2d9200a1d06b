#!/usr/bin/env python3
"""Turns bench/deepspeed_cpu/run.sh's summary.jsonl into the side-by-side table: per configuration
the largest per-step loss difference between DeepSpeed and `zero train`, each system's median step
time after the warm-up steps, and the ratio DeepSpeed / ZeRO.cpp (> 1: ZeRO.cpp is faster).

Per-step times: DeepSpeed's from train_ds.py (step_s); ZeRO.cpp's are differences of consecutive
elapsed_s in OUTPUT_DIR/metrics.jsonl (the same span: batch reads, the step, the loss reduction).
With --results FILE the table replaces what sits between the table markers in FILE (the rest of
the file, e.g. profiles written by hand, is kept), or starts FILE when it has no markers.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess

BEGIN = "<!-- deepspeed_cpu table: begin (bench/deepspeed_cpu/run.sh writes this part) -->"
END = "<!-- deepspeed_cpu table: end -->"


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def evaluate(row, warmup):
    ds = read_jsonl(os.path.join(row["dir"], "ds.jsonl"))
    zero = [m for m in read_jsonl(os.path.join(row["dir"], "zero", "metrics.jsonl")) if "loss" in m]
    out = dict(row)
    n = min(len(ds), len(zero))
    out["steps_compared"] = n
    out["max_loss_diff"] = max((abs(ds[i]["loss"] - zero[i]["loss"]) for i in range(n)),
                               default=None)
    out["ds_final_loss"] = ds[-1]["loss"] if ds else None
    out["zero_final_loss"] = zero[-1]["loss"] if zero else None
    ds_times = [r["step_s"] for r in ds[warmup:]]
    zero_times = [zero[i]["elapsed_s"] - zero[i - 1]["elapsed_s"]
                  for i in range(max(warmup, 1), len(zero))]
    out["timed_steps"] = min(len(ds_times), len(zero_times))
    out["ds_ms"] = 1e3 * statistics.median(ds_times) if ds_times else None
    out["zero_ms"] = 1e3 * statistics.median(zero_times) if zero_times else None
    out["ratio"] = out["ds_ms"] / out["zero_ms"] if out["ds_ms"] and out["zero_ms"] else None
    return out


def fmt(x, spec):
    return "failed" if x is None else format(x, spec)


def table(rows):
    lines = ["| configuration | max abs loss diff | DeepSpeed ms/step | ZeRO.cpp ms/step | "
             "ratio (DS / ours) | load before -> after | ran first |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ratio = fmt(r["ratio"], ".2f") + ("x" if r["ratio"] else "")
        if r["ratio"]:
            ratio = f"**{ratio}**" if r["ratio"] >= 1.0 else ratio
        lines.append(f"| {r['name']} | {fmt(r['max_loss_diff'], '.1e')} | {fmt(r['ds_ms'], '.0f')} | "
                     f"{fmt(r['zero_ms'], '.0f')} | {ratio} | {r['load_before']} -> "
                     f"{r['load_after']} | {r['first']} |")
    return "\n".join(lines)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def header(args, rows):
    import deepspeed
    import torch
    import transformers
    cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
    flags = sh("grep -o -w -E 'avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\\n' ' '")
    mem = sh("free -g | awk '/^Mem:/ {print $2}'")
    zero_rev = sh(f"git -C {os.path.dirname(os.path.abspath(__file__))} rev-parse --short HEAD")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    loads = [r["load_before"] for r in rows] + [r["load_after"] for r in rows]
    return "\n".join([
        f"Run {now} on {cpu} ({flags.strip()}), {os.cpu_count()} cores, {mem} GiB; "
        f"1-minute load average {min(loads):.1f} to {max(loads):.1f} during the grid.",
        f"Versions: ZeRO.cpp {zero_rev} (`{args.zero}`), DeepSpeed {deepspeed.__version__} "
        f"(DS_ACCELERATOR=cpu, gloo, torchrun), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, Python {platform.python_version()}.",
        f"Model: HF GPT-2, 4 layers, 256 wide, 4 heads, 50257 vocab (16.3M parameters, tied head), "
        f"from make_model.py's fixed seed; tokens: examples/data/kjv.txt bytes as uint16 ids, "
        f"sequential order. Batch: {args.shape}. AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-8, "
        f"weight decay 0.1 on >= 2-dim tensors, gradient clipping 1.0, constant lr.",
        f"Threads per rank: world 1: 2; world 2: 1 (OMP_NUM_THREADS, torch.set_num_threads); "
        f"OMP_WAIT_POLICY={args.wait_policy} for both. "
        "Step time: median over the timed steps; ratio = DeepSpeed / ZeRO.cpp (> 1: ZeRO.cpp "
        "faster, bold).",
    ])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", required=True, nargs="+", help="summary.jsonl file(s)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--last", action="store_true", help="print the last configuration only")
    ap.add_argument("--zero", default="build/release/bin/zero")
    ap.add_argument("--shape", default="")
    ap.add_argument("--results", default="-")
    ap.add_argument("--wait-policy", default="passive")
    args = ap.parse_args()
    rows = [evaluate(r, args.warmup) for s in args.summary for r in read_jsonl(s)]
    if args.last:
        r = rows[-1]
        print(f"{r['name']}: loss diff {fmt(r['max_loss_diff'], '.1e')}, DeepSpeed "
              f"{fmt(r['ds_ms'], '.0f')} ms, ZeRO.cpp {fmt(r['zero_ms'], '.0f')} ms, ratio "
              f"{fmt(r['ratio'], '.2f')}, load {r['load_before']} -> {r['load_after']}")
        return
    body = header(args, rows) + "\n\n" + table(rows)
    print(body)
    with open(os.path.join(os.path.dirname(args.summary[0]), "report.json"), "w") as f:
        json.dump(rows, f, indent=1)
    if args.results == "-":
        return
    block = f"{BEGIN}\n{body}\n{END}"
    text = open(args.results).read() if os.path.exists(args.results) else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = ("# ZeRO.cpp vs DeepSpeed on CPU, side by side\n\n"
                "Command: `bench/deepspeed_cpu/run.sh` (issue 14; README there).\n\n" + block + "\n")
    with open(args.results, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
