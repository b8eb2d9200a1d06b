#!/usr/bin/env python3
"""Writes tests/fixtures/hf_matrix/<case>/: tiny models saved by transformers 5 itself, with its loss.

Each case is a tiny model built with transformers' own classes (GPT2LMHeadModel, LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma3ForCausalLM),
seeded, saved with save_pretrained (fp32 or bf16, one file or sharded), in the transformers-5
config layout or rewritten into the 4.x layout, plus expected.json: the batch, transformers' loss
computed in fp64 (model.double()), a few logits rows, fp64 gradients of the small parameters and
the greedy continuation of a prompt (full forwards, checked equal to transformers' own generate with
its KV cache; Phi-3's longrope prompt is under its original context, so the continuation passes
it). Read by src/model/hf_matrix_test.cc, tests/cli/hf_matrix.cmake and
tests/cli/generate_longrope.py (CI needs no transformers).
The cases are a covering subset of family x layout x RoPE x sliding window x tied x dtype x files;
tests/fixtures/hf_matrix/README.md lists them.

  /usr/bin/python3 -m venv /work/venv-hfm
  /work/venv-hfm/bin/pip install torch transformers safetensors numpy   # plain PyPI; runs on CPU
  /work/venv-hfm/bin/python tools/golden/make_hf_matrix.py [--out DIR]   # about 10 s

Committed output was made with transformers 5.24.0 and torch 2.15.0 (PyPI wheel, run on CPU).
Running it twice gives identical files.
"""
import argparse
import copy
import json
import os
import shutil

import torch
import transformers
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3Config,
                          Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3TextConfig,
                          GPT2Config, SiglipVisionConfig,
                          GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "hf_matrix")

