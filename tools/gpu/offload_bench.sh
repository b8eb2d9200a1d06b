#!/usr/bin/env bash
# ZeRO-Offload at the sizes it exists for, on one GPU (issue 27 item 5): `zero train` on llama-1b,
# llama-8b and the Llama-2-13B shape with offload_optimizer cpu at stages 2 and 3 (the 13B also with
# offload_param cpu and 16-bit optimizer state), gpt2-1558m with and without offload, and DeepSpeed
# ZeRO-Offload side by side in the same run (HF LlamaForCausalLM from the same random weights, the
# same ds_config, the same token stream: bench/gpu/train_ds_gpu.py). bf16, T=1024, world 1.
#
#   offload_bench.sh ZERO_BINARY CORPUS WORKDIR [RESULTS_MD]     (RESULTS_MD default WORKDIR/offload_bench.md)
#
# Per run: tokens/s and ms per step (mean of the steps after ZERO_OB_WARMUP), MFU (6N plus
# attention's 12*L*C*T FLOPs per token over ZERO_OB_PEAK, default 989e12: H100 / H200 SXM dense
# bf16), GPU peak memory (nvidia-smi's largest memory.used sample every 200 ms, the CUDA context
# included; without nvidia-smi the runs' own end-of-step samples), host peak RSS, the host Adam's ms
# per step (ours: the offload pipeline's `cpu adam` from wall_clock_breakdown; DeepSpeed: its
# `optimizer_step`), and ours beside the `zero train: memory plan:` line's GPU and host figures.
# Every row is appended to RESULTS_MD as soon as its run ends (a killed run keeps what it measured;
# a `started` line names the run that was cut), then the summary table: ours / DeepSpeed tokens/s
# and offload / no-offload at the same grid point.
#
# Environment:
#   ZERO_OB_GRID      "default" (about 8 minutes on an H200), "full" (the issue's grid: three or
#                     more 10-minute commands; narrow it with ZERO_OB_ONLY), or entries
#                     MODEL:MODE:MICROxACCUM[:FLAGS] separated by spaces. MODE: s0-s3 (no offload),
#                     s2o / s3o (offload_optimizer cpu), s3op (and offload_param cpu). FLAGS joined
#                     by "+": ckpt (activation checkpointing), cpuckpt (and cpu_checkpointing),
#                     bf16s (bf16_master_weights_and_grads + bf16_optimizer_states), ds (DeepSpeed
#                     beside it; ours then reads the same HF directory instead of the preset).
#   ZERO_OB_ONLY      REGEX over the entries (default all)
#   ZERO_OB_STEPS     optimizer steps per run (default 5), ZERO_OB_WARMUP untimed of them (2)
#   ZERO_OB_SEQ       tokens per sample (1024)
#   ZERO_OB_TIMEOUT_S each run's limit (240); ZERO_OB_DEADLINE_S no run starts after (480)
#   ZERO_OB_DS        0: no DeepSpeed runs; ZERO_OB_PYTHON the Python with DeepSpeed (python3)
#   ZERO_OB_WHEELS    a folder of wheels (deepspeed and what it needs beyond the device's image:
#                     hjson, pydantic, pydantic-core, annotated-types, typing-inspection) installed
#                     into WORKDIR/site first, as /work/.library/device/README.md describes
#   ZERO_CHECK_DEVICE cpu: the plumbing on a machine without a GPU (tiny presets, T=64, 3 steps, no
#                     DeepSpeed unless ZERO_OB_PYTHON names one: then train_ds_gpu.py --device cpu)
set -uo pipefail
device=${ZERO_CHECK_DEVICE:-cuda}
zero=$1 corpus=$2 work=$3
mkdir -p "$work"
work=$(cd "$work" && pwd)
results=${4:-$work/offload_bench.md}
here=$(cd "$(dirname "$0")" && pwd)
helper() {  # beside this script in the pack (app/), else bench/gpu/ in the repository
  [[ -f $here/$1 ]] && echo "$here/$1" || echo "$here/../../bench/gpu/$1"
}
report=$(helper offload_bench_report.py)
train_ds=$(helper train_ds_gpu.py)
make_llama=$(helper make_random_llama.py)
py=${ZERO_OB_PYTHON:-python3}
steps=${ZERO_OB_STEPS:-5} warmup=${ZERO_OB_WARMUP:-2} seq=${ZERO_OB_SEQ:-1024}
run_timeout=${ZERO_OB_TIMEOUT_S:-240} deadline=${ZERO_OB_DEADLINE_S:-480}
peak=${ZERO_OB_PEAK:-989e12}
ds_on=${ZERO_OB_DS:-1}
grid=${ZERO_OB_GRID:-default}
case $grid in
  default)
    # Each run is a few steps of 32-64 sequences; the 8B DeepSpeed run (its 16 GB HF directory
    # written and loaded, its CPU Adam built on first use) is the longest.
    grid="gpt2-1558m:s2:4x8 gpt2-1558m:s2o:4x8 llama-1b:s2o:8x4:ds llama-8b:s2o:4x16:ckpt+ds
          llama-13b:s3op:4x8:ckpt+bf16s" ;;
  full)
    grid="gpt2-1558m:s2:4x8 gpt2-1558m:s2o:4x8 gpt2-1558m:s3:4x8 gpt2-1558m:s3o:4x8
          llama-1b:s2:8x4 llama-1b:s2o:8x4:ds llama-1b:s3o:8x4:ds llama-1b:s2o:16x16:ds
          llama-8b:s2o:4x16:ckpt+ds llama-8b:s3o:4x16:ckpt+ds llama-8b:s2o:8x32:ckpt
          llama-13b:s3o:4x8:ckpt+bf16s+ds llama-13b:s3op:4x8:ckpt+bf16s+ds
          llama-13b:s3op:8x32:ckpt+bf16s" ;;
