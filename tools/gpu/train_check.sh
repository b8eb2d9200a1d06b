#!/usr/bin/env bash
# `zero train --device cuda` on a real GPU: the curve against `--device cpu` (the same binary, same
# seed and data) for the tiny GPT-2 and Llama presets at stages 0-3, fp32 / bf16, optimizer offload
# none / cpu, and gradient checkpointing; then the step benchmark: tokens/s and MFU of bf16 steps
# (ZERO_GPU_BENCH_GRID) beside PyTorch's (bench/gpu/torch_step.py, ZERO_GPU_TORCH_MODES) on the same
# GPU; `zero generate --device cuda` giving the CPU's tokens and `zero bench step --device cuda`.
# Packed by tools/gpu/pack.sh and run by verify.sh; prints markdown.
#
#   train_check.sh ZERO_BINARY CORPUS WORKDIR [--no-bench]
# ZERO_CHECK_DEVICE=cpu runs the script's plumbing on a machine without a GPU (both sides on cpu);
# ZERO_CHECK_ONLY=REGEX narrows the parity pairs ("MODEL STAGE DTYPE OFFLOAD"; "^$" skips them).
set -uo pipefail
device=${ZERO_CHECK_DEVICE:-cuda}
zero=$1 corpus=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
bench=1
torch_step=$here/torch_step.py  # beside this script in the pack; in the repository, bench/gpu/
[[ -f $torch_step ]] || torch_step=$here/../../bench/gpu/torch_step.py
[[ "${4:-}" == "--no-bench" ]] && bench=0
mkdir -p "$work"

