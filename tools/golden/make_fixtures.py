#!/usr/bin/python3
"""Generates the golden fixtures in tests/fixtures/golden/ that the C++ engine is tested against.

Plain PyTorch (no transformers): tiny GPT-2 and Llama written here with Hugging Face semantics and
parameter names. Run with Debian's python (torch CPU + numpy):  /usr/bin/python3 tools/golden/make_fixtures.py
See tools/golden/README.md (when to regenerate) and tests/fixtures/golden/README.md (what each file holds).
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "golden")

# ----------------------------------------------------------------------------------------------
# safetensors writer: u64 LE header length, JSON header padded with spaces to a multiple of 8,
# then the raw little-endian data of each tensor in header order.


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype == torch.float32:
            dtype, data = "F32", t.numpy().astype("<f4").tobytes()
        elif t.dtype in (torch.int32, torch.int64):
            dtype, data = "I32", t.to(torch.int32).numpy().astype("<i4").tobytes()
        else:
            raise ValueError(f"{name}: unsupported dtype {t.dtype}")
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):  # used only to self-check the writer
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = {"F32": "<f4", "I32": "<i4"}[info["dtype"]]
        out[name] = torch.from_numpy(np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).copy()).reshape(info["shape"])
    return out


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# Models: functional forward over a {HF name: tensor} dict. x_BTC legend: B batch, T time,
# C channels, H heads, D head_dim, V vocab.

GPT2_CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 67, "n_positions": 16,
    "n_embd": 24, "n_layer": 2, "n_head": 3, "n_inner": None, "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
    "attn_pdrop": 0.0, "scale_attn_weights": True, "tie_word_embeddings": True, "torch_dtype": "float32",
}

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 67, "hidden_size": 32,
    "intermediate_size": 44, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "hidden_act": "silu", "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False, "attention_bias": False,
    "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02, "torch_dtype": "float32",
}

LLAMA3_CONFIG = dict(LLAMA_CONFIG, tie_word_embeddings=True, rope_scaling={
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8})

# transformers-5 layout (rope_parameters, dtype): Mistral with a sliding window of 5 (T = 16, so
# most rows are windowed), RoPE yarn (cos/sin scaled by its attention factor).
MISTRAL_SLIDING_CONFIG = {k: v for k, v in LLAMA_CONFIG.items()
                          if k not in ("rope_theta", "rope_scaling", "torch_dtype", "attention_bias",
                                       "mlp_bias")}
MISTRAL_SLIDING_CONFIG.update(architectures=["MistralForCausalLM"], model_type="mistral",
                              sliding_window=5, dtype="float32",
                              rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0,
                                               "factor": 4.0, "original_max_position_embeddings": 8})

# Qwen2, 4.x layout: q/k/v biases, sliding window 4 on layers >= max_window_layers (= 1) only.
QWEN2_SLIDING_CONFIG = {k: v for k, v in LLAMA_CONFIG.items()
                        if k not in ("attention_bias", "mlp_bias")}
QWEN2_SLIDING_CONFIG.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                            rope_theta=1000000.0, use_sliding_window=True, sliding_window=4,
                            max_window_layers=1)

# GPT-2 with scale_attn_by_inverse_layer_idx (layer i's scores divided by i + 1).
GPT2_BY_LAYER_CONFIG = dict(GPT2_CONFIG, scale_attn_by_inverse_layer_idx=True,
                            reorder_and_upcast_attn=True)


def causal_attention(q_BHTD, k_BHTD, v_BHTD, window=0, divisor=1.0):
    """HF masks: causal; with a sliding window also keys with t - s >= window (Mistral's
    sliding_window_causal). divisor: GPT-2 scale_attn_by_inverse_layer_idx's extra layer_idx + 1."""
    T, D = q_BHTD.shape[-2], q_BHTD.shape[-1]
    att_BHTT = (q_BHTD @ k_BHTD.transpose(-1, -2)) / math.sqrt(D)
    if divisor != 1.0:
        att_BHTT = att_BHTT / divisor
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    if window:
        mask = mask & ~torch.ones(T, T, dtype=torch.bool).tril(-window)
    att_BHTT = att_BHTT.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return att_BHTT @ v_BHTD


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_forward(p, cfg, idx_BT):
    B, T = idx_BT.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    D, eps = C // H, cfg["layer_norm_epsilon"]
    pre = "transformer."
    x_BTC = p[pre + "wte.weight"][idx_BT] + p[pre + "wpe.weight"][:T]
    ln = lambda x, n: F.layer_norm(x, (C,), p[n + ".weight"], p[n + ".bias"], eps)
    conv1d = lambda x, n: x @ p[n + ".weight"] + p[n + ".bias"]  # Conv1D: weight (in, out)
    for i in range(cfg["n_layer"]):
        h = f"{pre}h.{i}."
        qkv_BT3C = conv1d(ln(x_BTC, h + "ln_1"), h + "attn.c_attn")
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv_BT3C.split(C, dim=-1))
        divisor = float(i + 1) if cfg.get("scale_attn_by_inverse_layer_idx") else 1.0
        y_BTC = causal_attention(q, k, v, divisor=divisor).transpose(1, 2).reshape(B, T, C)
        x_BTC = x_BTC + conv1d(y_BTC, h + "attn.c_proj")
        m_BT4C = gelu_new(conv1d(ln(x_BTC, h + "ln_2"), h + "mlp.c_fc"))
        x_BTC = x_BTC + conv1d(m_BT4C, h + "mlp.c_proj")
    x_BTC = ln(x_BTC, pre + "ln_f")
    return x_BTC @ p[pre + "wte.weight"].t()  # tied lm_head


