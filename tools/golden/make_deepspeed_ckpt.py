#!/usr/bin/env python3
"""Writes tests/fixtures/checkpoint/deepspeed/<name>/: DeepSpeed checkpoints made by DeepSpeed itself.

Real DeepSpeed (tested with 0.14.4 on Debian's torch 1.13, CPU accelerator, gloo): the tiny GPT-2 of
make_fixtures.py (HF parameter names, tied head) wrapped in an nn.Module, trained by
deepspeed.initialize's engine for STEPS steps with AdamW (torch_adam) and WarmupLR, then
engine.save_checkpoint. Nothing in the checkpoint is built by hand.

Beside each checkpoint the script writes what the C++ tests compare against, all from DeepSpeed:
  expected.safetensors   per HF parameter name: <name>.master, .exp_avg, .exp_avg_sq (fp32, HF layout)
                         read from DeepSpeed's own universal-checkpoint conversion
                         (deepspeed.checkpoint.ds_to_universal) of that checkpoint; for stage 3,
                         which ds_to_universal 0.14 does not read, gathered from the live engine
                         by DeepSpeed's safe_get_full_fp32_param / safe_get_full_optimizer_state
  expected.json          global_steps, the losses before the save and the continuation losses of
                         the next CONTINUE steps after DeepSpeed's own load_checkpoint
  tokens.bin             the token stream of all STEPS + CONTINUE batches (raw uint16)
  ds_config.json         the ds_config DeepSpeed ran with
  config.json            the model's HF config (a DeepSpeed checkpoint does not hold one)

Run (see tools/golden/README.md):
  /usr/bin/python3 -m venv --system-site-packages /work/venv-ds
  /work/venv-ds/bin/pip install --no-deps deepspeed==0.14.4
  /work/venv-ds/bin/pip install hjson ninja psutil py-cpuinfo 'pydantic<3' packaging tqdm msgpack
  apt-get install numactl   # DeepSpeed's CPU accelerator runs it (stage 3)
  DS_ACCELERATOR=cpu /work/venv-ds/bin/python tools/golden/make_deepspeed_ckpt.py
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_fixtures as mf  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "checkpoint", "deepspeed")
STEPS = 3
CONTINUE = 5
B, T = 4, 16
# make_fixtures.py's tiny GPT-2, narrower still so that the checked-in files stay small; 1530
# parameters, not a multiple of 2 * world size, so the world-2 fixtures carry DeepSpeed's padding.
CONFIG = dict(mf.GPT2_CONFIG, n_embd=6, n_head=2)


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

    def forward(self, x_BT, y_BT):
        p = dict(self.named_parameters())
        logits = mf.gpt2_forward(p, self.cfg, x_BT)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y_BT.reshape(-1))


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


def ds_config(stage, world):
    return {
        "train_batch_size": B, "train_micro_batch_size_per_gpu": B // world, "gradient_accumulation_steps": 1,
        "steps_per_print": 1000, "gradient_clipping": 1.0, "zero_optimization": {"stage": stage},
        "optimizer": {"type": "AdamW",
                      "params": {"torch_adam": True, "lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0}},
        "scheduler": {"type": "WarmupLR",
                      "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3, "warmup_num_steps": 4,
                                 "warmup_type": "linear"}},
        "fp16": {"enabled": False}, "bf16": {"enabled": False},
    }


def make_engine(deepspeed, stage, world, seed):
    params = mf.gpt2_init(CONFIG, seed)
    model = TinyGPT2(CONFIG, params)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config(stage, world))
    if stage == 3:
        # The functional forward reads every parameter from the root module: ZeRO-3 must gather
        # them around the root's forward, not its (never called) submodules'.
        for p in model.parameters():
            deepspeed.zero.register_external_parameter(engine.module, p)
    return engine


def train(engine, data, world, rank):
    """Rank r takes rows [r*B/W, (r+1)*B/W) of each batch; the loss logged is the global mean."""
    import torch.distributed as dist
    losses, rows = [], B // world
    for x, y in data:
        loss = engine(x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows])
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


def expected_from_universal(tag_dir, tmp):
    """DeepSpeed's own per-parameter view of the checkpoint (ds_to_universal)."""
    univ = os.path.join(tmp, "universal")
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    tag_dir, "--output_folder", univ, "--num_extract_workers", "1",
                    "--num_merge_workers", "1"], check=True, env=dict(os.environ))
    tensors = {}
    zero_dir = os.path.join(univ, "zero")
    for name in sorted(os.listdir(zero_dir)):
        if not os.path.isdir(os.path.join(zero_dir, name)):
            continue  # optimizer_state.pt: the param groups
        for kind, ours in (("fp32", "master"), ("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
            path = os.path.join(zero_dir, name, kind + ".pt")
            t = torch.load(path)
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


def make_one(deepspeed, name, stage, world, rank):
    import torch.distributed as dist
    out = os.path.join(OUT_DIR, name)
    if rank == 0:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
    dist.barrier()
    stream = token_stream(CONFIG["vocab_size"], STEPS + CONTINUE)
    data = batches(stream, STEPS + CONTINUE)
    engine = make_engine(deepspeed, stage, world, seed=7)
    first = train(engine, data[:STEPS], world, rank)
    if stage == 3:  # ds_to_universal (0.14) does not read stage 3: DeepSpeed's own gather API
        live = expected_from_engine(engine)
    # ds_to_universal (the expected tensors below) asks for this client state.
    engine.save_checkpoint(out, client_state={"universal_checkpoint_info": {}})
    # The continuation DeepSpeed itself produces from the saved checkpoint: a fresh engine (other
    # init) loads it, then trains CONTINUE steps on the next batches.
    fresh = make_engine(deepspeed, stage, world, seed=99)
    fresh.load_checkpoint(out)
    resumed = train(fresh, data[STEPS:], world, rank)
    dist.barrier()
    if rank != 0:
        return
    stream.numpy().astype("<u2").tofile(os.path.join(out, "tokens.bin"))
    tag = open(os.path.join(out, "latest")).read().strip()
    if stage == 3:
        tensors = live
    else:
        with tempfile.TemporaryDirectory() as tmp:
            tensors = expected_from_universal(os.path.join(out, tag), tmp)
    mf.write_safetensors(os.path.join(out, "expected.safetensors"), tensors)
    mf.write_json(os.path.join(out, "config.json"), CONFIG)
    mf.write_json(os.path.join(out, "ds_config.json"), ds_config(stage, world))
    mf.write_json(os.path.join(out, "expected.json"), {
        "deepspeed_version": deepspeed.__version__, "torch_version": torch.__version__,
        "stage": stage, "world_size": world, "tag": tag, "global_steps": STEPS,
        "losses_before_save": first, "losses_after_resume": resumed,
        "batch_size": B, "block_size": T, "tokens": "tokens.bin (raw uint16, batch s = samples "
        "[4s, 4s + 4) of block 16)",
    })
    # zero_to_fp32.py is a copy of DeepSpeed's script (large); the directory test needs only `latest`.
    p = os.path.join(out, "zero_to_fp32.py")
    if os.path.exists(p):
        os.remove(p)
    print(f"{name}: losses {first} -> resumed {resumed}")


def worker(rank, world, stages, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    patch_gloo_collectives()
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    for stage in stages:
        make_one(deepspeed, f"gpt2_tiny_stage{stage}_w{world}", stage, world, rank)


# The fixtures checked in: every stage, both world sizes, DeepSpeed's padding (1530 parameters
# split over 2 ranks), in about 300 KB.
CASES = {1: [2, 3], 2: [1, 3]}  # world size -> stages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", help="these stages at every world size instead of CASES")
    ap.add_argument("--worlds", default="1,2")
    args = ap.parse_args()
    for i, world in enumerate(int(w) for w in args.worlds.split(",")):
        stages = [int(s) for s in args.stages.split(",")] if args.stages else CASES[world]
        torch.multiprocessing.spawn(worker, args=(world, stages, 29511 + i), nprocs=world)


if __name__ == "__main__":
    main()
