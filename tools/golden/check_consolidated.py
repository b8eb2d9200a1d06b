#!/usr/bin/python3
"""Proves once that `zero ckpt to-fp32` output loads in PyTorch and equals the checkpoint's weights.

Usage: /usr/bin/python3 tools/golden/check_consolidated.py ZERO_BINARY CKPT_DIR

Runs `zero ckpt to-fp32 CKPT_DIR TMP --max_shard_size 20KB` (so the sharded + index form is
exercised), loads every output file into torch tensors with a minimal safetensors parser (Debian's
python3-torch has no safetensors package), and compares each tensor bitwise with an independent
consolidation done here from the rank files and the manifest's ranges (GPT-2 Conv1D weights
transposed to [in, out]; a tied head absent). Needs only python3-torch.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = bytearray(blob[8 + n:])
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        t = torch.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]) if end > b else \
            torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def main():
    zero, ckpt = sys.argv[1], sys.argv[2]
    tag_dir = ckpt
    if os.path.exists(os.path.join(ckpt, "latest")):
        tag_dir = os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip())
    manifest = json.load(open(os.path.join(tag_dir, "manifest.json")))
    model_type = manifest["model_config"].get("model_type")

    # Independent consolidation: unit-flat fp32 buffers from the rank files' ranges.
    units = manifest["shard_layout"]["units"]
    flat = [torch.zeros(u["numel"], dtype=torch.float32) for u in units]
    for f in manifest["files"]:
        tensors = read_safetensors(os.path.join(tag_dir, f["name"]))
        for u, (b, n) in enumerate(f["ranges"]):
            if n:
                flat[u][b:b + n] = tensors[units[u]["name"] + ".master"]
    want = {}
    for u, unit in enumerate(units):
        for p in unit["params"]:
            t = flat[u][p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
            if model_type == "gpt2" and p["name"].endswith(CONV1D):
                t = t.t().contiguous()
            want[p["name"]] = t

    with tempfile.TemporaryDirectory() as out:
        subprocess.run([zero, "ckpt", "to-fp32", ckpt, out, "--max_shard_size", "20KB"], check=True)
        index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        got = {}
        for file in sorted(set(index["weight_map"].values())):
            got.update(read_safetensors(os.path.join(out, file)))
        config = json.load(open(os.path.join(out, "config.json")))

    assert set(got) == set(want), (sorted(set(got) ^ set(want)))
    for name, t in want.items():
        g = got[name]
        assert g.dtype == torch.float32, name
        assert g.shape == t.shape, (name, g.shape, t.shape)
        assert torch.equal(g.view(torch.int32), t.view(torch.int32)), name  # bitwise
    if config.get("tie_word_embeddings", True):
        assert not any("lm_head" in n for n in got), "tied head written twice"
    n = sum(t.numel() for t in got.values())
    print("OK: %d tensors, %d parameters, fp32, bitwise equal; torch %s; %s"
          % (len(got), n, torch.__version__, model_type))


if __name__ == "__main__":
    main()
