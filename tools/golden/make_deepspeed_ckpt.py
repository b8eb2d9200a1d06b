#!/usr/bin/env python3
"""Writes tests/fixtures/checkpoint/deepspeed/<name>/: DeepSpeed checkpoints made by DeepSpeed itself.

Real DeepSpeed engines on CPU (gloo) train a tiny model for STEPS steps with AdamW (torch_adam) and
WarmupLR, then engine.save_checkpoint; a fresh engine then load_checkpoint()s it and trains
CONTINUE more steps. Nothing in a checkpoint is built by hand. Two families of cases (CASES):
  legacy   DeepSpeed 0.14.4 on Debian's torch 1.13: the tiny GPT-2 of make_fixtures.py (HF
           parameter names, tied head) in fp32 (gloo in torch 1.13 cannot broadcast bf16)
  current  DeepSpeed 0.19.x on torch 2.x: the same GPT-2 in bf16 (BF16_Optimizer at stage 1,
           ZeRO's optimizer at stages 2 / 3, per-parameter alignment padding) and fp16 (dynamic
           loss scaling), and a tiny transformers LlamaForCausalLM (fp32 and bf16)
The script runs the cases of the DeepSpeed it is run with.

Beside each checkpoint the script writes what the C++ tests compare against, all from DeepSpeed:
  expected.safetensors   per HF parameter name: <name>.master, .exp_avg, .exp_avg_sq (fp32, HF layout)
                         read from DeepSpeed's own universal-checkpoint conversion
                         (deepspeed.checkpoint.ds_to_universal) of that checkpoint; for stage 3 under
                         0.14 (whose ds_to_universal does not read it), gathered from the live engine
                         by DeepSpeed's safe_get_full_fp32_param / safe_get_full_optimizer_state
  expected.json          global_steps, the losses before the save and the continuation losses of
                         the next CONTINUE steps after DeepSpeed's own load_checkpoint
  tokens.bin             the token stream of all STEPS + CONTINUE batches (raw uint16)
  ds_config.json         the ds_config DeepSpeed ran with
  config.json            the model's HF config (a DeepSpeed checkpoint does not hold one)
  universal/             (cases with universal=True) ds_to_universal's output itself: the input of
                         `zero ckpt import` for universal checkpoints

Run (see tools/golden/README.md):
  legacy:  /usr/bin/python3 -m venv --system-site-packages /work/venv-ds
           /work/venv-ds/bin/pip install --no-deps deepspeed==0.14.4
           /work/venv-ds/bin/pip install hjson ninja psutil py-cpuinfo 'pydantic<3' packaging tqdm msgpack
           apt-get install numactl   # DeepSpeed's CPU accelerator runs it (stage 3)
           DS_ACCELERATOR=cpu /work/venv-ds/bin/python tools/golden/make_deepspeed_ckpt.py
  current: a venv with torch 2.x and transformers 5 (e.g. one whose site-packages .pth-links
           /work/venv-hfm's), then
           DS_BUILD_OPS=0 pip install --no-build-isolation --no-deps deepspeed==0.19.8
           pip install hjson ninja psutil py-cpuinfo msgpack tqdm einops
           DS_ACCELERATOR=cpu /work/venv-ds19/bin/python tools/golden/make_deepspeed_ckpt.py
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_fixtures as mf  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "checkpoint", "deepspeed")
STEPS = 3
CONTINUE = 10
B, T = 4, 16
# make_fixtures.py's tiny GPT-2, narrower still so that the checked-in files stay small; 1530
# parameters, not a multiple of 2 * world size, so the world-2 fixtures carry DeepSpeed's padding.
GPT2 = dict(mf.GPT2_CONFIG, n_embd=6, n_head=2)
# A tiny LlamaForCausalLM (GQA: 2 query heads, 1 key/value head; untied head): 2072 parameters.
LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 67, "hidden_size": 8,
    "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 4, "hidden_act": "silu", "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
    "mlp_bias": False, "initializer_range": 0.2, "torch_dtype": "float32",
}


@dataclass
class Case:
    model: str  # "gpt2" or "llama"
    stage: int
    world: int
    dtype: str = "fp32"  # "fp32", "bf16", "fp16"
    zero: dict = field(default_factory=dict)  # more zero_optimization keys
    extra: dict = field(default_factory=dict)  # more top-level ds_config keys
    universal: bool = False  # also keep ds_to_universal's output (universal/)
    # Two param groups as the HF Trainer makes them: weight decay 0.1 on tensors of >= 2 dims,
    # none on the rest (ZeRO.cpp's rule); one group without decay otherwise.
    decay_groups: bool = False
    suffix: str = ""

    @property
    def name(self):
        dt = "" if self.dtype == "fp32" else self.dtype + "_"
        return f"{self.model}_tiny_{dt}stage{self.stage}_w{self.world}{self.suffix}"


# The fixtures checked in, by the DeepSpeed release that writes them.
CASES = {
    # Every stage, both world sizes, DeepSpeed's padding (1530 parameters split over 2 ranks).
    "0.14": [Case("gpt2", 2, 1), Case("gpt2", 3, 1), Case("gpt2", 1, 2), Case("gpt2", 3, 2)],
    "0.19": [
        # bf16 at stage 1 with fp32 gradient accumulation is DeepSpeed's BF16_Optimizer
        # (bf16_zero_pp_rank_* files without zero_stage); stage 2 is its ZeRO optimizer, here with
        # per-parameter alignment padding (param_alignment_paddings) inside the flat groups.
        Case("gpt2", 1, 2, "bf16", extra={"data_types": {"grad_accum_dtype": "fp32"}}),
        Case("gpt2", 2, 2, "bf16", zero={"parameter_alignment": True}, universal=True),
        Case("gpt2", 3, 1, "bf16"),
        Case("gpt2", 2, 1, "fp16"),
        Case("llama", 3, 2, decay_groups=True),
        Case("llama", 2, 1, "bf16", decay_groups=True),
    ],
}


def ds_release():
    import deepspeed
    return ".".join(deepspeed.__version__.split(".")[:2])


class TinyGPT2(torch.nn.Module):
    """The functional GPT-2 of make_fixtures.py as an nn.Module whose parameter names are HF's."""

    def __init__(self, cfg, params):
        super().__init__()
        self.cfg = cfg
        for name, value in params.items():
            *path, leaf = name.split(".")
            mod = self
            for part in path:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            mod.register_parameter(leaf, torch.nn.Parameter(value.clone()))

    def forward(self, x_BT):
        p = dict(self.named_parameters())
        return mf.gpt2_forward(p, self.cfg, x_BT)