V, B, T = 67, 2, 16
SHARD = "16KB"  # small enough that every tiny model here is split over several files
LOGIT_ROWS = [(0, 0), (0, 9), (1, 4), (1, 15)]  # (batch, position) rows of logits recorded
PROMPT, NEW = 8, 8  # greedy continuation: NEW tokens after the first PROMPT tokens of batch row 0
# Cases whose greedy prompt is shorter. longrope: 5 tokens, under original_max_position_embeddings
# 8, so decoding crosses it (the forward that picks the 5th new token is the first past it). Chosen
# (of prompts 4-7) as the one whose tokens tell transformers' generate (re-encoding at the crossing)
# from a cache that keeps its short keys (checked below) and from the long factors throughout (the
# earlier KvDecoder, which picks 18 6 3 55 63 49 22 22).
GREEDY_PROMPT = {"phi3_longrope_untied_fp32_single_hf5": 5}
LLAMA = dict(vocab_size=V, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
             rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

# name: (family, config kwargs, rope_parameters or None, dtype, sharded, layout, seed)
CASES = {
    "gpt2_tied_fp32_single_hf4": ("gpt2", {}, None, "fp32", False, "hf4", 11),
    "gpt2_untied_bf16_sharded_hf5": ("gpt2", {"tie_word_embeddings": False}, None, "bf16", True,
                                     "hf5", 12),
    "llama_default_tied_fp32_single_hf5": ("llama", {"tie_word_embeddings": True},
                                           {"rope_type": "default", "rope_theta": 10000.0},
                                           "fp32", False, "hf5", 21),
    "llama_default_untied_bf16_sharded_hf4": ("llama", {}, {"rope_type": "default",
                                                            "rope_theta": 500000.0},
                                              "bf16", True, "hf4", 22),
    "llama_linear_untied_fp32_sharded_hf5": ("llama", {}, {"rope_type": "linear",
                                                           "rope_theta": 10000.0, "factor": 2.0},
                                             "fp32", True, "hf5", 23),
    # Dynamic NTK only differs from default past max_position_embeddings: 8 and 12 here, T = 16.
    "llama_dynamic_tied_bf16_single_hf4": ("llama", {"tie_word_embeddings": True,
                                                     "max_position_embeddings": 8},
                                           {"rope_type": "dynamic", "rope_theta": 10000.0,
                                            "factor": 2.0}, "bf16", False, "hf4", 24),
    "llama_yarn_untied_fp32_single_hf4": ("llama", {}, {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 8}, "fp32", False, "hf4", 25),
    "llama_llama3_tied_bf16_sharded_hf5": ("llama", {"tie_word_embeddings": True}, {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8}, "bf16", True, "hf5", 26),
    "mistral_sliding_untied_fp32_sharded_hf4": ("mistral", {"sliding_window": 5}, {
        "rope_type": "default", "rope_theta": 1000000.0}, "fp32", True, "hf4", 31),
    "mistral_sliding_yarn_tied_bf16_single_hf5": ("mistral", {
        "sliding_window": 6, "tie_word_embeddings": True}, {
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
        "original_max_position_embeddings": 8}, "bf16", False, "hf5", 32),
    "qwen2_sliding_untied_bf16_single_hf5": ("qwen2", {
        "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1,
        "num_hidden_layers": 3}, {"rope_type": "default", "rope_theta": 1000000.0}, "bf16",
        False, "hf5", 41),
    "qwen2_sliding_linear_tied_fp32_sharded_hf4": ("qwen2", {
        "use_sliding_window": True, "sliding_window": 5, "max_window_layers": 2,
        "num_hidden_layers": 3, "tie_word_embeddings": True}, {
        "rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0}, "fp32", True, "hf4", 42),
    "qwen2_dynamic_untied_fp32_single_hf5": ("qwen2", {"max_position_embeddings": 12}, {
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 3.0}, "fp32", False, "hf5", 43),
    "llama_yarn_untied_bf16_sharded_hf5": ("llama", {}, {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 8, "beta_fast": 16.0, "beta_slow": 2.0}, "bf16",
        True, "hf5", 27),
    # Qwen3: q_norm / k_norm over each head, head_dim given and unequal to hidden / heads (32 / 4).
    "qwen3_headdim12_untied_fp32_single_hf5": ("qwen3", {"head_dim": 12}, {
        "rope_type": "default", "rope_theta": 1000000.0}, "fp32", False, "hf5", 51),
    "qwen3_sliding_bias_tied_bf16_sharded_hf4": ("qwen3", {
        "head_dim": 16, "use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1,
        "num_hidden_layers": 3, "attention_bias": True, "tie_word_embeddings": True}, {
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
        "original_max_position_embeddings": 8}, "bf16", True, "hf4", 52),
    # Phi-3: fused qkv_proj and gate_up_proj. longrope with short / long factors (head_dim 8: 4
    # each); T = 16 > original_max_position_embeddings 8, so the long factors and the attention
    # factor sqrt(1 + ln(32 / 8) / ln 8) apply.
    "phi3_longrope_untied_fp32_single_hf5": ("phi3", {
        "original_max_position_embeddings": 8, "pad_token_id": 0}, {
        "rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.3, 1.7],
        "long_factor": [1.2, 1.9, 3.1, 5.3]}, "fp32", False, "hf5", 61),
    "phi3_sliding_tied_bf16_sharded_hf4": ("phi3", {
        "sliding_window": 5, "tie_word_embeddings": True, "pad_token_id": 0}, {
        "rope_type": "default", "rope_theta": 10000.0}, "bf16", True, "hf4", 62),
    # Gemma 3 (text): (1 + w) norms incl. q_norm / k_norm, post-attention / post-feedforward norms,
    # GeGLU, embeddings times sqrt(32), query_pre_attn_scalar 12 (not head_dim 16), layers 0 and 1
    # sliding (window 5) with their own RoPE base, layer 2 global with linear scaling.
    "gemma3_linear_tied_fp32_single_hf5": ("gemma3_text", {
        "head_dim": 16, "num_hidden_layers": 3, "query_pre_attn_scalar": 12, "sliding_window": 5,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "pad_token_id": 0}, {
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, "fp32", False, "hf5",
        71),
    "gemma3_untied_bf16_sharded_hf4": ("gemma3_text", {
        "head_dim": 16, "num_hidden_layers": 3, "query_pre_attn_scalar": 24, "sliding_window": 4,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "tie_word_embeddings": False, "attention_bias": True, "pad_token_id": 0}, {
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, "bf16", True, "hf4",
        72),
    # Gemma 3 multimodal (Gemma3ForConditionalGeneration, model_type gemma3): the language model
    # of gemma3_untied... inside it (text_config), beside a tiny SigLIP vision tower and projector
    # that ZeRO.cpp does not train and copies through on save; tied head, bf16, sharded.
    "gemma3mm_tied_bf16_sharded_hf5": ("gemma3", {
        "head_dim": 16, "num_hidden_layers": 3, "query_pre_attn_scalar": 12, "sliding_window": 5,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "pad_token_id": 0}, {
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, "bf16", True, "hf5",
        73),
    # Gemma 2: the Gemma 3 block without q_norm / k_norm, every other layer global, attention and
    # final-logit soft-capping (small caps, so that tanh bends the tiny model's scores and logits).
    "gemma2_softcap_tied_fp32_single_hf5": ("gemma2", {
        "head_dim": 16, "num_hidden_layers": 3, "query_pre_attn_scalar": 12, "sliding_window": 5,
        "attn_logit_softcapping": 1.5, "final_logit_softcapping": 2.0, "pad_token_id": 0}, {
        "rope_type": "default", "rope_theta": 10000.0}, "fp32", False, "hf5", 81),
    "gemma2_attncap_untied_bf16_sharded_hf4": ("gemma2", {
        "num_hidden_layers": 2, "head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 4,
        "attn_logit_softcapping": 3.0, "final_logit_softcapping": None,
        "tie_word_embeddings": False, "pad_token_id": 0}, {
        "rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, "bf16", True, "hf4", 82),
}

CLASSES = {"llama": (LlamaConfig, LlamaForCausalLM), "mistral": (MistralConfig, MistralForCausalLM),
           "qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM),
           "phi3": (Phi3Config, Phi3ForCausalLM), "gemma3_text": (Gemma3TextConfig, Gemma3ForCausalLM),
           "gemma2": (Gemma2Config, Gemma2ForCausalLM)}


def build(family, kwargs, rope, seed):
    """The model in fp32, seeded; norms and biases perturbed so their math is exercised."""
    torch.manual_seed(seed)
    if family == "gpt2":
        config = GPT2Config(vocab_size=V, n_positions=32, n_embd=24, n_layer=2, n_head=3, n_inner=48,
                            layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2, **kwargs)
        model = GPT2LMHeadModel(config)
    elif family == "gemma3":  # multimodal: the text model beside a tiny vision tower
        text = Gemma3TextConfig(**dict(LLAMA, **kwargs), rope_parameters=rope)
        vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, image_size=28, patch_size=14)
        config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                              boi_token_index=V - 3, eoi_token_index=V - 2,
                              image_token_index=V - 1)
        model = Gemma3ForConditionalGeneration(config)
    else:
        config_cls, model_cls = CLASSES[family]
        config = config_cls(**dict(LLAMA, **kwargs), rope_parameters=rope)
        model = model_cls(config)
    config._attn_implementation = "eager"
    # transformers' init (std 0.02) leaves attention almost uniform, so RoPE scaling and sliding
    # windows would move the loss by less than the 1e-6 under test. Re-drawn: matrices with std
    # 1/sqrt(fan_in), embeddings 0.3, norms 1 + N(0, 0.1), biases N(0, 0.02).
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 2 and ("wte" in name or "wpe" in name or "embed_tokens" in name):
                # Gemma scales its embeddings by sqrt(hidden) itself.
                gemma = family in ("gemma3_text", "gemma2", "gemma3")
                scale = 0.3 / (kwargs.get("hidden_size", 32) ** 0.5 if gemma else 1)
                p.copy_(scale * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                fan_in = p.shape[0] if family == "gpt2" else p.shape[1]  # GPT-2 Conv1D is [in, out]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            elif "norm" in name or "ln_" in name:  # Gemma's (1 + w) norms: w around 0
                zero = family in ("gemma3_text", "gemma2", "gemma3")
                p.copy_((0 if zero else 1) + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return model.eval()


def greedy(model, prompt):
    """NEW greedy tokens after `prompt` (1, PROMPT), each from a full forward of the fp64 model, and
    the smallest gap between the chosen logit and the runner-up (so that fp32 agrees on each)."""
    ids, gap = prompt, float("inf")
    with torch.no_grad():
        for _ in range(NEW):
            top = model(input_ids=ids).logits[0, -1].topk(2)
            gap = min(gap, (top.values[0] - top.values[1]).item())
            ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
    return ids[0, prompt.shape[1]:].tolist(), gap


def generated(model, prompt):
    """NEW tokens of transformers' own generate (greedy, with its KV cache, no early stop at eos)
    after `prompt`. Phi-3 with longrope: Phi3ForCausalLM.prepare_inputs_for_generation drops the
    cache on the step whose sequence first passes original_max_position_embeddings, so that step
    re-encodes every position with the long factors; the tokens then equal greedy()'s."""
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=NEW, do_sample=False, use_cache=True)
    return out[0, prompt.shape[1]:].tolist()


def cache_kept(model, prompt):
    """NEW greedy tokens with the model driven by hand with its cache: every forward's table is
    that of its length, but cached keys keep the rotation they were given (no re-encoding)."""
    tokens = []
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        for _ in range(NEW):
            tokens.append(out.logits[0, -1].argmax().item())
            out = model(input_ids=torch.tensor([[tokens[-1]]]), cache=out.past_key_values,
                        use_cache=True)
    return tokens


def grads(model, input_ids, labels):
    """d(loss_fp64)/d(parameter) of the fp64 model for the parameters of one dimension (norm weights,
    biases, Qwen3's q_norm / k_norm) and row 0 of layer 0's q_proj and k_proj (nn.Linear (out, in),
    as ZeRO.cpp lays them out), to 10 significant digits: the backward checked without storing every
    gradient."""
    model.zero_grad()
    ce = torch.nn.functional.cross_entropy
    ce(model(input_ids=input_ids).logits.reshape(-1, V), labels.reshape(-1)).backward()
    rows = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
            "model.layers.0.self_attn.qkv_proj.weight")  # Phi-3: row 0 is q's
    out = []
    for name, p in model.named_parameters():
        # A multimodal model's language model, named as ZeRO.cpp names it; its vision tower and
        # projector are not trained.
        if "vision_tower" in name or "multi_modal_projector" in name:
            continue
        name = name.replace("model.language_model.", "model.")
        if p.dim() == 1 or name in rows:
            g = p.grad if p.dim() == 1 else p.grad[0]
            out.append({"name": name, "row": None if p.dim() == 1 else 0,
                        "values": [float(f"{v:.10g}") for v in g.tolist()]})
    return out


def to_hf4_layout(path):
    """Rewrites config.json as transformers 4.x writes it: rope_theta + rope_scaling, torch_dtype,
    no layer_types (4.x derives the sliding layers from sliding_window / max_window_layers)."""
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    layer_types = cfg.pop("layer_types", None)
    rope = cfg.pop("rope_parameters", None)
    if rope is not None and "full_attention" in rope:
        # Gemma 3: rope_theta / rope_scaling are the global layers', rope_local_base_freq the
        # sliding layers' base; every sliding_window_pattern-th layer is global.
        full = dict(rope["full_attention"])
        cfg["rope_theta"] = full.pop("rope_theta")
        cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        cfg["rope_scaling"] = None if full["rope_type"] == "default" else full
        cfg["sliding_window_pattern"] = layer_types.index("full_attention") + 1
        rope = None
    if rope is not None:
        rope = dict(rope)
        cfg["rope_theta"] = rope.pop("rope_theta")
        if rope["rope_type"] == "default":
            cfg["rope_scaling"] = None
        else:
            if "original_max_position_embeddings" in cfg and rope["rope_type"] in ("yarn", "llama3"):
                rope.setdefault("original_max_position_embeddings",
                                cfg.pop("original_max_position_embeddings"))
            cfg["rope_scaling"] = rope
    with open(cfg_path, "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--only", help="write only this case")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    g = torch.Generator().manual_seed(4321)
    seq = torch.randint(0, V, (B, T + 1), generator=g)  # the batch, the same for every case
    input_ids, labels = seq[:, :T], seq[:, 1:]

    for name, (family, kwargs, rope, dtype, sharded, layout, seed) in CASES.items():
        if args.only and name != args.only:
            continue
        model = build(family, kwargs, rope, seed)
        path = os.path.join(args.out, name)
        shutil.rmtree(path, ignore_errors=True)
        shard = SHARD if sharded else "50GB"
        if dtype == "bf16":
            # The weights become exactly bf16 values (the reference runs on them); a bf16 copy is
            # saved, so the fp32 model keeps its fp32 RoPE buffers for the check below.
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(p.bfloat16().float())
            copy.deepcopy(model).to(torch.bfloat16).save_pretrained(path, max_shard_size=shard)
        else:
            model.save_pretrained(path, max_shard_size=shard)
        if layout == "hf4":
            to_hf4_layout(path)
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        assert (len(files) > 1) == sharded, (name, files)

        # Reference: the fp64 model's logits and their mean cross-entropy against the next tokens.
        # transformers' own loss (labels shifted inside) upcasts the logits to fp32 only, so it
        # is checked against that within fp32 rounding. The batch has T + 1 tokens; logits at the
        # last one are not counted.
        # The reference model is the saved directory loaded back by transformers, so the 4.x
        # rewrite is read by transformers too.
        ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                   attn_implementation="eager").eval()
        # The reference runs T tokens, as the C++ side does (dynamic RoPE depends on the length).
        # Checked once on T + 1 tokens: transformers' own loss, which shifts the labels inside and
        # upcasts the logits to fp32 only, is this cross-entropy within fp32 rounding.
        ce = torch.nn.functional.cross_entropy
        with torch.no_grad():
            loss32 = ce(ref(input_ids=input_ids).logits.reshape(-1, V), labels.reshape(-1)).item()
            ref = ref.double()
            logits = ref(input_ids=input_ids).logits
            loss = ce(logits.reshape(-1, V), labels.reshape(-1))
            # Last: dynamic RoPE keeps the frequencies of the longest sequence seen.
            longer = ref(input_ids=seq, labels=seq)
            mine = ce(longer.logits[:, :T].reshape(-1, V), labels.reshape(-1)).item()
            assert abs(mine / longer.loss.item() - 1) < 1e-6, (name, mine, longer.loss.item())
            # The model as built gives the same logits (not so after .to(bfloat16): that also
            # rounds the RoPE inv_freq buffer, which a loaded model computes afresh in fp32).
            built = model.double()(input_ids=input_ids).logits
            assert (built - logits).abs().max().item() < 1e-9 * logits.abs().max().item(), name
        # Each on a fresh fp64 model: dynamic RoPE keeps the frequencies of the longest sequence seen.
        def fresh():
            return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                        attn_implementation="eager").eval().double()
        prompt = input_ids[:1, :GREEDY_PROMPT.get(name, PROMPT)]
        tokens, gap = greedy(fresh(), prompt)
        assert gap > 1e-3, (name, gap)
        # What KV-cached decoding is held to is transformers' generate: the same tokens, but where
        # dynamic RoPE keeps the rotation of keys cached before its frequencies grew.
        if rope is None or rope.get("rope_type") != "dynamic":
            assert generated(fresh(), prompt) == tokens, name
        if rope is not None and rope.get("rope_type") == "longrope":
            orig = kwargs["original_max_position_embeddings"]
            assert prompt.shape[1] <= orig < prompt.shape[1] + NEW, name  # decoding crosses it
            assert cache_kept(fresh(), prompt) != tokens, name  # re-encoding shows in the tokens
        grads_fp64 = grads(fresh(), input_ids, labels)
        expected = {
            "case": name, "family": family, "layout": layout, "weights_dtype": dtype,
            "sharded": sharded, "files": files, "transformers": transformers.__version__,
            "input_ids": input_ids.tolist(), "labels": labels.tolist(),
            "loss_fp64": loss.item(), "loss_fp32": loss32,
            "logits_fp64": [{"b": b, "t": t, "values": logits[b, t].tolist()}
                            for b, t in LOGIT_ROWS],
            "greedy": {"prompt": prompt[0].tolist(), "tokens": tokens, "min_gap": gap},
            "grads_fp64": grads_fp64,
        }
        with open(os.path.join(path, "expected.json"), "w") as f:
            f.write(json.dumps(expected, indent=1) + "\n")
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        print(f"{name}: loss fp64 {loss.item():.10f} (fp32 rel {abs(loss32 / loss.item() - 1):.1e}),"
              f" {len(files)} file(s), {size} bytes")


if __name__ == "__main__":
    main()
