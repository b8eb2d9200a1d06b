#!/usr/bin/env python3
"""DeepSpeed's side of tools/gpu/offload_bench.sh: trains an HF model directory (LlamaForCausalLM or
GPT2LMHeadModel, e.g. one written by bench/gpu/make_random_llama.py, the same weights `zero train
--model DIR` reads) with deepspeed.initialize on the given ds_config, one GPU, world 1, on the same
token stream in the same order as `zero train --data_order sequential` (docs/formats/data.md), and
writes one JSON line per optimizer step, then one summary line (or an "error" line with DeepSpeed's
message when it fails or does not fit; the exit status is then 1).

  python3 train_ds_gpu.py --model DIR --tokens tokens.bin --deepspeed ds.json --block_size 1024 \
      --steps 6 --out ds.jsonl [--gradient_checkpointing] [--device cpu]

The adaptation of bench/deepspeed_cpu/train_ds.py: nccl on the GPU (no launcher: world 1 set up
here), the weights loaded in bf16 (the engine's bf16 mode computes in bf16 with fp32 or bf16 master
weights in the optimizer), ZeRO-3 models built under deepspeed.zero.Init (HfDeepSpeedConfig) so a
13B model is partitioned while it loads. --device cpu (DS_ACCELERATOR=cpu, gloo) is the plumbing
check on a machine without a GPU.

Per step (rank 0): the accumulation micro-steps (batch slicing, forward, loss, backward,
engine.step) up to the loss's .item(), which waits for the GPU. Memory: torch's peak allocated and
reserved bytes, the device's used bytes at each step's end (torch.cuda.mem_get_info: every process,
the CUDA context included, as `zero train` reports), and the process's peak RSS (ru_maxrss).
"""
import argparse
import json
import os
import resource
import sys
import time
import traceback


def param_groups(model, weight_decay):
    # As ZeRO.cpp groups them (docs/optim.md): decay on tensors of two or more dimensions.
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def host_peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def train(args, out):
    # World 1 without a launcher: what torchrun would export.
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(29500 + os.getpid() % 1000))):
        os.environ.setdefault(k, v)
    if args.device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import numpy as np
    import torch
    import torch.nn.functional as F
    import deepspeed
    import transformers

    cuda = args.device == "cuda"
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    with open(args.deepspeed) as f:
        ds_config = json.load(f)
    micro = ds_config["train_micro_batch_size_per_gpu"]
    gas = ds_config["gradient_accumulation_steps"]
    weight_decay = ds_config["optimizer"]["params"].get("weight_decay", 0.0)
    stage = ds_config.get("zero_optimization", {}).get("stage", 0)

    t_load = time.perf_counter()
    keep = None
    if stage == 3:
        # Kept alive while from_pretrained runs: transformers then builds the model under
        # deepspeed.zero.Init, each parameter partitioned as it is created.
        from transformers.integrations import HfDeepSpeedConfig
        keep = HfDeepSpeedConfig(ds_config)
    dtype = torch.bfloat16 if ds_config.get("bf16", {}).get("enabled") else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype,
                                                              attn_implementation="sdpa")
    model.config.use_cache = False
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    engine, _, _, _ = deepspeed.initialize(model=model, config=ds_config,
                                           model_parameters=param_groups(model, weight_decay))
    del keep
    load_s = time.perf_counter() - t_load
    device = engine.device

    T = args.block_size
    tokens = torch.from_numpy(np.fromfile(args.tokens, dtype="<u2").astype(np.int64))
    num_samples = (tokens.numel() - 1) // T
    tbs = micro * gas

    def micro_batch(step, m):
        # Sequential order, world 1: step s, micro-step m takes samples s*TBS + m*micro + i.
        rows = []
        for i in range(micro):
            g = (step * tbs + m * micro + i) % num_samples
            rows.append(tokens[g * T:g * T + T + 1])
        batch = torch.stack(rows).to(device)
        return batch[:, :T], batch[:, 1:]

    used_peak = 0
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss_sum = 0.0
        for m in range(gas):
            x, y = micro_batch(step, m)
            logits = engine(input_ids=x).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
            del logits
            engine.backward(loss)
            engine.step()
            loss_sum += loss.item()  # waits for the device: the step's time is the device's
        step_s = time.perf_counter() - t0
        row = {"step": step + 1, "loss": loss_sum / gas, "step_s": step_s, "tokens": tbs * T}
        if cuda:
            free, total = torch.cuda.mem_get_info()
            used_peak = max(used_peak, total - free)
            row["gpu_used_bytes"] = total - free
        out.write(json.dumps(row) + "\n")
        out.flush()
    summary = {"summary": True, "load_s": load_s, "host_rss_peak_bytes": host_peak_bytes(),
               "deepspeed": deepspeed.__version__, "torch": torch.__version__,
               "transformers": transformers.__version__}
    if cuda:
        summary.update(gpu_used_peak_bytes=used_peak,
                       gpu_max_allocated_bytes=torch.cuda.max_memory_allocated(),
                       gpu_max_reserved_bytes=torch.cuda.max_memory_reserved(),
                       gpu_name=torch.cuda.get_device_name())
    out.write(json.dumps(summary) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--deepspeed", required=True)
    ap.add_argument("--block_size", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gradient_checkpointing", action="store_true")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--local_rank", type=int, default=-1)  # a deepspeed launcher passes it
    args = ap.parse_args()
    with open(args.out, "w") as out:
        try:
            train(args, out)
        except BaseException as e:  # noqa: BLE001 -- the error text is the measurement
            traceback.print_exc()
            text = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
            out.write(json.dumps({"error": text[:400], "host_rss_peak_bytes": host_peak_bytes()})
                      + "\n")
            out.flush()
            sys.exit(1)


if __name__ == "__main__":
    main()
