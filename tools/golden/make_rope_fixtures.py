#!/usr/bin/env python3
"""Writes tests/fixtures/golden/rope_hf5.json: transformers' own RoPE frequencies and cos/sin.

For each config in tests/fixtures/models/hf5/llama-*, runs transformers' ROPE_INIT_FUNCTIONS (the
code LlamaRotaryEmbedding calls) and forms cos/sin the way LlamaRotaryEmbedding.forward does
(float32 angle = position * inv_freq, times attention_scaling). Read by src/kernels/rope/rope_test.cc.

transformers 5 disables PyTorch < 2.6, and Debian ships torch 1.13, so the module's `torch` name is
set by hand; the functions used only need torch.arange / pow / clamp, which 1.13 has.

  apt-get install -y python3-torch   # or tools/install_deps.sh --with-torch
  /work/venv-hf/bin/python tools/golden/make_rope_fixtures.py   # venv: transformers==5.24.0
"""
import json
import os

import torch
import transformers.modeling_rope_utils as rope_utils
from transformers import LlamaConfig

rope_utils.torch = torch  # see the docstring

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CONFIGS = os.path.join(ROOT, "tests", "fixtures", "models", "hf5")
OUT = os.path.join(ROOT, "tests", "fixtures", "golden", "rope_hf5.json")
POSITIONS = [0, 1, 7, 31, 100, 127, 199]


def case(name, seq_len=None):
    config = LlamaConfig.from_pretrained(os.path.join(CONFIGS, name))
    rope_type = config.rope_parameters["rope_type"]
    kwargs = {"seq_len": seq_len} if seq_len is not None else {}
    if rope_type == "default":
        # "default" lives in LlamaRotaryEmbedding.compute_default_rope_parameters (modeling_llama,
        # which needs torch >= 2.6); it is linear scaling with factor 1.
        config.rope_parameters = dict(config.rope_parameters, rope_type="linear", factor=1.0)
        inv_freq, scaling = rope_utils.ROPE_INIT_FUNCTIONS["linear"](config, "cpu")
    else:
        inv_freq, scaling = rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", **kwargs)
    pos = torch.tensor(POSITIONS, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq.float()[None, :]
    return {
        "config": name,
        "seq_len": seq_len or 0,
        "rope_type": rope_type,
        "inv_freq": [float(x) for x in inv_freq],
        "attention_scaling": float(scaling),
        "positions": POSITIONS,
        "cos": [[float(x) for x in row] for row in (freqs.cos() * scaling)],
        "sin": [[float(x) for x in row] for row in (freqs.sin() * scaling)],
    }


def main():
    cases = [case("llama-default-bf16"), case("llama-linear"), case("llama-dynamic", 100),
             case("llama-dynamic", 200), case("llama-yarn"), case("llama-llama3")]
    with open(OUT, "w") as f:
        json.dump({"transformers": __import__("transformers").__version__, "cases": cases}, f,
                  indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
