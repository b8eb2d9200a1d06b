#!/usr/bin/env python3
"""HF transformers' greedy `generate` on one GPU: the baseline `zero generate --device cuda` races
(issue 29 item 6; tools/gpu/inference_stream.sh runs both on the same directory and prompts).

bf16 weights, SDPA attention, a static key/value cache, greedy; the prompts of a `zero generate
--prompts_file` (JSONL with "prompt_tokens") in batches of --batch, each batch left-padded to its
longest prompt; one untimed warm-up batch first (cuBLAS, the cache's allocation). Writes one JSONL
line per prompt ({"index", "completion_tokens"}: the new tokens up to and including EOS, as zero
generate writes them) and prints one line:

    hf: N new tokens in S s, X tokens/s (batch B, transformers V)

    hf_generate.py MODEL_DIR PROMPTS_JSONL OUT_JSONL --batch 64 --max_new_tokens 64
"""
import argparse
import json
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda", help="cuda; cpu checks the plumbing")
    args = ap.parse_args()

    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.bfloat16, attn_implementation="sdpa").to(args.device).eval()
    prompts = [json.loads(line)["prompt_tokens"] for line in open(args.prompts) if line.strip()]
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    pad = model.generation_config.pad_token_id
    pad = pad if isinstance(pad, int) else 0

    def run(batch):
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=args.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=args.device)
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=args.max_new_tokens, cache_implementation="static",
                             pad_token_id=pad)
        rows = []
        for row in out[:, width:].tolist():
            kept = []
            for t in row:
                kept.append(t)
                if t in eos:
                    break
            rows.append(kept)
        return rows

    with torch.inference_mode():
        run(prompts[:args.batch])  # warm-up
        sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        done = []
        for i in range(0, len(prompts), args.batch):
            done += run(prompts[i:i + args.batch])
        sync()
        seconds = time.perf_counter() - start
    with open(args.out, "w") as f:
        for i, tokens in enumerate(done):
            f.write(json.dumps({"index": i, "completion_tokens": tokens}) + "\n")
    new = sum(len(t) for t in done)
    print(f"hf: {new} new tokens in {seconds:.3f} s, {new / seconds:.1f} tokens/s "
          f"(batch {args.batch}, transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