def rope_params(cfg):
    """(theta, scaling dict or None) from either layout."""
    if "rope_parameters" in cfg:
        rp = dict(cfg["rope_parameters"])
        theta = rp.pop("rope_theta")
        return theta, (None if rp["rope_type"] == "default" else rp)
    return cfg["rope_theta"], cfg["rope_scaling"]


def yarn_inv_freq(cfg, theta, rs, dtype):
    """transformers' _compute_yarn_parameters (beta_fast 32, beta_slow 1, truncate), re-derived."""
    D, factor, orig = cfg["head_dim"], rs["factor"], rs["original_max_position_embeddings"]
    pos_freqs = theta ** (torch.arange(0, D, 2).to(dtype) / D)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    corr = lambda rot: (D * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))
    low, high = max(math.floor(corr(32)), 0), min(math.ceil(corr(1)), D - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(D // 2).to(dtype) - low) / (high - low)).clamp(0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq, 0.1 * math.log(factor) + 1.0


def llama_inv_freq(cfg, dtype):
    D = cfg["head_dim"]
    theta, rs = rope_params(cfg)
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(dtype) / D))
    if rs is None:
        return inv_freq
    assert rs["rope_type"] == "llama3"
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_len / lo, old_len / hi
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_forward(p, cfg, idx_BT):
    B, T = idx_BT.shape
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    dtype = p["model.embed_tokens.weight"].dtype

    def rms(x, n):
        xf = x.float() if dtype == torch.float32 else x  # HF: computed in fp32
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return p[n + ".weight"] * xf.to(dtype)

    def lin(x, n):  # nn.Linear: weight (out, in), optional bias
        y = x @ p[n + ".weight"].t()
        return y + p[n + ".bias"] if n + ".bias" in p else y

    theta, rs = rope_params(cfg)
    scale = 1.0
    if rs is not None and rs["rope_type"] == "yarn":
        inv_freq, scale = yarn_inv_freq(cfg, theta, rs, dtype)
    else:
        inv_freq = llama_inv_freq(cfg, dtype)
    freqs_TD2 = torch.arange(T, dtype=torch.int64).to(dtype)[:, None] * inv_freq[None, :]
    emb_TD = torch.cat((freqs_TD2, freqs_TD2), dim=-1)
    cos_TD, sin_TD = emb_TD.cos() * scale, emb_TD.sin() * scale
    def window(i):  # HF: Mistral every layer; Qwen2 layers >= max_window_layers; or layer_types
        if "layer_types" in cfg:
            return cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else 0
        if cfg["model_type"] == "mistral":
            return cfg.get("sliding_window") or 0
        if cfg["model_type"] == "qwen2" and cfg.get("use_sliding_window"):
            return cfg["sliding_window"] if i >= cfg["max_window_layers"] else 0
        return 0

    rope = lambda x: x * cos_TD + rotate_half(x) * sin_TD
    x_BTC = p["model.embed_tokens.weight"][idx_BT]
    for i in range(cfg["num_hidden_layers"]):
        l = f"model.layers.{i}."
        hn = rms(x_BTC, l + "input_layernorm")
        q = rope(lin(hn, l + "self_attn.q_proj").view(B, T, H, D).transpose(1, 2))
        k = rope(lin(hn, l + "self_attn.k_proj").view(B, T, KV, D).transpose(1, 2))
        v = lin(hn, l + "self_attn.v_proj").view(B, T, KV, D).transpose(1, 2)
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))  # repeat_kv
        y_BTC = causal_attention(q, k, v, window=window(i)).transpose(1, 2).reshape(B, T, H * D)
        x_BTC = x_BTC + lin(y_BTC, l + "self_attn.o_proj")
        hn = rms(x_BTC, l + "post_attention_layernorm")
        m = F.silu(lin(hn, l + "mlp.gate_proj")) * lin(hn, l + "mlp.up_proj")
        x_BTC = x_BTC + lin(m, l + "mlp.down_proj")
    x_BTC = rms(x_BTC, "model.norm")
    head = "model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"
    return x_BTC @ p[head].t()


