#!/usr/bin/env bash
# `zero train --device cuda` on a real GPU: the curve against `--device cpu` (the same binary, same
# seed and data) for the tiny GPT-2 and Llama presets at stages 0-3, fp32 / bf16, optimizer offload
# none / cpu, and gradient checkpointing; then gpt2-124m bf16 tokens/s at stages 0 and 3 beside a
# PyTorch step (bench/gpu/torch_gpt2_step.py) on the same GPU. Packed by tools/gpu/pack.sh and run
# by verify.sh; prints markdown.
#
#   train_check.sh ZERO_BINARY CORPUS WORKDIR [--no-bench]
# ZERO_CHECK_DEVICE=cpu runs the script's plumbing on a machine without a GPU (both sides on cpu).
set -uo pipefail
device=${ZERO_CHECK_DEVICE:-cuda}
zero=$1 corpus=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
bench=1
[[ "${4:-}" == "--no-bench" ]] && bench=0
mkdir -p "$work"

config() {  # stage dtype offload micro accumulation -> ds_config JSON on stdout
  local stage=$1 dtype=$2 offload=$3 micro=$4 accum=$5 prec="" off=""
  [[ $dtype == bf16 ]] && prec='"bf16": {"enabled": true},'
  [[ $offload == cpu ]] && off=', "offload_optimizer": {"device": "cpu"}'
  cat <<EOF
{"train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $accum,
 "gradient_clipping": 1.0, $prec
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
 "zero_optimization": {"stage": $stage $off}}
EOF
}

run_pair() {  # model stage dtype offload extra-flag -> one line of results
  local model=$1 stage=$2 dtype=$3 offload=$4 extra=${5:-}
  local name="$model-s$stage-$dtype-$offload${extra:+-ckpt}" d
  d=$work/$name
  mkdir -p "$d"
  config "$stage" "$dtype" "$offload" 4 2 >"$d/ds.json"
  local side dev
  for side in ref dev; do
    dev=cpu
    [[ $side == dev ]] && dev=$device
    timeout 120 "$zero" train --deepspeed "$d/ds.json" --model "preset:$model" --train_file "$corpus" \
      --data_dtype uint8 --block_size 64 --max_steps 20 --output_dir "$d/$side" --quiet --device "$dev" \
      $extra >"$d/$side.log" 2>&1 || {
      echo "$name FAILED on $dev (rc $?): $(tail -2 "$d/$side.log" | tr '\n' ' ')"
      return
    }
  done
  python3 - "$d/ref/metrics.jsonl" "$d/dev/metrics.jsonl" "$name" "$dtype" <<'EOF'
import json, sys
rows = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
name, dtype = sys.argv[3], sys.argv[4]
tol = 1e-4 if dtype == "fp32" else 2e-2
def rel(a, b): return abs(a - b) / max(abs(b), 1e-12)
dl = max(rel(a["loss"], b["loss"]) for a, b in zip(*rows))
dg = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(*rows))
ok = len(rows[0]) == len(rows[1]) == 20 and dl <= tol and dg <= tol
print(f"{name} {'ok' if ok else 'MISMATCH'} steps={len(rows[1])} max_rel_loss={dl:.2e} "
      f"max_rel_grad_norm={dg:.2e} final_loss cpu={rows[0][-1]['loss']:.5f} cuda={rows[1][-1]['loss']:.5f}")
EOF
}
export -f config run_pair
export zero corpus work device

echo "## zero train --device cuda vs --device cpu (20 steps, micro 4 x accumulation 2, T=64; tolerance fp32 1e-4, bf16 2e-2)"
{
  for model in gpt2-tiny llama-tiny; do
    for dtype in fp32 bf16; do
      for stage in 0 1 2 3; do echo "$model $stage $dtype none"; done
      for stage in 2 3; do echo "$model $stage $dtype cpu"; done
    done
  done
  echo "llama-tiny 3 bf16 none --gradient_checkpointing"
  echo "gpt2-tiny 1 fp32 none --gradient_checkpointing"
} | grep -E "${ZERO_CHECK_ONLY:-.}" | OMP_NUM_THREADS=2 xargs -P 8 -L 1 bash -c 'run_pair "$@"' _ | sort | sed 's/^/- /' | tee "$work/parity.txt"
grep -q -E 'MISMATCH|FAILED' "$work/parity.txt" && status=1 || status=0

((bench)) || exit $status
echo
echo "## gpt2-124m bf16, micro 8 x T=1024, one GPU: tokens/s (mean of steps 3-8)"
for stage in 0 3; do
  d=$work/gpt2-124m-s$stage
  mkdir -p "$d"
  config "$stage" bf16 none 8 1 >"$d/ds.json"
  if timeout 240 "$zero" train --deepspeed "$d/ds.json" --model preset:gpt2-124m --train_file "$corpus" \
    --data_dtype uint8 --block_size 1024 --max_steps 8 --output_dir "$d/out" --quiet --device "$device" \
    >"$d/log" 2>&1; then
    python3 - "$d/out/metrics.jsonl" "$stage" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = [r for r in rows if r["step"] >= 3]
dt = t[-1]["elapsed_s"] - rows[1]["elapsed_s"]
print(f"- zero.cpp stage {sys.argv[2]}: {sum(r['tokens'] for r in t) / dt:,.0f} tok/s "
      f"({dt / len(t) * 1e3:.1f} ms/step), loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
EOF
  else
    echo "- zero.cpp stage $stage: FAILED: $(tail -3 "$d/log" | tr '\n' ' ')"
    status=1
  fi
done
timeout 240 python3 "$here/torch_gpt2_step.py" --batch 8 --seq 1024 --steps 8 2>&1 | tail -3 | sed 's/^/- /'
exit $status
