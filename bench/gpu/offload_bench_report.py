#!/usr/bin/env python3
"""The numbers of tools/gpu/offload_bench.sh: one JSON record per run (ours from `zero train`'s log
and metrics.jsonl, DeepSpeed's from bench/gpu/train_ds_gpu.py's lines), its markdown row, and the
summary table with the ratio columns. Python's standard library only.

  offload_bench_report.py tokens CORPUS OUT              corpus bytes as uint16 tokens (< 256: every vocab)
  offload_bench_report.py zero RUN_DIR KEY=VALUE...      -> one JSON record on stdout
  offload_bench_report.py ds RUN_DIR KEY=VALUE...        -> one JSON record on stdout
  offload_bench_report.py row RECORD_JSON                -> its markdown row
  offload_bench_report.py summary RESULTS_JSONL          -> the summary table
  offload_bench_report.py plans RESULTS_JSONL            -> each run's memory plan line

KEY=VALUE: name, model (a preset name or an HF directory), mode, micro, accum, seq, flags, peak
(dense bf16 FLOP/s), warmup (untimed steps). RUN_DIR holds log, metrics.jsonl / ds.jsonl and, on a
GPU, smi_peak_mib (nvidia-smi's largest memory.used sample during the run).
"""
import array
import json
import os
import re
import sys

# Shapes of src/model/model_config.cc's presets: vocab, hidden, layers, heads, kv heads,
# intermediate (0: GPT-2's 4C MLP), positions (GPT-2's learned table), tied head.
PRESETS = {
    "gpt2-tiny": ("gpt2", 256, 64, 2, 4, 4, 0, 64, True),
    "gpt2-mini": ("gpt2", 256, 128, 4, 4, 4, 0, 128, True),
    "gpt2-124m": ("gpt2", 50257, 768, 12, 12, 12, 0, 1024, True),
    "gpt2-350m": ("gpt2", 50257, 1024, 24, 16, 16, 0, 1024, True),
    "gpt2-774m": ("gpt2", 50257, 1280, 36, 20, 20, 0, 1024, True),
    "gpt2-1558m": ("gpt2", 50257, 1600, 48, 25, 25, 0, 1024, True),
    "llama-tiny": ("llama", 256, 64, 2, 4, 2, 172, 0, False),
    "llama-1b": ("llama", 128256, 2048, 16, 32, 8, 8192, 0, True),
    "llama-8b": ("llama", 128256, 4096, 32, 32, 8, 14336, 0, False),
    "llama-13b": ("llama", 32000, 5120, 40, 40, 40, 13824, 0, False),
}
MIB = 1 << 20


def shape(model):
    if model.startswith("preset:"):
        model = model[len("preset:"):]
    if model in PRESETS:
        return PRESETS[model]
    cfg = json.load(open(os.path.join(model, "config.json")))
    if cfg["model_type"] == "gpt2":
        return ("gpt2", cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"],
                cfg["n_head"], 0, cfg["n_positions"], True)
    return (cfg["model_type"], cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"],
            cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            cfg["intermediate_size"], 0, cfg.get("tie_word_embeddings", False))


def matmul_params(model):
    """Parameters that take part in a matrix product per token: every weight but the lookup tables
    (token embedding unless tied to the head, GPT-2's positions); norms and biases, which are not
    products, are a rounding error and counted."""
    arch, V, C, L, H, KV, I, P, tied = shape(model)
    if arch == "gpt2":
        return V * C + L * (12 * C * C + 13 * C) + 2 * C  # the tied head is wte
    kv = C // H * KV
    block = 2 * C * C + 2 * C * kv + 3 * C * I + 2 * C
    return L * block + C + V * C  # the head (its own matrix or the tied table)


def flops_per_token(model, T):
    # 6N (forward + backward of the products), plus attention's QK^T and AV: 12 * L * C * T
    # (PaLM's count: the causal mask's skipped half counted, as torch_step.py does).
    arch, V, C, L = shape(model)[:4]
    return 6 * matmul_params(model) + 12 * L * C * T


def parse_size(text):
    m = re.match(r"([0-9.]+) (KiB|MiB|GiB)", text.strip())
    if not m:
        return None
    return float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}[m.group(2)]


def plan_figures(log_text):
    """The `zero train: memory plan:` line's host and GPU totals in MiB (None where absent)."""
    line = next((l for l in log_text.splitlines() if l.startswith("zero train: memory plan:")), "")
    host = re.search(r"memory plan: host ([0-9.]+ [KMG]iB) per rank", line)
    gpu = re.search(r"; GPU \d+: ([0-9.]+ [KMG]iB)", line)
    return (parse_size(host.group(1)) if host else None, parse_size(gpu.group(1)) if gpu else None,
            line[len("zero train: memory plan: "):])