# ----------------------------------------------------------------------------------------------
# Init: the models' own schemes for weights, plus small random LayerNorm / bias values so that
# their gradients are exercised (a plain init would make them 1 and 0).


def gpt2_init(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    n = lambda shape, std, mean=0.0: torch.randn(*shape, generator=g) * std + mean
    C, V, L, Tm = cfg["n_embd"], cfg["vocab_size"], cfg["n_layer"], cfg["n_positions"]
    std, proj_std = cfg["initializer_range"], cfg["initializer_range"] / math.sqrt(2 * L)
    p = {"transformer.wte.weight": n((V, C), std), "transformer.wpe.weight": n((Tm, C), std)}
    for i in range(L):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[h + ln + ".weight"], p[h + ln + ".bias"] = n((C,), 0.1, 1.0), n((C,), 0.02)
        for name, (fi, fo), s in (("attn.c_attn", (C, 3 * C), std), ("attn.c_proj", (C, C), proj_std),
                                  ("mlp.c_fc", (C, 4 * C), std), ("mlp.c_proj", (4 * C, C), proj_std)):
            p[h + name + ".weight"], p[h + name + ".bias"] = n((fi, fo), s), n((fo,), 0.02)
    p["transformer.ln_f.weight"], p["transformer.ln_f.bias"] = n((C,), 0.1, 1.0), n((C,), 0.02)
    return p


def llama_init(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    n = lambda shape, std, mean=0.0: torch.randn(*shape, generator=g) * std + mean
    C, V, I, std = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], cfg["initializer_range"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    p = {"model.embed_tokens.weight": n((V, C), std)}
    for i in range(cfg["num_hidden_layers"]):
        l = f"model.layers.{i}."
        p[l + "input_layernorm.weight"] = n((C,), 0.1, 1.0)
        for name, shape in (("q_proj", (H * D, C)), ("k_proj", (KV * D, C)), ("v_proj", (KV * D, C)),
                            ("o_proj", (C, H * D))):
            p[l + "self_attn." + name + ".weight"] = n(shape, std)
        p[l + "post_attention_layernorm.weight"] = n((C,), 0.1, 1.0)
        for name, shape in (("gate_proj", (I, C)), ("up_proj", (I, C)), ("down_proj", (C, I))):
            p[l + "mlp." + name + ".weight"] = n(shape, std)
    p["model.norm.weight"] = n((C,), 0.1, 1.0)
    if not cfg["tie_word_embeddings"]:
        p["lm_head.weight"] = n((V, C), std)
    if cfg["model_type"] == "qwen2":  # drawn last, so the other models' streams are unchanged
        for i in range(cfg["num_hidden_layers"]):
            for name, size in (("q_proj", H * D), ("k_proj", KV * D), ("v_proj", KV * D)):
                p[f"model.layers.{i}.self_attn.{name}.bias"] = n((size,), 0.1)
    return p


# ----------------------------------------------------------------------------------------------
# Training pieces with DeepSpeed semantics.


def loss_fn(forward, p, cfg, x_BT, y_BT):
    logits_BTV = forward(p, cfg, x_BT)
    return F.cross_entropy(logits_BTV.reshape(-1, logits_BTV.shape[-1]), y_BT.reshape(-1)), logits_BTV


def fresh_params(init, dtype):
    return {k: v.detach().clone().to(dtype).requires_grad_(True) for k, v in init.items()}


class AdamW:
    """DeepSpeed FusedAdam / CPUAdam with adam_w_mode=True, bias_correction=True:
    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * ((m/bc1) / (sqrt(v/bc2) + eps) + wd p)."""

    def __init__(self, params, betas, eps, weight_decay):
        self.params, (self.b1, self.b2), self.eps, self.wd = params, betas, eps, weight_decay
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}
        self.step_count = 0

    @torch.no_grad()
    def step(self, lr):
        self.step_count += 1
        bc1, bc2 = 1 - self.b1 ** self.step_count, 1 - self.b2 ** self.step_count
        for k, p in self.params.items():
            g, m, v = p.grad, self.m[k], self.v[k]
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            wd = self.wd if p.dim() >= 2 else 0.0  # decay only matrices and embeddings
            update = (m / bc1) / ((v / bc2).sqrt() + self.eps) + wd * p
            p.sub_(lr * update)


def warmup_decay_lr(t, min_lr, max_lr, warmup, total, warmup_type="log"):
    """DeepSpeed WarmupDecayLR.get_lr() at last_batch_iteration t (t = -1 at construction)."""
    if t < 0:
        return min_lr
    warmup = max(2, warmup)
    if t < warmup:
        gamma = math.log(t + 1) / math.log(warmup) if warmup_type == "log" else t / warmup
    else:
        gamma = max(0.0, float(total - t) / float(max(1.0, total - warmup)))
    return min_lr + (max_lr - min_lr) * gamma


@torch.no_grad()
def clip_grads(params, max_norm):
    """DeepSpeed: global L2 norm in fp64 over all grads; scale by max_norm/(norm+1e-6) if < 1."""
    norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params.values()))
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for p in params.values():
            p.grad.mul_(coef)
    return norm


