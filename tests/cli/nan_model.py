#!/usr/bin/env python3
"""Copies an HF model directory with every floating-point weight set to NaN (issue 13 item 13).
Usage: nan_model.py SRC_DIR DST_DIR"""
import json
import os
import shutil
import struct
import sys

src, dst = sys.argv[1], sys.argv[2]
shutil.rmtree(dst, ignore_errors=True)
os.makedirs(dst)
shutil.copy(os.path.join(src, "config.json"), dst)
with open(os.path.join(src, "model.safetensors"), "rb") as f:
    blob = bytearray(f.read())
(header_len,) = struct.unpack("<Q", blob[:8])
header = json.loads(blob[8 : 8 + header_len])
base = 8 + header_len
nan = {"F32": struct.pack("<f", float("nan")), "BF16": b"\xc0\x7f", "F16": b"\x00\x7e"}
for name, t in header.items():
    if name == "__metadata__" or t["dtype"] not in nan:
        continue
    begin, end = t["data_offsets"]
    word = nan[t["dtype"]]
    blob[base + begin : base + end] = word * ((end - begin) // len(word))
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(blob)
