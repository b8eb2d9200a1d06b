#!/usr/bin/env bash
# ZeRO.cpp vs DeepSpeed on CPU, side by side (issue 14): one HF GPT-2 (4 layers, 256 wide, 50257
# vocab) trained by `zero train` and by DeepSpeed (CPU accelerator, gloo) from the same weights, on
# the same token stream and data order, with the same ds_config.json, per configuration
#   stage 0-3 x world 1-2 x fp32/bf16, and stage 2 + offload_optimizer cpu (fp32, bf16).
# Each pair runs back to back (the order alternates) with the same threads per rank (world 1: 2,
# world 2: 1 per rank); warm-up steps are left out and the median step time is compared. Prints a
# markdown table and writes it to bench/results/deepspeed_cpu.md (between the table markers).
#
# DeepSpeed, torch and transformers come from PyPI into a virtualenv of its own (never CI's path).
#
# Usage: bench/deepspeed_cpu/run.sh [options]
#   --zero PATH        zero binary (default build/release/bin/zero)
#   --venv DIR         virtualenv with deepspeed (default $DS_VENV or /work/venv-ds); created if
#                      missing: pip install torch deepspeed transformers
#   --base-venv DIR    when creating --venv, reuse this venv's packages (torch, transformers)
#                      through a .pth file instead of installing them
#   --work DIR         scratch directory (default /tmp/zero-dsbench)
#   --quick            a subset: stages 1 and 3 at world 1 and 2 in fp32, stage 3 world 2 bf16,
#                      stage 2 + offload bf16
#   --only REGEX       only configurations whose name matches (e.g. 's3-w2')
#   --steps N          optimizer steps per run (default 12); --warmup N of them untimed (default 2)
#   --micro N --gas N --block T   batch shape per rank (default 1 x 2 x 64)
#   --results FILE     markdown to update (default bench/results/deepspeed_cpu.md; '-': none)
#   --omp-wait-policy P  OMP_WAIT_POLICY for both systems (default passive; 'unset': libgomp's
#                      spin-then-sleep default). On a loaded, oversubscribed machine the default
#                      spinning dominates both systems' step times (bench/results/deepspeed_cpu.md)
# Environment: TORCH_INDEX_URL (pip --index-url for torch, e.g. a CPU-only wheel index).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
zero=$repo/build/release/bin/zero
venv=${DS_VENV:-/work/venv-ds}
base_venv=
work=/tmp/zero-dsbench
quick=0
only=
steps=12
warmup=2
micro=1
gas=2
block=64
results=$repo/bench/results/deepspeed_cpu.md
wait_policy=passive
while (($#)); do
  case $1 in
    --zero) zero=$2; shift 2 ;;
    --venv) venv=$2; shift 2 ;;
    --base-venv) base_venv=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --only) only=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --micro) micro=$2; shift 2 ;;
    --gas) gas=$2; shift 2 ;;
    --block) block=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --omp-wait-policy) wait_policy=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
[[ -x $zero ]] || { echo "run.sh: no zero binary at $zero (build it, or pass --zero)" >&2; exit 2; }
((steps > warmup)) || { echo "run.sh: --steps must exceed --warmup" >&2; exit 2; }

# --- the virtualenv --------------------------------------------------------------------------
py=$venv/bin/python
if ! DS_ACCELERATOR=cpu "$py" -c 'import deepspeed, torch, transformers' 2>/dev/null; then
  echo "run.sh: setting up $venv (torch, deepspeed, transformers from PyPI)" >&2
  [[ -x $py ]] || /usr/bin/python3 -m venv "$venv"
  if [[ -n $base_venv ]]; then
    site=$("$base_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' | {
      read -r own; echo "$site" > "$own/base_venv.pth"; }
  fi
  if ! "$py" -c 'import torch' 2>/dev/null; then
    "$py" -m pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch
  fi
  "$py" -m pip install deepspeed transformers numpy
fi
export DS_ACCELERATOR=cpu
if [[ $wait_policy == unset ]]; then unset OMP_WAIT_POLICY; else export OMP_WAIT_POLICY=$wait_policy; fi

# --- the model and tokens (once) ---------------------------------------------------------------
mkdir -p "$work"
if [[ ! -f $work/model/model.safetensors || ! -f $work/tokens.bin ]]; then
  "$py" "$here/make_model.py" --out "$work" >&2
fi