def tiny_llama(cfg, seed):
    """transformers' LlamaForCausalLM (eager attention), initialised by its own init under `seed`;
    driven directly by the engine, so its parameter names are HF's."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    config._attn_implementation = "eager"
    return LlamaForCausalLM(config)


def logits_of(engine, x_BT):
    out = engine(x_BT)
    return out if torch.is_tensor(out) else out.logits


def token_stream(vocab, steps):
    """One contiguous stream, so that batch s is samples [B*s, B*s + B) of its raw uint16 file as
    ZeRO.cpp's sequential sampler cuts it (sample k = tokens [T*k, T*k + T + 1))."""
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (steps * B * T + 1,), generator=g)


def batches(stream, steps):
    out = []
    for s in range(steps):
        seqs = torch.stack([stream[T * k:T * k + T + 1] for k in range(B * s, B * s + B)])
        out.append((seqs[:, :T].contiguous(), seqs[:, 1:].contiguous()))
    return out


def ds_config(case):
    cfg = {
        "train_batch_size": B, "train_micro_batch_size_per_gpu": B // case.world, "gradient_accumulation_steps": 1,
        "steps_per_print": 1000, "gradient_clipping": 1.0, "zero_optimization": {"stage": case.stage, **case.zero},
        "optimizer": {"type": "AdamW",
                      "params": {"torch_adam": True, "lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                 "weight_decay": 0.1 if case.decay_groups else 0.0}},
        "scheduler": {"type": "WarmupLR",
                      "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3, "warmup_num_steps": 4,
                                 "warmup_type": "linear"}},
        "fp16": {"enabled": False}, "bf16": {"enabled": False},
    }
    if case.dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    if case.dtype == "fp16":
        # A small first scale and a window of 2 so that the scaler's state moves during the run.
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 8, "loss_scale_window": 2,
                       "hysteresis": 2, "min_loss_scale": 1}
    cfg.update(case.extra)
    return cfg


def make_engine(deepspeed, case, seed):
    if case.model == "gpt2":
        model = TinyGPT2(GPT2, mf.gpt2_init(GPT2, seed))
    else:
        model = tiny_llama(LLAMA, seed)
    params = list(model.parameters())
    if case.decay_groups:
        params = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=ds_config(case))
    if case.stage == 3 and case.model == "gpt2":
        # The functional forward reads every parameter from the root module: ZeRO-3 must gather
        # them around the root's forward, not its (never called) submodules'.
        for p in model.parameters():
            deepspeed.zero.register_external_parameter(engine.module, p)
    return engine


