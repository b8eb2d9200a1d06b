#!/usr/bin/env python3
"""Makes a tiny HF GPT-2 directory that carries a tokenizer (issue 12): SRC_DIR's config and
weights with the vocabulary resized to the tokenizer's (extra wte rows copy earlier rows), plus
TOKENIZER_DIR's tokenizer.json and tokenizer_config.json. Standard library only.
Usage: text_model.py SRC_DIR TOKENIZER_DIR DST_DIR"""
import json
import os
import shutil
import struct
import sys

src, tok_dir, dst = sys.argv[1:4]
shutil.rmtree(dst, ignore_errors=True)
os.makedirs(dst)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(tok_dir, name), dst)
with open(os.path.join(tok_dir, "tokenizer.json")) as f:
    tok = json.load(f)
ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
vocab = max(ids) + 1

with open(os.path.join(src, "config.json")) as f:
    config = json.load(f)
old_vocab = config["vocab_size"]
config["vocab_size"] = vocab
with open(os.path.join(dst, "config.json"), "w") as f:
    json.dump(config, f, indent=1)

with open(os.path.join(src, "model.safetensors"), "rb") as f:
    blob = f.read()
(header_len,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8 : 8 + header_len])
base = 8 + header_len
tensors = {}
for name, t in header.items():
    if name == "__metadata__":
        continue
    begin, end = t["data_offsets"]
    data = blob[base + begin : base + end]
    shape = t["shape"]
    if name.endswith("wte.weight"):
        row = len(data) // old_vocab
        data = b"".join(data[(i % old_vocab) * row : (i % old_vocab + 1) * row] for i in range(vocab))
        shape = [vocab, shape[1]]
    tensors[name] = (t["dtype"], shape, data)
out_header, offset, payload = {"__metadata__": {"format": "pt"}}, 0, []
for name in sorted(tensors):
    dtype, shape, data = tensors[name]
    out_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
    offset += len(data)
    payload.append(data)
h = json.dumps(out_header).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(payload))