def last_field(log_text, prefix, field):
    """`field: X` from the last wall_clock_breakdown line holding prefix and the field itself
    (None if absent). The field matches whole: `step` is not `step_microstep`."""
    pattern = re.compile(r"(?:^|\| )" + re.escape(field) + r": ([0-9.]+)")
    for line in reversed(log_text.splitlines()):
        m = pattern.search(line)
        if prefix in line and m:
            return float(m.group(1))
    return None


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    rows = []
    for l in open(path):
        try:
            rows.append(json.loads(l))
        except ValueError:
            pass  # a run killed mid-line
    return rows


def smi_peak(run_dir):
    p = os.path.join(run_dir, "smi_peak_mib")
    try:
        return float(open(p).read().strip())
    except (OSError, ValueError):
        return None


def tail(text, n=2):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return " ".join(lines[-n:])[:300]


def base_record(kv, system):
    r = dict(kv)
    r["system"] = system
    for k in ("micro", "accum", "seq"):
        r[k] = int(r[k])
    r["global"] = r["micro"] * r["accum"]
    return r


def timed(rows, warmup):
    t = [r for r in rows if r["step"] > warmup]
    if not t:
        return None, None
    step_s = sum(r["step_s"] for r in t) / len(t)
    return sum(r["tokens"] for r in t) / sum(r["step_s"] for r in t), step_s


def finish(r, tok_s, step_s, rows):
    fpt = flops_per_token(r["model"], r["seq"])
    r["tok_s"] = tok_s
    r["step_ms"] = step_s * 1e3 if step_s else None
    r["mfu"] = tok_s * fpt / float(r.get("peak", 989e12)) if tok_s else None
    r["steps"] = len(rows)
    if rows:
        r["loss_first"], r["loss_last"] = rows[0]["loss"], rows[-1]["loss"]
    return r


def zero_record(run_dir, kv):
    r = base_record(kv, "zero.cpp")
    log = open(os.path.join(run_dir, "log"), errors="replace").read() if os.path.exists(
        os.path.join(run_dir, "log")) else ""
    rows = [x for x in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if "step" in x]
    r["plan_host_mib"], r["plan_gpu_mib"], r["plan_line"] = plan_figures(log)
    warmup = int(kv.get("warmup", 2))
    tok_s, step_s = timed(rows, warmup)
    # The step's ms and the CPU Adam's ms per step (the offload pipeline's line), last window.
    r["adam_ms"] = last_field(log, "offload (ms)", "cpu adam")
    r["wall_step_ms"] = last_field(log, "] time (ms)", "step")
    peaks = [x.get("gpu_memory_peak_bytes") for x in rows if x.get("gpu_memory_peak_bytes")]
    r["gpu_peak_mib"] = smi_peak(run_dir) or (max(peaks) / MIB if peaks else None)
    hosts = [x.get("host_rss_peak_bytes") for x in rows if x.get("host_rss_peak_bytes")]
    r["host_peak_mib"] = max(hosts) / MIB if hosts else None
    rc = kv.get("rc", "0")
    if rc != "0" or tok_s is None:
        r["status"] = f"FAILED (rc {rc}): {tail(log)}"
    else:
        r["status"] = "ok"
    return finish(r, tok_s, step_s, rows)


def ds_record(run_dir, kv):
    r = base_record(kv, "DeepSpeed")
    lines = read_jsonl(os.path.join(run_dir, "ds.jsonl"))
    log = open(os.path.join(run_dir, "log"), errors="replace").read() if os.path.exists(
        os.path.join(run_dir, "log")) else ""
    rows = [x for x in lines if "step" in x]
    summary = next((x for x in lines if x.get("summary")), {})
    error = next((x["error"] for x in lines if "error" in x), None)
    warmup = int(kv.get("warmup", 2))
    tok_s, step_s = timed(rows, warmup)
    # DeepSpeed's own wall_clock_breakdown: the optimizer step (the CPU Adam under offload).
    r["adam_ms"] = last_field(log, "time (ms)", "optimizer_step")
    used = summary.get("gpu_used_peak_bytes") or max(
        [x.get("gpu_used_bytes", 0) for x in rows] or [0])
    r["gpu_peak_mib"] = smi_peak(run_dir) or (used / MIB if used else None)
    host = summary.get("host_rss_peak_bytes") or next(
        (x.get("host_rss_peak_bytes") for x in lines if "error" in x), None)
    r["host_peak_mib"] = host / MIB if host else None
    r["versions"] = " ".join(f"{k} {summary[k]}" for k in ("deepspeed", "torch", "transformers")
                             if k in summary)
    rc = kv.get("rc", "0")
    if error or rc != "0" or tok_s is None:
        r["status"] = f"FAILED (rc {rc}): {error or tail(log)}"
    else:
        r["status"] = "ok"
    return finish(r, tok_s, step_s, rows)