def train(engine, data, world, rank):
    """Rank r takes rows [r*B/W, (r+1)*B/W) of each batch; the loss (computed in fp32 from the
    logits, as ZeRO.cpp and transformers do) logged is the global mean."""
    import torch.distributed as dist
    losses, rows = [], B // world
    for x, y in data:
        logits = logits_of(engine, x[rank * rows:(rank + 1) * rows])
        y_r = y[rank * rows:(rank + 1) * rows]
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y_r.reshape(-1))
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean.item()) / world)
    return losses


def patch_gloo_collectives():
    """gloo in torch 1.13 has no all_gather_into_tensor / reduce_scatter_tensor, which DeepSpeed's
    ZeRO uses; these stand-ins do the same through all_gather / all_reduce (same values: the sums
    are of the same operands, and with W <= 2 in the same order)."""
    import torch.distributed as dist

    class Done:
        def wait(self):
            return None

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        n = dist.get_world_size(group)
        parts = [torch.empty_like(input_tensor) for _ in range(n)]
        dist.all_gather(parts, input_tensor, group=group)
        for dst, src in zip(output_tensor.chunk(n), parts):
            dst.copy_(src.view_as(dst))
        return Done() if async_op else None

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        n = dist.get_world_size(group)
        buf = input.clone()
        dist.all_reduce(buf, op=op, group=group)
        output.copy_(buf.chunk(n)[dist.get_rank(group)].view_as(output))
        return Done() if async_op else None

    dist.all_gather_into_tensor = all_gather_into_tensor
    dist._all_gather_base = all_gather_into_tensor
    dist.reduce_scatter_tensor = reduce_scatter_tensor
    dist._reduce_scatter_base = reduce_scatter_tensor


def run_universal(tag_dir, univ):
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    tag_dir, "--output_folder", univ, "--num_extract_workers", "1",
                    "--num_merge_workers", "1"], check=True, env=dict(os.environ), stdout=subprocess.DEVNULL)


