"""Writes an HF Llama directory (config.json, bf16 safetensors shards with an index) of a given
shape with arbitrary weights, fast (a random block tiled, ~disk speed), for timing ZeRO-Inference's
weight stream where no real checkpoint is on the machine (tools/gpu/inference_stream.sh). The tokens
it generates mean nothing; the bytes per forward are those of the real model. numpy only.

  make_random_llama.py OUT_DIR {llama-1b|llama-8b|llama-13b|llama-tiny}
"""

import json
import os
import struct
import sys

import numpy as np

SHAPES = {
    # vocab, hidden, layers, heads, kv heads, intermediate, context, rope theta
    "llama-1b": (128256, 2048, 16, 32, 8, 8192, 8192, 500000.0),  # Llama-3.2-1B, lm_head untied
    "llama-8b": (128256, 4096, 32, 32, 8, 14336, 8192, 500000.0),  # Meta-Llama-3-8B
    "llama-13b": (32000, 5120, 40, 40, 40, 13824, 4096, 10000.0),  # Llama-2-13b
    "llama-tiny": (256, 64, 4, 4, 2, 172, 128, 10000.0),  # a plumbing check on a CPU
}
SHARD_BYTES = 4 << 30


def tensors(v, c, layers, heads, kv, f):
    d = c // heads
    yield "model.embed_tokens.weight", (v, c), False
    for i in range(layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (c,), True
        yield p + "self_attn.q_proj.weight", (heads * d, c), False
        yield p + "self_attn.k_proj.weight", (kv * d, c), False
        yield p + "self_attn.v_proj.weight", (kv * d, c), False
        yield p + "self_attn.o_proj.weight", (c, heads * d), False
        yield p + "post_attention_layernorm.weight", (c,), True
        yield p + "mlp.gate_proj.weight", (f, c), False
        yield p + "mlp.up_proj.weight", (f, c), False
        yield p + "mlp.down_proj.weight", (c, f), False
    yield "model.norm.weight", (c,), True
    yield "lm_head.weight", (v, c), False


def bf16(x):
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def main():
    out, name = sys.argv[1], sys.argv[2]
    v, c, layers, heads, kv, f, ctx, theta = SHAPES[name]
    os.makedirs(out, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": v,
        "hidden_size": c, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "intermediate_size": f, "max_position_embeddings": ctx,
        "rope_theta": theta, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
    rng = np.random.default_rng(0)
    block = bf16(rng.normal(0.0, 0.02, size=1 << 22))  # tiled into every matrix
    one = bf16(np.ones(1))[0]
    shards, current, size = [], [], 0
    for t in tensors(v, c, layers, heads, kv, f):
        nbytes = int(np.prod(t[1])) * 2
        if current and size + nbytes > SHARD_BYTES:
            shards.append(current)
            current, size = [], 0
        current.append(t)
        size += nbytes
    shards.append(current)
    weight_map, total = {}, 0
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for tname, shape, _ in shard:
            n = int(np.prod(shape)) * 2
            header[tname] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[tname] = fname
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(out, fname), "wb") as fh:
            fh.write(struct.pack("<Q", len(text)))
            fh.write(text)
            for i, (tname, shape, norm) in enumerate(shard):
                numel = int(np.prod(shape))
                if norm:
                    fh.write(np.full(numel, one, dtype=np.uint16).tobytes())
                    continue
                start = (i * 7919) % block.size  # a different phase per tensor
                written = 0
                while written < numel:
                    piece = block[start:start + min(block.size - start, numel - written)]
                    fh.write(piece.tobytes())
                    written += piece.size
                    start = 0
        total += offset
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=1)
    print(f"{out}: {name}, {total} bytes of bf16 weights in {len(shards)} shards")


if __name__ == "__main__":
    main()
