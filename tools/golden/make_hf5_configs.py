#!/usr/bin/env python3
"""Writes tests/fixtures/models/hf5/*/{config,generation_config}.json with transformers 5.

These are config.json files as current transformers' save_pretrained writes them (rope_parameters,
dtype, layer_types), read by src/model/model_config_test.cc. Needs only the transformers package
(no torch):

  /usr/bin/python3 -m venv --system-site-packages /work/venv-hf
  /work/venv-hf/bin/pip install transformers==5.24.0
  /work/venv-hf/bin/python tools/golden/make_hf5_configs.py

Committed output was made with transformers 5.24.0.
"""
import os

from transformers import GenerationConfig, GPT2Config, LlamaConfig, MistralConfig, Qwen2Config

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "models", "hf5")
SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def save(name, cfg):
    path = os.path.join(OUT, name)
    cfg.save_pretrained(path)
    GenerationConfig.from_model_config(cfg).save_pretrained(path)


def main():
    save("llama-default-bf16", LlamaConfig(**SMALL, dtype="bfloat16", rope_parameters={
        "rope_type": "default", "rope_theta": 500000.0}))
    save("llama-linear", LlamaConfig(**SMALL, rope_parameters={
        "rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}))
    save("llama-dynamic", LlamaConfig(**SMALL, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}))
    save("llama-yarn", LlamaConfig(**SMALL, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 32}))
    save("llama-llama3", LlamaConfig(**SMALL, tie_word_embeddings=True, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32}))
    save("mistral-sliding", MistralConfig(**SMALL, sliding_window=16, rope_parameters={
        "rope_type": "default", "rope_theta": 1000000.0}))
    save("qwen2-sliding", Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=16,
                                      max_window_layers=1, rope_parameters={
                                          "rope_type": "default", "rope_theta": 1000000.0}))
    save("gpt2", GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                            bos_token_id=0, eos_token_id=0))


if __name__ == "__main__":
    main()