config() {  # stage dtype offload micro accumulation [clip] -> ds_config JSON on stdout
  local stage=$1 dtype=$2 offload=$3 micro=$4 accum=$5 clip=${6:-1.0} prec="" off=""
  [[ $dtype == bf16 ]] && prec='"bf16": {"enabled": true},'
  [[ $offload == cpu ]] && off=', "offload_optimizer": {"device": "cpu"}'
  cat <<EOF
{"train_micro_batch_size_per_gpu": $micro, "gradient_accumulation_steps": $accum,
 "gradient_clipping": $clip, $prec
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
} | grep -E "${ZERO_CHECK_ONLY:-.}" | OMP_NUM_THREADS=2 xargs -r -P 8 -L 1 bash -c 'run_pair "$@"' _ | sort | sed 's/^/- /' | tee "$work/parity.txt"
grep -q -E 'MISMATCH|FAILED' "$work/parity.txt" && status=1 || status=0

echo
echo "## zero generate --device cuda vs --device cpu (the same tokens), zero bench step --device cuda"
{
  for model in gpt2-tiny llama-tiny; do
    for sampling in "--temperature 0" "--temperature 1 --seed 5"; do
      args="generate --model preset:$model --prompt_tokens 3,14,15,92 --max_new_tokens 24 $sampling"
      cpu_out=$(timeout 60 "$zero" $args --device cpu 2>&1)
      dev_out=$(timeout 60 "$zero" $args --device "$device" 2>&1 | tail -n 1)
      [[ "$cpu_out" == "$dev_out" ]] && echo "- generate $model $sampling: ok" ||
        echo "- generate $model $sampling: MISMATCH cpu [$cpu_out] $device [$dev_out]"
    done
  done
  if out=$(OMP_NUM_THREADS=4 timeout 120 "$zero" bench step --model preset:gpt2-mini --stages 0 3 --steps 5 \
    --device "$device" 2>&1); then
    echo "$out" | head -6 | sed 's/^/    /'
  else
    echo "- bench step FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
  fi
} | tee "$work/cli_device.txt"
grep -q -E 'MISMATCH|FAILED' "$work/cli_device.txt" && status=1

san_train() {
# compute-sanitizer memcheck over whole training runs (the engine's device buffers, copies and the
# optimizer on the device, not just the kernels' unit tests): gpt2-tiny bf16 at stages 0 and 3.
if [[ $device == cuda && ${ZERO_GPU_SAN_TRAIN:-1} != 0 ]] && command -v compute-sanitizer >/dev/null; then
  echo
  echo "## compute-sanitizer memcheck of zero train --device cuda (gpt2-tiny bf16, 4 steps)"
  for stage in 0 3; do
    d=$work/san-s$stage
    mkdir -p "$d"
    config "$stage" bf16 none 4 2 >"$d/ds.json"
    timeout "${ZERO_GPU_SAN_TRAIN_TIMEOUT:-180}" compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 "$zero" train \
      --deepspeed "$d/ds.json" --model preset:gpt2-tiny --train_file "$corpus" --data_dtype uint8 \
      --block_size 64 --max_steps 4 --output_dir "$d/out" --quiet --device cuda >"$d/log" 2>&1 &
  done
  wait
  for stage in 0 3; do
    echo "- stage $stage: $(grep -E 'ERROR SUMMARY' "$work/san-s$stage/log" | tail -1) $(grep -q 'zero train: 4 steps' "$work/san-s$stage/log" && echo '(4 steps ran)' || echo '(the run did not finish)')"
    grep -q 'ERROR SUMMARY: 0 errors' "$work/san-s$stage/log" || { status=1; grep -m 12 -E '=========' "$work/san-s$stage/log" | sed 's/^/    /'; }
  done
fi
}
((bench)) || { san_train; exit $status; }
# The step benchmark: ZERO_GPU_BENCH_GRID entries MODEL:MICRO:STAGES[:MODES] (a stage followed by
# "o" has the optimizer offloaded to the CPU, clipping 1.0: its CPU Adam runs after backward; "on"
# offloaded without clipping: the CPU Adam overlaps backward; MODES joined by "+"), T=1024, bf16,
# world 1; each run's last wall_clock_breakdown lines (and the offload pipeline's) are printed under
# the table;
# ZERO_GPU_TORCH_MODES the PyTorch baselines (eager / compile / fsdp2) run beside entries without
# their own. Ratios are against each entry's first mode.
grid=${ZERO_GPU_BENCH_GRID:-gpt2-124m:8:0,1,2,3}
modes=${ZERO_GPU_TORCH_MODES:-eager}
seq=${ZERO_GPU_BENCH_SEQ:-1024}
echo
echo "## Step benchmark: bf16, T=$seq, one GPU, world 1 (mean of steps 3-N; ratio: tokens/s over PyTorch ${modes%% *})"
echo
echo "| model | run | tok/s | ms/step | MFU | ratio |"
echo "| --- | --- | --- | --- | --- | --- |"
for entry in $grid; do
  IFS=: read -r model micro stages entry_modes <<<"$entry"
  fpt=$(python3 "$torch_step" --model "$model" --seq "$seq" --flops-per-token)
  base=""
  these_modes=${entry_modes:-$modes}
  for mode in ${these_modes//+/ }; do
    line=$(timeout 300 python3 "$torch_step" --model "$model" --batch "$micro" --seq "$seq" \
      --steps 8 --mode "$mode" 2>&1 | grep -E "^torch-|Error|error" | tail -1)
    tps=$(sed -n 's/.*: \([0-9,]*\) tok\/s.*/\1/p' <<<"$line" | tr -d ,)
    [[ -z $base && -n $tps ]] && base=$tps
    if [[ -n $tps ]]; then
      echo "| $model | PyTorch $mode | $tps | $(sed -n 's/.*(\([0-9.]*\) ms\/step).*/\1/p' <<<"$line") | $(sed -n 's/.*MFU \([0-9.]*%\).*/\1/p' <<<"$line") | $(python3 -c "print(f'{$tps/$base:.2f}')") |"
    else
      echo "| $model | PyTorch $mode | FAILED: ${line:0:120} | | | |"
    fi
  done
  for st in ${stages//,/ }; do
    stage=${st%%o*} offload=none clip=1.0
    [[ $st == *o* ]] && offload=cpu
    [[ $st == *on ]] && clip=0
    label="stage $stage"
    [[ $offload == cpu ]] && label+=" offload cpu"
    [[ $offload == cpu && $clip == 0 ]] && label+=" no clipping (overlap)"
    d=$work/bench-$model-s$st
    mkdir -p "$d"
    # wall_clock_breakdown (host timers, no added syncs): its lines are printed under the table.
    config "$stage" bf16 "$offload" "$micro" 1 "$clip" |
      sed 's/"gradient_clipping"/"wall_clock_breakdown": true, "steps_per_print": 4, "gradient_clipping"/' >"$d/ds.json"
    if timeout 300 "$zero" train --deepspeed "$d/ds.json" --model "preset:$model" --train_file "$corpus" \
      --data_dtype uint8 --block_size "$seq" --max_steps 8 --output_dir "$d/out" --quiet --device "$device" \
      >"$d/log" 2>&1; then
      python3 - "$d/out/metrics.jsonl" "$model" "$label" "$fpt" "${base:-0}" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = [r for r in rows if r["step"] >= 3]
dt = t[-1]["elapsed_s"] - rows[1]["elapsed_s"]
tps = sum(r["tokens"] for r in t) / dt
base = float(sys.argv[5])
ratio = f"{tps / base:.2f}" if base > 0 else "-"
print(f"| {sys.argv[2]} | zero.cpp {sys.argv[3]} | {tps:.0f} | {dt / len(t) * 1e3:.1f} | "
      f"{tps * float(sys.argv[4]) / 989e12:.1%} | {ratio} |")
EOF2
    else
      echo "| $model | zero.cpp stage $st | FAILED: $(tail -2 "$d/log" | tr '\n' ' ' | cut -c1-150) | | | |"
      status=1
    fi
    breakdown+=$(grep -E '\[Rank 0\] (time|offload)' "$d/log" | tail -2 | sed "s/^/    $model s$st: /")$'\n'
  done
done
echo
echo "wall_clock_breakdown (last window of each run; offload: the pipeline's host times per step):"
echo "${breakdown:-    none}"
san_train
exit $status