# ----------------------------------------------------------------------------------------------
# Fixtures.

SEED_INIT = {"gpt2_tiny": 1234, "llama_tiny": 2345, "llama_tiny_llama3": 3456,
             "mistral_tiny_sliding_yarn": 4567, "gpt2_tiny_by_layer": 5678,
             "qwen2_tiny_sliding": 6789}
SEED_BATCH = 4321
SEED_TOKENS = 5678
B, T = 2, 16
ADAM10 = {"lr": 1e-2, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "steps": 10}
CURVE = {"block_size": 16, "train_batch_size": 4, "steps": 60, "lr_scheduler": {
    "type": "WarmupDecayLR", "warmup_min_lr": 0.0, "warmup_max_lr": 3e-3, "warmup_num_steps": 10,
    "total_num_steps": 60, "warmup_type": "log"}, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
    "gradient_clipping": 1.0}
NUM_TOKENS = 3210  # S = floor(3209/16) = 200 samples < 60*4: the curve wraps (mod S) at step 51


def make_batch(vocab):
    g = torch.Generator().manual_seed(SEED_BATCH)
    seq = torch.randint(0, vocab, (B, T + 1), generator=g)
    return seq[:, :T].contiguous(), seq[:, 1:].contiguous()


def make_tokens(vocab):
    """Structured stream: fixed random 'words' (3..7 tokens) drawn at random, 5% noise tokens."""
    rng = np.random.default_rng(SEED_TOKENS)
    words = [rng.integers(0, vocab, size=rng.integers(3, 8)) for _ in range(12)]
    out = []
    while len(out) < NUM_TOKENS:
        for tok in words[rng.integers(0, len(words))]:
            out.append(int(rng.integers(0, vocab)) if rng.random() < 0.05 else int(tok))
    return np.array(out[:NUM_TOKENS], dtype="<u2")