esac
if [[ $device == cpu ]]; then
  # The plumbing only: tiny presets, short sequences, few steps.
  [[ -z ${ZERO_OB_GRID:-} ]] && grid="gpt2-tiny:s2:2x2 gpt2-tiny:s2o:2x2 llama-tiny:s2o:2x2:ds
    llama-tiny:s3o:2x2:ckpt+bf16s llama-tiny:s3op:2x2:cpuckpt+bf16s"
  seq=${ZERO_OB_SEQ:-64} steps=${ZERO_OB_STEPS:-3} warmup=${ZERO_OB_WARMUP:-1}
  [[ -z ${ZERO_OB_PYTHON:-} ]] && ds_on=0
fi
grid=$(tr -s ' \n' '\n\n' <<<"$grid" | grep -v '^$' | grep -E -- "${ZERO_OB_ONLY:-.}")

if [[ -n ${ZERO_OB_WHEELS:-} && $ds_on != 0 ]]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$work/site" "$ZERO_OB_WHEELS"/*.whl || echo "offload_bench.sh: installing the wheels failed" >&2
  export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
fi

config() {  # stage offload(none|opt|opt+param) micro accum bf16s(0|1) cpuckpt(0|1) -> ds_config
  local stage=$1 off=$2 micro=$3 accum=$4 bf16s=$5 cpuckpt=$6 zero_extra="" bf16_extra="" ckpt=""
  [[ $off == opt* ]] && zero_extra+=', "offload_optimizer": {"device": "cpu", "pin_memory": true}'
  [[ $off == opt+param ]] && zero_extra+=', "offload_param": {"device": "cpu", "pin_memory": true}'
  ((bf16s)) && bf16_extra=', "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true'
  ((cpuckpt)) && ckpt=', "activation_checkpointing": {"cpu_checkpointing": true}'
  cat <<EOF
{"train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $accum,
 "gradient_clipping": 1.0, "bf16": {"enabled": true $bf16_extra},
 "wall_clock_breakdown": true, "steps_per_print": 2,
 "optimizer": {"type": "AdamW",
               "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
 "zero_optimization": {"stage": $stage $zero_extra} $ckpt}
EOF
}

smi_pid=""
smi_start() {  # run_dir: nvidia-smi's memory.used every 200 ms while the run lasts
  smi_pid=""
  [[ $device == cuda ]] && command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1/smi.txt" 2>/dev/null &
  smi_pid=$!
}
smi_stop() {  # run_dir -> run_dir/smi_peak_mib
  [[ -n $smi_pid ]] || return 0
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  sort -n "$1/smi.txt" | tail -1 >"$1/smi_peak_mib"
}

# The header, once per results file (a second invocation appends its own runs below).
start_s=$(date +%s)
{
  echo
  echo "# ZeRO-Offload benchmark ($(date -u +%F' '%H:%M) UTC)"
  echo
  if [[ $device == cuda ]]; then
    echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  else
    echo "- dry run on the CPU (ZERO_CHECK_DEVICE=cpu): plumbing only, tiny presets, numbers mean nothing"
  fi
  echo "- host: $(getconf _NPROCESSORS_ONLN) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) memory"
  echo "- zero: $("$zero" --version 2>&1 | head -1)$( [[ -f $here/../commit ]] && echo ", pack commit $(tr '\n' ' ' <"$here/../commit")")"
  echo "- bf16, T=$seq, world 1, $steps steps per run (mean of steps $((warmup + 1))-$steps), MFU over $peak FLOP/s"
  echo "- grid: $(echo $grid)"
  echo
  python3 "$report" header
} >>"$results"
cat "$results"

python3 "$report" tokens "$corpus" "$work/tokens.bin"
records=$work/records.jsonl
: >"$records"
status=0
hf_model="" hf_dir=""

hf_for() {  # model -> hf_dir: its random HF directory (one at a time on disk: 8B 16 GB, 13B 26 GB)
  local model=$1
  if [[ $hf_model != "$model" ]]; then
    [[ -n $hf_dir ]] && rm -rf "$hf_dir"
    hf_model=$model hf_dir=$work/hf-$model
    timeout "$run_timeout" python3 "$make_llama" "$hf_dir" "$model" >"$work/hf-$model.log" 2>&1 ||
      { echo "make_random_llama.py $model FAILED: $(tail -1 "$work/hf-$model.log")" >&2; hf_dir=""; }
  fi
}

append() {  # record JSON -> the row in RESULTS_MD and records.jsonl
  echo "$1" >>"$records"
  python3 "$report" row "$1" | tee -a "$results"
}

for entry in $grid; do
  IFS=: read -r model mode mxa flags <<<"$entry"
  micro=${mxa%%x*} accum=${mxa#*x}
  stage=${mode:1:1} off=none
  [[ $mode == s?o* ]] && off=opt
  [[ $mode == s?op ]] && off=opt+param
  ckpt=0 cpuckpt=0 bf16s=0 ds=0
  for f in ${flags//+/ }; do
    case $f in
      ckpt) ckpt=1 ;;
      cpuckpt) ckpt=1 cpuckpt=1 ;;
      bf16s) bf16s=1 ;;
      ds) ds=1 ;;
      *) echo "offload_bench.sh: unknown flag $f in $entry" >&2; status=1; continue 2 ;;
    esac
  done
  name=${entry//[:+]/-}
  if (($(date +%s) - start_s > deadline)); then
    echo "- $name: not started (past ZERO_OB_DEADLINE_S=$deadline s)" | tee -a "$results"
    continue
  fi
  d=$work/$name
  rm -rf "$d"
  mkdir -p "$d/zero" "$d/ds"
  config "$stage" "$off" "$micro" "$accum" "$bf16s" "$cpuckpt" >"$d/ds.json"
  model_arg="preset:$model" model_key=$model
  if ((ds)); then  # both systems from the same weights
    hf_for "$model"  # not in $(...): it keeps hf_model / hf_dir for the next entry
    [[ -n $hf_dir ]] && model_arg=$hf_dir model_key=$hf_dir
  fi
  kv=(name="$name" model="$model_key" mode="$mode" micro="$micro" accum="$accum" seq="$seq"
      flags="${flags:-}" peak="$peak" warmup="$warmup")
  ckpt_flag=()
  ((ckpt)) && ckpt_flag=(--gradient_checkpointing)

  echo "<!-- started $name zero.cpp at $(date -u +%T) -->" >>"$results"
  smi_start "$d/zero"
  timeout "$run_timeout" "$zero" train --deepspeed "$d/ds.json" --model "$model_arg" \
    --train_file "$work/tokens.bin" --data_dtype uint16 --block_size "$seq" --max_steps "$steps" \
    --lr_scheduler_type constant --output_dir "$d/zero" --overwrite_output_dir --quiet \
    --device "$device" "${ckpt_flag[@]}" >"$d/zero/log" 2>&1
  rc=$?
  smi_stop "$d/zero"
  ((rc == 0)) || status=1
  append "$(python3 "$report" zero "$d/zero" "${kv[@]}" rc=$rc)"

  ((ds && ds_on)) || continue
  if [[ $model_arg == preset:* ]]; then
    echo "| $name | DeepSpeed | | | | | | | | | FAILED: no HF directory (make_random_llama.py) |" | tee -a "$results"
    continue
  fi
  if (($(date +%s) - start_s > deadline)); then
    echo "- $name DeepSpeed: not started (past ZERO_OB_DEADLINE_S=$deadline s)" | tee -a "$results"
    continue
  fi
  echo "<!-- started $name DeepSpeed at $(date -u +%T) -->" >>"$results"
  smi_start "$d/ds"
  timeout "$run_timeout" "$py" "$train_ds" --model "$model_arg" --tokens "$work/tokens.bin" \
    --deepspeed "$d/ds.json" --block_size "$seq" --steps "$steps" --out "$d/ds/ds.jsonl" \
    --device "$device" "${ckpt_flag[@]}" >"$d/ds/log" 2>&1
  rc=$?
  smi_stop "$d/ds"
  append "$(python3 "$report" ds "$d/ds" "${kv[@]}" rc=$rc)"
done
[[ -n $hf_dir ]] && rm -rf "$hf_dir"

{
  echo
  echo "## Summary ($(( $(date +%s) - start_s )) s)"
  echo
  echo "Ratios: ours / DeepSpeed tokens/s at the same grid point; offload / no-offload: ours with"
  echo "offload_optimizer over ours without it at the same micro x accumulation (issue 27: >= 0.9x for"
  echo "gpt2-1558m at accumulation 8); peak / plan: the measured peaks over the memory plan's figures"
  echo "(issue 27: within 10%; the GPU peak includes the CUDA context, the plan may not)."
  echo
  python3 "$report" summary "$records"
  echo
  echo "Memory plan lines:"
  echo
  python3 "$report" plans "$records"
} | tee -a "$results"
exit $status