def read_universal(univ):
    """DeepSpeed's own per-parameter view of the checkpoint (ds_to_universal's output)."""
    tensors = {}
    zero_dir = os.path.join(univ, "zero")
    for name in sorted(os.listdir(zero_dir)):
        if not os.path.isdir(os.path.join(zero_dir, name)):
            continue  # optimizer_state.pt: the param groups
        for kind, ours in (("fp32", "master"), ("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
            path = os.path.join(zero_dir, name, kind + ".pt")
            t = torch.load(path, weights_only=False)
            t = t["param"] if isinstance(t, dict) else t
            tensors[f"{name}.{ours}"] = t.float().contiguous()
    return tensors


def expected_from_engine(engine):
    """DeepSpeed's own per-parameter gather of the live fp32 master and Adam moments (collective):
    deepspeed.utils.safe_get_full_fp32_param / safe_get_full_optimizer_state."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
    tensors = {}
    for name, p in engine.module.named_parameters():
        tensors[name + ".master"] = safe_get_full_fp32_param(p).float().contiguous()
        for kind in ("exp_avg", "exp_avg_sq"):
            tensors[f"{name}.{kind}"] = safe_get_full_optimizer_state(p, kind).float().contiguous()
    return tensors


def make_one(deepspeed, case, rank):
    import torch.distributed as dist
    out = os.path.join(OUT_DIR, case.name)
    if rank == 0:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
    dist.barrier()
    cfg = GPT2 if case.model == "gpt2" else LLAMA
    stream = token_stream(cfg["vocab_size"], STEPS + CONTINUE)
    data = batches(stream, STEPS + CONTINUE)
    engine = make_engine(deepspeed, case, seed=7)
    first = train(engine, data[:STEPS], case.world, rank)
    live = expected_from_engine(engine) if case.stage == 3 else None
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    scaler = {k: getattr(scaler, k) for k in ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis")
              if hasattr(scaler, k)} if case.dtype == "fp16" else None
    # ds_to_universal (the expected tensors below) asks for this client state.
    engine.save_checkpoint(out, client_state={"universal_checkpoint_info": {}})
    # The continuation DeepSpeed itself produces from the saved checkpoint: a fresh engine (other
    # init) loads it, then trains CONTINUE steps on the next batches.
    fresh = make_engine(deepspeed, case, seed=99)
    fresh.load_checkpoint(out)
    resumed = train(fresh, data[STEPS:], case.world, rank)
    dist.barrier()
    if rank != 0:
        return
    stream.numpy().astype("<u2").tofile(os.path.join(out, "tokens.bin"))
    tag = open(os.path.join(out, "latest")).read().strip()
    if case.stage == 3 and ds_release() == "0.14":  # its ds_to_universal does not read stage 3
        tensors = live
    else:
        with tempfile.TemporaryDirectory() as tmp:
            univ = os.path.join(out, "universal") if case.universal else os.path.join(tmp, "universal")
            run_universal(os.path.join(out, tag), univ)
            tensors = read_universal(univ)
        if live is not None:  # two of DeepSpeed's own views of the state agree
            for k, v in tensors.items():  # (stage 3's universal tensors are flat)
                tensors[k] = v.reshape(live[k].shape)
                assert torch.equal(tensors[k], live[k]), k
    mf.write_safetensors(os.path.join(out, "expected.safetensors"), tensors)
    hf_config = dict(cfg, torch_dtype={"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[case.dtype])
    mf.write_json(os.path.join(out, "config.json"), hf_config)
    mf.write_json(os.path.join(out, "ds_config.json"), ds_config(case))
    mf.write_json(os.path.join(out, "expected.json"), {
        "deepspeed_version": deepspeed.__version__, "torch_version": torch.__version__,
        "stage": case.stage, "world_size": case.world, "dtype": case.dtype, "tag": tag, "global_steps": STEPS,
        "skipped_steps": engine.skipped_steps, "losses_before_save": first, "losses_after_resume": resumed,
        **({"loss_scaler": scaler} if scaler else {}),
        "batch_size": B, "block_size": T, "tokens": "tokens.bin (raw uint16, batch s = samples "
        "[4s, 4s + 4) of block 16)",
    })
    # zero_to_fp32.py (and 0.19's zero_to_torch.py shim) are copies of DeepSpeed's scripts, the same
    # in every case; the directory test needs only `latest`.
    for script in ("zero_to_fp32.py", "zero_to_torch.py"):
        p = os.path.join(out, script)
        if os.path.exists(p):
            os.remove(p)
    print(f"{case.name}: losses {first} -> resumed {resumed}")


def make_big(deepspeed, out, rank):
    """A larger checkpoint for measuring `zero ckpt import`'s memory (not a fixture): GPT-2 with
    n_embd 512, 8 layers, vocab 8192 (29.4M parameters, 353 MB of fp32 state), ZeRO stage 2 at
    world size 2, one step."""
    import torch.distributed as dist
    global GPT2
    GPT2 = dict(mf.GPT2_CONFIG, n_embd=512, n_head=8, n_layer=8, vocab_size=8192, n_positions=64)
    case = Case("gpt2", 2, 2)
    engine = make_engine(deepspeed, case, seed=7)
    data = batches(token_stream(GPT2["vocab_size"], 1), 1)
    train(engine, data, case.world, rank)
    engine.save_checkpoint(out)
    dist.barrier()
    if rank == 0:
        mf.write_json(os.path.join(out, "config.json"), GPT2)


def worker(rank, world, names, port, big=None):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if torch.__version__.startswith("1."):
        patch_gloo_collectives()
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    # DeepSpeed's CPU accelerator offers fp16 only where oneDNN has fp16 kernels; torch's CPU
    # kernels compute fp16 everywhere (slowly), which is all these tiny models need.
    get_accelerator().is_fp16_supported = lambda: True
    deepspeed.init_distributed(dist_backend="gloo")
    if big:
        return make_big(deepspeed, big, rank)
    for case in CASES[ds_release()]:
        if case.world == world and (not names or case.name in names):
            make_one(deepspeed, case, rank)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", help="only these fixtures (default: all of this DeepSpeed's)")
    ap.add_argument("--big", metavar="DIR", help="write make_big's checkpoint to DIR instead")
    args = ap.parse_args()
    if args.big:
        torch.multiprocessing.spawn(worker, args=(2, [], 29521, args.big), nprocs=2)
        return
    import deepspeed
    cases = CASES.get(ds_release())
    if cases is None:
        sys.exit(f"no fixtures are made with DeepSpeed {deepspeed.__version__} (CASES: {sorted(CASES)})")
    worlds = sorted({c.world for c in cases if not args.names or c.name in args.names})
    for i, world in enumerate(worlds):
        torch.multiprocessing.spawn(worker, args=(world, args.names, 29511 + i), nprocs=world)


if __name__ == "__main__":
    main()