def step_fixture(name, forward, cfg, init):
    x_BT, y_BT = make_batch(cfg["vocab_size"])
    p = fresh_params(init, torch.float32)
    loss, logits = loss_fn(forward, p, cfg, x_BT, y_BT)
    loss.backward()
    out = {"input_ids": x_BT.to(torch.int32), "labels": y_BT.to(torch.int32), "logits": logits.detach(),
           "loss": loss.detach().reshape(())}
    out.update({"grad." + k: v.grad for k, v in p.items()})
    # fp64 cross-check: tells how far fp32 rounding moves these numbers.
    p64 = fresh_params(init, torch.float64)
    loss64, logits64 = loss_fn(forward, p64, cfg, x_BT, y_BT)
    loss64.backward()
    max_rel = max(float((p[k].grad.double() - p64[k].grad).abs().max() / p64[k].grad.abs().max()) for k in p)
    print(f"  {name}: loss {loss.item():.6f} (ln V = {math.log(cfg['vocab_size']):.6f}); "
          f"fp32 vs fp64: logits {float((logits.double() - logits64).abs().max()):.2e}, grad rel {max_rel:.2e}")
    return out, loss.item()


def adamw10(forward, cfg, init):
    x_BT, y_BT = make_batch(cfg["vocab_size"])
    p = fresh_params(init, torch.float32)
    opt = AdamW(p, ADAM10["betas"], ADAM10["eps"], ADAM10["weight_decay"])
    losses = []
    for _ in range(ADAM10["steps"]):
        for v in p.values():
            v.grad = None
        loss, _ = loss_fn(forward, p, cfg, x_BT, y_BT)
        loss.backward()
        losses.append(loss.item())
        opt.step(ADAM10["lr"])
    return losses


