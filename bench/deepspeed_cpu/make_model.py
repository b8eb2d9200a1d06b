#!/usr/bin/env python3
"""Writes the one model and token stream both systems train in bench/deepspeed_cpu:
an HF GPT-2 (4 layers, 256 wide, 4 heads, GPT-2's 50257-token vocabulary, no dropout) made with
transformers from a fixed seed and saved as safetensors, and a raw uint16 token file (nanoGPT .bin,
the format `zero train` reads by default) holding the bytes of examples/data/kjv.txt as token ids.

Usage: make_model.py --out DIR [--text FILE] [--seed 1234]
Writes DIR/model/{config.json,model.safetensors} and DIR/tokens.bin.
"""
import argparse
import os

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                   "examples", "data", "kjv.txt"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--positions", type=int, default=1024)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=50257, n_positions=args.positions, n_embd=args.hidden,
                        n_layer=args.layers, n_head=args.heads, activation_function="gelu_new",
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        tie_word_embeddings=True)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(os.path.join(args.out, "model"), safe_serialization=True)

    # Bytes of English text as ids 0..255 of the 50257-token vocabulary: a stream with structure,
    # so the loss falls and the curves are worth comparing, without a tokenizer download.
    with open(args.text, "rb") as f:
        tokens = np.frombuffer(f.read(), dtype=np.uint8).astype("<u2")
    tokens.tofile(os.path.join(args.out, "tokens.bin"))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters -> {args.out}/model; tokens: {tokens.size} -> "
          f"{args.out}/tokens.bin")


if __name__ == "__main__":
    main()