def fmt(x, spec, dash="-"):
    return dash if x is None else format(x, spec)


def vs_plan(measured, plan):
    if measured is None:
        return "-"
    if not plan:
        return f"{measured:.0f}"
    return f"{measured:.0f} (plan {plan:.0f}, {measured / plan:.2f}x)"


HEADER = ("| run | system | micro x accum (global) | tok/s | ms/step | MFU | GPU peak MiB | "
          "host peak MiB | host Adam ms/step | loss first -> last | status |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def row(r):
    loss = (f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}" if "loss_first" in r else "-")
    return (f"| {r['name']} | {r['system']} | {r['micro']} x {r['accum']} ({r['global']}) | "
            f"{fmt(r.get('tok_s'), '.0f')} | {fmt(r.get('step_ms'), '.1f')} | "
            f"{fmt(r.get('mfu') and 100 * r['mfu'], '.1f')}{'%' if r.get('mfu') else ''} | "
            f"{vs_plan(r.get('gpu_peak_mib'), r.get('plan_gpu_mib'))} | "
            f"{vs_plan(r.get('host_peak_mib'), r.get('plan_host_mib'))} | "
            f"{fmt(r.get('adam_ms'), '.1f')} | {loss} | {r['status'][:300]} |")


def summary(path):
    recs = read_jsonl(path)
    ours = [r for r in recs if r["system"] == "zero.cpp"]
    ds = {r["name"]: r for r in recs if r["system"] == "DeepSpeed"}
    print("| run | ours tok/s | MFU | DeepSpeed tok/s | ours / DeepSpeed | offload / no-offload | "
          "GPU peak / plan | host peak / plan |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in ours:
        d = ds.get(r["name"])
        ratio = "-"
        if d is not None:
            ratio = (f"{r['tok_s'] / d['tok_s']:.2f}" if r.get("tok_s") and d.get("tok_s")
                     else f"DeepSpeed: {d['status'][:120]}")
        # The same run without optimizer offload (mode s2o -> s2, s3o -> s3), same grid point.
        own = "-"
        if "o" in r["mode"][2:]:
            base = next((b for b in ours if b["model"] == r["model"] and b["mode"] == r["mode"][:2]
                         and b["micro"] == r["micro"] and b["accum"] == r["accum"]
                         and b.get("tok_s")), None)
            if base and r.get("tok_s"):
                own = f"{r['tok_s'] / base['tok_s']:.2f}"

        def plan_ratio(m, p):
            return f"{m / p:.2f}" if m and p else "-"
        print(f"| {r['name']} | {fmt(r.get('tok_s'), '.0f', r['status'][:80])} | "
              f"{fmt(r.get('mfu') and 100 * r['mfu'], '.1f')} | "
              f"{fmt(d and d.get('tok_s'), '.0f')} | {ratio} | {own} | "
              f"{plan_ratio(r.get('gpu_peak_mib'), r.get('plan_gpu_mib'))} | "
              f"{plan_ratio(r.get('host_peak_mib'), r.get('plan_host_mib'))} |")


def tokens(corpus, out):
    data = open(corpus, "rb").read()
    a = array.array("H", list(data))  # one byte per token, stored as little-endian uint16
    if sys.byteorder != "little":
        a.byteswap()
    with open(out, "wb") as f:
        a.tofile(f)


def main():
    cmd = sys.argv[1]
    if cmd == "tokens":
        tokens(sys.argv[2], sys.argv[3])
    elif cmd in ("zero", "ds"):
        kv = dict(a.split("=", 1) for a in sys.argv[3:])
        rec = (zero_record if cmd == "zero" else ds_record)(sys.argv[2], kv)
        print(json.dumps(rec))
    elif cmd == "row":
        print(row(json.loads(sys.argv[2])))
    elif cmd == "header":
        print(HEADER)
    elif cmd == "summary":
        summary(sys.argv[2])
    elif cmd == "plans":
        for r in read_jsonl(sys.argv[2]):
            if r.get("plan_line"):
                print(f"- {r['name']}: {r['plan_line']}")
            if r.get("versions"):
                print(f"- {r['name']} DeepSpeed side: {r['versions']}")
    elif cmd == "fpt":
        print(flops_per_token(sys.argv[2], int(sys.argv[3])))
    else:
        sys.exit(f"offload_bench_report.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