def curve(forward, cfg, init, tokens, micro_batches, dtype=torch.float32):
    """One optimizer step = TBS samples split into `micro_batches` equal micro-batches, each loss
    scaled by 1/micro_batches before backward (DeepSpeed's GAS scaling)."""
    Tb, TBS, sch = CURVE["block_size"], CURVE["train_batch_size"], CURVE["lr_scheduler"]
    S = (len(tokens) - 1) // Tb
    data = torch.from_numpy(tokens.astype(np.int64))
    p = fresh_params(init, dtype)
    opt = AdamW(p, CURVE["betas"], CURVE["eps"], CURVE["weight_decay"])
    rows = []
    for s in range(CURVE["steps"]):
        samples = [(s * TBS + j) % S for j in range(TBS)]
        for v in p.values():
            v.grad = None
        mb = TBS // micro_batches
        step_loss = 0.0
        for m in range(micro_batches):
            gs = samples[m * mb:(m + 1) * mb]
            x = torch.stack([data[g * Tb:g * Tb + Tb] for g in gs])
            y = torch.stack([data[g * Tb + 1:g * Tb + Tb + 1] for g in gs])
            loss, _ = loss_fn(forward, p, cfg, x, y)
            (loss / micro_batches).backward()
            step_loss += loss.item() / micro_batches
        norm = clip_grads(p, CURVE["gradient_clipping"])
        # Step s+1 (1-based) runs with the lr written by the scheduler at last_batch_iteration s-1:
        # construction (t=-1) sets the lr of step 1, each successful step() then advances t by one.
        lr = warmup_decay_lr(s - 1, sch["warmup_min_lr"], sch["warmup_max_lr"], sch["warmup_num_steps"],
                             sch["total_num_steps"], sch["warmup_type"])
        opt.step(lr)
        rows.append({"step": s + 1, "loss": step_loss, "lr": lr, "grad_norm": norm, "samples": samples})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=OUT_DIR)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tokens = make_tokens(67)
    tokens.tofile(os.path.join(args.out, "tokens.bin"))
    print(f"tokens.bin: {len(tokens)} uint16 tokens, S = {(len(tokens) - 1) // CURVE['block_size']} samples")

    models = [("gpt2_tiny", gpt2_forward, GPT2_CONFIG, gpt2_init, True),
              ("llama_tiny", llama_forward, LLAMA_CONFIG, llama_init, True),
              ("llama_tiny_llama3", llama_forward, LLAMA3_CONFIG, llama_init, False),
              ("mistral_tiny_sliding_yarn", llama_forward, MISTRAL_SLIDING_CONFIG, llama_init, False),
              ("gpt2_tiny_by_layer", gpt2_forward, GPT2_BY_LAYER_CONFIG, gpt2_init, False),
              ("qwen2_tiny_sliding", llama_forward, QWEN2_SLIDING_CONFIG, llama_init, False)]
    summary = {}
    for name, forward, cfg, init_fn, full in models:
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        write_json(os.path.join(d, "config.json"), cfg)
        init = init_fn(cfg, SEED_INIT[name])
        write_safetensors(os.path.join(d, "model.safetensors"), init)
        back = read_safetensors(os.path.join(d, "model.safetensors"))
        assert all(torch.equal(back[k], init[k]) for k in init), "safetensors round trip"

        step, init_loss = step_fixture(name, forward, cfg, init)
        write_safetensors(os.path.join(d, "step.safetensors"), step)
        summary[name] = {"step_loss": init_loss}
        if not full:
            continue

        losses = adamw10(forward, cfg, init)
        write_json(os.path.join(d, "adamw10.json"), {
            "model": name, "init_seed": SEED_INIT[name], "batch": "step.safetensors input_ids/labels",
            "batch_seed": SEED_BATCH, **ADAM10, "lr_schedule": "constant", "gradient_clipping": None,
            "weight_decay_applies_to": "tensors with >= 2 dims", "loss_recorded": "before each update",
            "losses": losses})
        print(f"  adamw10: {losses[0]:.6f} -> {losses[-1]:.6f}")

        meta = {"model": name, "init_seed": SEED_INIT[name], "train_file": "tokens.bin",
                "tokens_seed": SEED_TOKENS, "num_tokens": int(len(tokens)),
                "num_samples": (len(tokens) - 1) // CURVE["block_size"], **CURVE,
                "weight_decay_applies_to": "tensors with >= 2 dims", "data_order": "sequential"}
        c1 = curve(forward, cfg, init, tokens, micro_batches=1)
        c2 = curve(forward, cfg, init, tokens, micro_batches=2)
        c64 = curve(forward, cfg, init, tokens, micro_batches=1, dtype=torch.float64)
        diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(c1, c2))
        ndiff = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(c1, c2))
        d64 = max(abs(a["loss"] - b["loss"]) for a, b in zip(c1, c64))
        assert diff < 5e-6 and ndiff < 1e-5, f"accumulation mismatch: loss {diff:.2e}, grad_norm {ndiff:.2e}"
        write_json(os.path.join(d, "curve60.json"), dict(
            meta, gradient_accumulation_steps=1, micro_batch_size=4,
            max_abs_loss_diff_vs_fp64=d64, losses_fp64=[r["loss"] for r in c64], steps_log=c1))
        write_json(os.path.join(d, "curve60_accum2.json"), dict(
            meta, gradient_accumulation_steps=2, micro_batch_size=2,
            max_abs_loss_diff_vs_accum1=diff, steps_log=c2))
        print(f"  curve60: loss {c1[0]['loss']:.6f} -> {c1[-1]['loss']:.6f}; accum2 max |dloss| {diff:.2e}, "
              f"max rel d(grad_norm) {ndiff:.2e}; fp32 vs fp64 max |dloss| {d64:.2e}")
        summary[name].update(curve_first=c1[0]["loss"], curve_last=c1[-1]["loss"])
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
