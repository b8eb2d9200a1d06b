#!/usr/bin/env python3
"""Makes a tiny HF model directory with a BPE tokenizer (issue 12 item 5): the golden gpt2_tiny
weights with the (tied) embedding grown to VOCAB rows, deterministic, plus the tokenizer files of a
tokenizer fixture. Usage: bpe_model.py GOLDEN_DIR TOKENIZER_DIR VOCAB DST_DIR"""
import json
import os
import shutil
import struct
import sys

src, tok, vocab, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
shutil.rmtree(dst, ignore_errors=True)
os.makedirs(dst)
with open(os.path.join(src, "config.json")) as f:
    config = json.load(f)
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    blob = f.read()
(header_len,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8 : 8 + header_len])
base = 8 + header_len
old_vocab, n_embd = config["vocab_size"], config["n_embd"]
tensors = {}
for name, t in header.items():
    if name == "__metadata__":
        continue
    begin, end = t["data_offsets"]
    data = blob[base + begin : base + end]
    shape = t["shape"]
    if name.endswith("wte.weight"):
        row = 4 * n_embd
        # Row r copies row r % old_vocab, sign-flipped on odd wraps, so new tokens differ.
        rows = []
        for r in range(vocab):
            src_row = data[(r % old_vocab) * row : (r % old_vocab + 1) * row]
            if (r // old_vocab) % 2 == 1:
                vals = struct.unpack("<%df" % n_embd, src_row)
                src_row = struct.pack("<%df" % n_embd, *[-v for v in vals])
            rows.append(src_row)
        data = b"".join(rows)
        shape = [vocab, n_embd]
    tensors[name] = (t["dtype"], shape, data)
out_header, offset, chunks = {}, 0, []
for name, (dtype, shape, data) in tensors.items():
    out_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
    offset += len(data)
    chunks.append(data)
header_bytes = json.dumps(out_header).encode()
header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(chunks))
config["vocab_size"] = vocab
with open(os.path.join(dst, "config.json"), "w") as f:
    json.dump(config, f, indent=1)
for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"):
    if os.path.exists(os.path.join(tok, name)):
        shutil.copy(os.path.join(tok, name), dst)
