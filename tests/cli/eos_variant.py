#!/usr/bin/env python3
"""Copies a model directory with tokenizer_config.json's eos_token set to the token string of id
TOKEN_ID (tokenizer.json's model vocabulary), so a test can make generation meet "EOS".
Usage: eos_variant.py SRC_DIR DST_DIR TOKEN_ID"""
import json
import os
import shutil
import sys

src, dst, token_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
with open(os.path.join(dst, "tokenizer.json")) as f:
    vocab = json.load(f)["model"]["vocab"]
token = next(t for t, i in vocab.items() if i == token_id)
path = os.path.join(dst, "tokenizer_config.json")
with open(path) as f:
    config = json.load(f)
config["eos_token"] = token
with open(path, "w") as f:
    json.dump(config, f, indent=1)