# --- the grid ----------------------------------------------------------------------------------
configs=()
for dtype in fp32 bf16; do
  for world in 1 2; do
    for stage in 0 1 2 3; do configs+=("s$stage-w$world-$dtype"); done
  done
  configs+=("s2-w1-$dtype-offload")
done
if ((quick)); then
  configs=(s1-w1-fp32 s3-w1-fp32 s1-w2-fp32 s3-w2-fp32 s3-w2-bf16 s2-w1-bf16-offload)
fi
if [[ -n $only ]]; then
  mapfile -t configs < <(printf '%s\n' "${configs[@]}" | grep -E -- "$only" || true)
fi
((${#configs[@]})) || { echo "run.sh: no configuration matches --only $only" >&2; exit 2; }

load() { uptime | sed 's/.*load average: //; s/,//g' | awk '{print $1}'; }
run_ds() {  # DIR WORLD THREADS
  OMP_NUM_THREADS=$3 OPENBLAS_NUM_THREADS=$3 "$py" -m torch.distributed.run --standalone \
    --nproc_per_node "$2" "$here/train_ds.py" --model "$work/model" --tokens "$work/tokens.bin" \
    --deepspeed "$1/ds_config.json" --block_size "$block" --steps "$steps" --threads "$3" \
    --out "$1/ds.jsonl" > "$1/ds.log" 2>&1
}
run_zero() {  # DIR WORLD THREADS
  local cmd=("$zero" train --deepspeed "$1/ds_config.json" --model "$work/model"
    --train_file "$work/tokens.bin" --block_size "$block" --max_steps "$steps"
    --lr_scheduler_type constant --output_dir "$1/zero" --overwrite_output_dir --quiet)
  if (($2 > 1)); then cmd=("$zero" launch --num_gpus "$2" -- "${cmd[@]}"); fi
  OMP_NUM_THREADS=$3 OPENBLAS_NUM_THREADS=$3 "${cmd[@]}" > "$1/zero.log" 2>&1
}

summary=$work/summary.jsonl
: > "$summary"
i=0
for name in "${configs[@]}"; do
  IFS=- read -r s w dtype offload <<< "$name"
  stage=${s#s} world=${w#w} threads=$((2 / ${w#w}))
  dir=$work/runs/$name
  rm -rf "$dir"; mkdir -p "$dir"
  bf16=false; [[ $dtype == bf16 ]] && bf16=true
  offload_json=
  [[ $offload == offload ]] && offload_json=', "offload_optimizer": {"device": "cpu"}'
  cat > "$dir/ds_config.json" <<JSON
{
  "train_micro_batch_size_per_gpu": $micro,
  "gradient_accumulation_steps": $gas,
  "gradient_clipping": 1.0,
  "steps_per_print": 1000000,
  "optimizer": {"type": "AdamW",
                "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "bf16": {"enabled": $bf16},
  "zero_optimization": {"stage": $stage$offload_json}
}
JSON
  load_before=$(load)
  ds_rc=0 zero_rc=0
  if ((i % 2 == 0)); then
    run_ds "$dir" "$world" "$threads" || ds_rc=$?
    run_zero "$dir" "$world" "$threads" || zero_rc=$?
  else
    run_zero "$dir" "$world" "$threads" || zero_rc=$?
    run_ds "$dir" "$world" "$threads" || ds_rc=$?
  fi
  load_after=$(load)
  ((ds_rc == 0)) || echo "run.sh: $name: DeepSpeed failed (exit $ds_rc), see $dir/ds.log" >&2
  ((zero_rc == 0)) || echo "run.sh: $name: zero train failed (exit $zero_rc), see $dir/zero.log" >&2
  printf '{"name": "%s", "stage": %d, "world": %d, "dtype": "%s", "offload": %s, "threads": %d, "dir": "%s", "ds_rc": %d, "zero_rc": %d, "load_before": %s, "load_after": %s, "first": "%s"}\n' \
    "$name" "$stage" "$world" "$dtype" "$([[ $offload == offload ]] && echo true || echo false)" \
    "$threads" "$dir" "$ds_rc" "$zero_rc" "$load_before" "$load_after" \
    "$( ((i % 2 == 0)) && echo deepspeed || echo zero)" >> "$summary"
  "$py" "$here/report.py" --summary "$summary" --warmup "$warmup" --last >&2
  i=$((i + 1))
done

"$py" "$here/report.py" --summary "$summary" --warmup "$warmup" --zero "$zero" \
  --shape "micro $micro x accumulation $gas x T $block per rank, $steps steps ($warmup warm-up)" \
  --results "$results" --wait-policy "$wait_policy"
