#!/usr/bin/env bash
# `zero train --device cuda` on a real GPU: the curve against `--device cpu` (the same binary, same
# seed and data) for the tiny GPT-2 and Llama presets at stages 0-3 (Qwen3 and Gemma 3 at 0 and 3), fp32 / bf16, optimizer offload
# none / cpu, and gradient checkpointing; then the step benchmark: tokens/s and MFU of bf16 steps
# (ZERO_GPU_BENCH_GRID) beside PyTorch's (bench/gpu/torch_step.py, ZERO_GPU_TORCH_MODES) on the same
# GPU; `zero generate --device cuda` giving the CPU's tokens (through the GPU's key/value cache and
# with --no_kv_cache, also when the context fills), its tokens/s with the cache against a whole
# forward per token (gpt2-124m, llama-1b), `zero bench step --device cuda`, a device out of memory
# (one line, exit 1, promptly), the run's placement line with and without ZeRO-Offload, two and
# four ranks sharing the GPU (--dist_backend auto -> mpi: staged collectives) against as many CPU
# ranks, with and without ZeRO-Offload, under compute-sanitizer at world 2, and the step benchmark
# at world 2; ZeRO-Infinity (offload_param cpu / nvme at stage 3) training gpt2-350m under a GPU
# budget (ZERO_DEVICE_MEMORY_LIMIT) the resident run exceeds, with its host-to-device MB per step.
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
# llm.c (the "llmc" mode of the step benchmark): packed beside this script, or the repository's
# ignored .llmc/ (tools/gpu/llmc_build.sh).
llmc_dir=$here/llmc
[[ -d $llmc_dir ]] || llmc_dir=$here/../../.llmc
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
import json, os, sys
rows = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
name, dtype = sys.argv[3], sys.argv[4]
# Relative bounds (loss, grad norm) of the 20-step curves. fp32: one float rounding apart (measured
# ~1e-7). bf16: the CUDA model runs autocast-style (bf16 GEMM operands and attention q, k, v with
# fp32 accumulation), the CPU computes in fp32 (or, with AVX512-BF16, rounds its GEMM operands but
# not attention's): the curves differ by the bf16 rounding of those operands and the weights
# updated from the gradients. Emulator, 3 steps: at most 6.4e-4 of the loss and 6.6e-3 of the grad
# norm (3.9e-4 / 3.3e-3 against CPU bf16 GEMMs); bounded for 20 steps at 1e-2 / 5e-2. Before the
# 16-bit GEMMs the GPU computed bf16 models in fp32 (H200: 2.6e-5 / 8.3e-4; bound 2e-2).
cpu_bf16 = "avx512_bf16" in open("/proc/cpuinfo").read() and os.environ.get("ZERO_CPU_BF16_GEMM") != "0"
tol_loss, tol_grad = (1e-4, 1e-4) if dtype == "fp32" else (1e-2, 5e-2)
def rel(a, b): return abs(a - b) / max(abs(b), 1e-12)
dl = max(rel(a["loss"], b["loss"]) for a, b in zip(*rows))
dg = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(*rows))
ok = len(rows[0]) == len(rows[1]) == 20 and dl <= tol_loss and dg <= tol_grad
print(f"{name} {'ok' if ok else 'MISMATCH'} steps={len(rows[1])} max_rel_loss={dl:.2e} "
      f"max_rel_grad_norm={dg:.2e} final_loss cpu={rows[0][-1]['loss']:.5f} cuda={rows[1][-1]['loss']:.5f}"
      + ("" if dtype == "fp32" else f" (cpu {'bf16' if cpu_bf16 else 'fp32'} GEMMs; bounds {tol_loss:g} / {tol_grad:g})"))
EOF
}
export -f config run_pair
export zero corpus work device

echo "## zero train --device cuda vs --device cpu (20 steps, micro 4 x accumulation 2, T=64; tolerance fp32 1e-4, bf16 loss 1e-2 / grad norm 5e-2)"
{
  for model in gpt2-tiny llama-tiny; do
    for dtype in fp32 bf16; do
      for stage in 0 1 2 3; do echo "$model $stage $dtype none"; done
      for stage in 2 3; do echo "$model $stage $dtype cpu"; done
    done
  done
  # The newer families (issue 31): Qwen3's q/k norms, Gemma 3's (1 + w) norms, sandwich norms,
  # GeGLU and local/global layers, on the GPU against the CPU.
  for model in qwen3-tiny gemma3-tiny; do
    for dtype in fp32 bf16; do
      for stage in 0 3; do echo "$model $stage $dtype none"; done
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
      # stderr's "zero generate: ..." lines (the device, the speed) are not output.
      cpu_out=$(timeout 60 "$zero" $args --device cpu 2>&1 | grep -v '^zero generate:')
      dev_out=$(timeout 60 "$zero" $args --device "$device" 2>&1 | grep -v '^zero generate:' | tail -n 1)
      [[ "$cpu_out" == "$dev_out" ]] && echo "- generate $model $sampling: ok" ||
        echo "- generate $model $sampling: MISMATCH cpu [$cpu_out] $device [$dev_out]"
      if [[ $device == cuda ]]; then  # the whole-forward path (the CPU has no --no_kv_cache)
        re_out=$(timeout 60 "$zero" $args --device cuda --no_kv_cache 2>&1 | grep -v '^zero generate:' | tail -n 1)
        [[ "$cpu_out" == "$re_out" ]] && echo "- generate $model $sampling --no_kv_cache: ok" ||
          echo "- generate $model $sampling --no_kv_cache: MISMATCH cpu [$cpu_out] cuda [$re_out]"
      fi
    done
  done
  # A context that fills (limit 64, 200 new tokens: re-read twice), greedy and sampled.
  for sampling in "--temperature 0" "--temperature 1 --seed 5"; do
    args="generate --model preset:llama-tiny --prompt_tokens 3,14,15,92 --max_new_tokens 200 --context_limit 64 $sampling"
    cpu_out=$(timeout 120 "$zero" $args --device cpu 2>&1 | grep -v '^zero generate:')
    dev_out=$(timeout 120 "$zero" $args --device "$device" 2>&1 | grep -v '^zero generate:' | tail -n 1)
    [[ "$cpu_out" == "$dev_out" ]] && echo "- generate llama-tiny --context_limit 64 $sampling: ok" ||
      echo "- generate llama-tiny --context_limit 64 $sampling: MISMATCH cpu [$cpu_out] $device [$dev_out]"
  done
  # Speed of the key/value cache against a whole forward per token (random weights, greedy, 256
  # new tokens after a 512-token prompt), from the speed line on stderr.
  if [[ $device == cuda ]]; then
    prompt=$(seq -s, 1 512)
    for model in gpt2-124m llama-1b; do
      for mode in "" "--no_kv_cache"; do
        line=$(timeout 300 "$zero" generate --model preset:$model --prompt_tokens "$prompt" \
          --max_new_tokens 256 --temperature 0 --ignore_eos --device cuda $mode 2>&1 >/dev/null |
          grep '^zero generate: .* tokens/s' || echo "FAILED")
        echo "- generate speed $model ${mode:-(kv cache)}: ${line#zero generate: }"
      done
    done
  fi
  if out=$(OMP_NUM_THREADS=4 timeout 120 "$zero" bench step --model preset:gpt2-mini --stages 0 3 --steps 5 \
    --device "$device" 2>&1); then
    echo "$out" | head -6 | sed 's/^/    /'
  else
    echo "- bench step FAILED: $(echo "$out" | tail -2 | tr '\n' ' ')"
  fi
  if [[ $device == cuda ]]; then
    # Issue 32: a device out of memory mid-run is one line naming the buffer (real cudaMalloc
    # failure: a gpt2-1558m micro-batch far past 80 GB), and exits promptly with status 1.
    t0=$(date +%s)
    oom=$(timeout 120 "$zero" train --model preset:gpt2-1558m --train_file "$corpus" --data_dtype uint8 \
      --block_size 1024 --per_device_train_batch_size 256 --max_steps 1 --device cuda --bf16 \
      --output_dir "$work/oom" --overwrite_output_dir 2>&1); rc=$?
    line=$(echo "$oom" | grep -m1 -i 'out of memory\|does not fit\|short' || echo "$oom" | tail -1)
    echo "- OOM run: exit $rc after $(( $(date +%s) - t0 )) s: ${line:0:300}"
    ((rc == 0 || rc == 124)) && echo "- OOM run FAILED (exit $rc)"
    # Issue 32 item 3: the one placement line, for the state on the GPU and for ZeRO-Offload.
    for off in none cpu; do
      cfg=$(config 2 bf16 $off 2 1)
      echo "$cfg" >"$work/placement_$off.json"
      pl=$(timeout 120 "$zero" train --model preset:gpt2-tiny --train_file "$corpus" --data_dtype uint8 \
        --block_size 64 --max_steps 1 --device cuda --deepspeed "$work/placement_$off.json" \
        --output_dir "$work/pl_$off" --overwrite_output_dir 2>&1 | grep '^zero train: placement' ||
        echo "placement line FAILED")
      echo "- offload $off: ${pl#zero train: }"
    done
  fi
  if command -v mpirun >/dev/null; then
    # Issue 30 item 1: 2 and 4 ranks on one GPU (auto picks --dist_backend mpi: the collectives
    # staged through pinned host memory), against the same ranks on the CPU engine: stages 1-3
    # bf16, and ZeRO-Offload (offload_optimizer cpu) at stages 2 and 3. ZERO_CHECK_DEVICE=cpu runs
    # the plumbing with both sides on the CPU.
    for case in "2 1 none" "2 2 none" "2 3 none" "2 2 cpu" "2 3 cpu" "4 1 none" "4 3 none" "4 3 cpu"; do
      read -r world stage off <<<"$case"
      d=$work/w$world-s$stage-$off
      mkdir -p "$d"
      config "$stage" bf16 "$off" 2 2 >"$d/ds.json"
      for side in cpu dev; do
        dev=cpu
        [[ $side == dev ]] && dev=$device
        timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -n "$world" "$zero" train \
          --deepspeed "$d/ds.json" --model preset:gpt2-tiny --train_file "$corpus" --data_dtype uint8 \
          --block_size 64 --max_steps 20 --output_dir "$d/$side" --quiet --device "$dev" \
          >"$d/$side.log" 2>&1 || echo "- world $world on one GPU stage $stage offload $off FAILED on $dev: $(tail -2 "$d/$side.log" | tr '\n' ' ')"
      done
      python3 - "$d/cpu/metrics.jsonl" "$d/dev/metrics.jsonl" "$world" "$stage" "$off" "$(grep -m1 -o 'collectives [^;]*' "$d/dev.log")" <<'EOF2'
import json, os, sys
rows = [[json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else [] for p in sys.argv[1:3]]
rel = lambda a, b: abs(a - b) / max(abs(b), 1e-12)
dl = max(rel(a["loss"], b["loss"]) for a, b in zip(*rows)) if rows[1] and rows[0] else float("inf")
ok = len(rows[0]) == len(rows[1]) == 20 and dl <= 1e-2
print(f"- world {sys.argv[3]} on one GPU, stage {sys.argv[4]}, offload {sys.argv[5]}, bf16: "
      f"{'ok' if ok else 'MISMATCH'} max_rel_loss={dl:.2e} ({sys.argv[6] or 'collectives: -'})")
EOF2
    done
  fi
  if [[ $device == cuda ]] && command -v mpirun >/dev/null && command -v compute-sanitizer >/dev/null; then
    # The staged collectives under compute-sanitizer at world 2: each rank under its own sanitizer
    # (memcheck over 4 steps at stages 2 and 3; synccheck and racecheck over 2 steps at stage 3).
    for tool in "memcheck 2 4" "memcheck 3 4" "synccheck 3 2" "racecheck 3 2"; do
      read -r t stage steps <<<"$tool"
      d=$work/w2-san-$t-s$stage
      mkdir -p "$d"
      config "$stage" bf16 none 2 1 >"$d/ds.json"
      timeout "${ZERO_GPU_SAN_TRAIN_TIMEOUT:-180}" mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 \
        compute-sanitizer --tool "$t" --error-exitcode 99 --print-limit 20 "$zero" train \
        --deepspeed "$d/ds.json" --model preset:gpt2-tiny --train_file "$corpus" --data_dtype uint8 \
        --block_size 64 --max_steps "$steps" --output_dir "$d/out" --quiet --device cuda >"$d/log" 2>&1
      rc=$?
      summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$d/log" | sort | uniq -c | tr '\n' ' ')
      echo "- world 2 compute-sanitizer $t stage $stage ($steps steps): rc $rc; ${summary:-no summary}"
      [[ $rc == 0 ]] || grep -m 8 -E '=========' "$d/log" | sed 's/^/    /'
    done
    # The step benchmark at world 2 on one GPU: its comm-wait and hidden-time columns.
    echo
    echo "### zero bench step --device cuda at world 2 on one GPU (gpt2-124m bf16)"
    timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 "$zero" bench step \
      --device cuda --bf16 --model preset:gpt2-124m --stages 1 2 3 >"$work/w2-bench.log" 2>&1 ||
      echo "- FAILED: $(tail -3 "$work/w2-bench.log" | tr '\n' ' ')"
    sed 's/^/    /' "$work/w2-bench.log" | tail -20
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
# Where a gpt2-124m bf16 step's GPU time goes: Nsight Compute's duration of every kernel of a
# `zero bench step` (one warm-up and one timed step, stage 0, 8 x 1024), summed per kernel.
# ZERO_GPU_PROFILE=0 skips it. Clocks left alone (--clock-control none, as the device notes ask).
profile_step() {
if [[ $device == cuda && ${ZERO_GPU_PROFILE:-1} != 0 ]] && command -v ncu >/dev/null; then
  echo
  echo "## Kernel time of a gpt2-124m bf16 step (ncu, stage 0, micro 8 x 1024; two steps: warm-up + timed)"
  echo
  local d=$work/profile
  mkdir -p "$d"
  if timeout "${ZERO_GPU_PROFILE_TIMEOUT:-300}" ncu --clock-control none --metrics gpu__time_duration.sum \
    --csv --launch-count "${ZERO_GPU_PROFILE_KERNELS:-6000}" "$zero" bench step --device cuda --bf16 \
    --model preset:gpt2-124m --micro_batch 8 --block_size 1024 --stages 0 --steps 1 --warmup 1 \
    >"$d/ncu.csv" 2>"$d/ncu.err"; then
    python3 - "$d/ncu.csv" <<'EOF3'
import csv, re, sys
from collections import defaultdict
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
total, per = 0.0, defaultdict(lambda: [0, 0.0])
for row in csv.DictReader(lines):
    if row.get("Metric Name") != "gpu__time_duration.sum":
        continue
    ms = float(row["Metric Value"].replace(",", "")) * scale.get(row["Metric Unit"], 1e-6)
    name = re.sub(r"\(.*", "", row["Kernel Name"]).strip()
    name = re.sub(r"^(void )", "", name)
    per[name][0] += 1
    per[name][1] += ms
    total += ms
print(f"{sum(c for c, _ in per.values())} kernels, {total:.1f} ms of kernel time over the two steps\n")
print("| kernel | launches | ms | share |")
print("| --- | --- | --- | --- |")
for name, (count, ms) in sorted(per.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"| {name[:90]} | {count} | {ms:.2f} | {ms / total:.1%} |")
EOF3
  else
    echo "- ncu FAILED: $(tail -3 "$d/ncu.err" | tr '\n' ' ' | cut -c1-300)"
  fi
fi
}

# ZeRO-Infinity on the GPU (issue 27 item 4): stage 3 with offload_param keeps the shards in pinned
# host memory (or NVMe) and copies each unit to the GPU for its gathers. gpt2-350m bf16 (0.7 GB of
# 16-bit weights), micro 4 x 512, offload_optimizer cpu, live limits small (3e7 elements, no reuse
# distance: the GPU keeps about three blocks gathered): first resident (no offload_param) without a
# budget, then ZERO_DEVICE_MEMORY_LIMIT set to that run's GPU memory in use less half the weights.
# Under it the resident run must be refused (one out-of-memory line, exit 1) and offload_param
# cpu / nvme must train, their losses equal to the resident run's (the same kernels on the same
# values: bitwise). Prints each run's `param offload | h2d MB` and `time` breakdown lines: h2d MB
# over the step's ms is the pinned copies' share of the host-to-device bandwidth. ZERO_GPU_INFINITY=0
# skips it.
infinity_check() {
if [[ $device == cuda && ${ZERO_GPU_INFINITY:-1} != 0 ]]; then
  echo
  echo "## ZeRO-Infinity: offload_param under a GPU budget the resident run exceeds (gpt2-350m bf16, stage 3, 6 steps)"
  local d=$work/infinity weights_mib=677 used limit kind rc
  mkdir -p "$d"
  infinity_config() {  # offload_param device (none | cpu | nvme) -> ds_config JSON
    local param=""
    [[ $1 == cpu ]] && param=', "offload_param": {"device": "cpu"}'
    [[ $1 == nvme ]] && param=", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$d/nvme\", \"max_in_cpu\": 0}"
    cat <<EOF2
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true}, "wall_clock_breakdown": true, "steps_per_print": 3,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3, "stage3_max_live_parameters": 3e7, "stage3_max_reuse_distance": 0,
   "stage3_prefetch_bucket_size": 2e7, "offload_optimizer": {"device": "cpu"} $param}}
EOF2
  }
  infinity_run() {  # name offload_param -> rc; log in $d/name.log
    infinity_config "$2" >"$d/$1.json"
    timeout 600 "$zero" train --deepspeed "$d/$1.json" --model preset:gpt2-350m --train_file "$corpus" \
      --data_dtype uint8 --block_size 512 --max_steps 6 --output_dir "$d/$1" --overwrite_output_dir \
      --device cuda >"$d/$1.log" 2>&1
  }
  infinity_run resident none
  rc=$?
  used=$(sed -n 's/.*GPU memory in use after training: \([0-9]*\) MiB.*/\1/p' "$d/resident.log")
  if [[ $rc != 0 || -z $used ]]; then
    echo "- resident run FAILED (rc $rc): $(tail -2 "$d/resident.log" | tr '\n' ' ')"
    status=1
    return
  fi
  limit=$((used - weights_mib / 2))
  echo "- resident: ${used} MiB in use after training; budget ZERO_DEVICE_MEMORY_LIMIT=${limit}MiB"
  grep -E '^zero train: (placement|memory plan)' "$d/resident.log" | sed 's/^/    /'
  ZERO_DEVICE_MEMORY_LIMIT=${limit}MiB infinity_run resident_budget none
  rc=$?
  echo "- resident under the budget: rc $rc (want 1): $(grep -m1 'out of GPU memory' "$d/resident_budget.log" | cut -c1-160)"
  [[ $rc == 1 ]] || status=1
  for kind in cpu nvme; do
    ZERO_DEVICE_MEMORY_LIMIT=${limit}MiB infinity_run "$kind" "$kind"
    rc=$?
    local same
    same=$(python3 - "$d/resident/metrics.jsonl" "$d/$kind/metrics.jsonl" <<'EOF2'
import json, os, sys
rows = [[json.loads(l)["loss"] for l in open(p) if l.strip()] if os.path.exists(p) else [] for p in sys.argv[1:3]]
print("losses equal" if rows[0] and rows[0] == rows[1] else f"losses DIFFER: {rows[0]} vs {rows[1]}")
EOF2
    )
    echo "- offload_param $kind under the budget: rc $rc, $same, $(sed -n 's/.*GPU memory in use after training: \([0-9]*\) MiB.*/\1 MiB in use/p' "$d/$kind.log")"
    grep -E '^zero train: (placement|memory plan)|\[Rank 0\] (time|param offload)' "$d/$kind.log" | tail -4 | sed 's/^/    /'
    [[ $rc == 0 && $same == "losses equal" ]] || { status=1; tail -3 "$d/$kind.log" | sed 's/^/    /'; }
  done
fi
}

# llm.c's train_gpt2cu for a GPT-2 preset: the packed binary, rebuilt from the packed source when it
# does not start here (another image's libraries). Echoes its path; empty when there is none.
llmc_binary() {
  local b=$llmc_dir/bin/train_gpt2cu
  if [[ -x $b ]] && "$b" -h 2>&1 | grep -q 'Usage'; then
    echo "$b"
  elif [[ -f $llmc_dir/src/train_gpt2.cu ]] && timeout 400 bash "$here/llmc_build.sh" "$llmc_dir" >"$work/llmc_build.log" 2>&1; then
    echo "$b"
  fi
}
# One llm.c run at the grid's shape: random init of the same depth (-e dL: GPT-2's width for L
# layers), micro batch MICRO x T, random tokens in its own data format, 10 steps, no evaluation
# or sampling inside the timed steps. Prints "tok/s ms/step MiB" over steps 3-10, or a reason.
llmc_step() {  # model micro
  local model=$1 micro=$2 depth b d
  case $model in
    gpt2-124m) depth=12 ;; gpt2-350m) depth=24 ;; gpt2-774m) depth=36 ;; gpt2-1558m) depth=48 ;;
    *) echo "no llm.c shape for $model"; return 1 ;;
  esac
  b=${llmc_bin-$(llmc_binary)}
  llmc_bin=$b
  [[ -n $b ]] || { echo "llm.c not built (tools/gpu/llmc_build.sh; $work/llmc_build.log)"; return 1; }
  d=$work/llmc-$model-$micro
  mkdir -p "$d"
  # llm.c's token shards: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens.
  python3 - "$d" "$micro" "$seq" <<'EOF2' || { echo "cannot write llm.c data"; return 1; }
import sys, numpy as np
d, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
for name, n in (("train", B * T * 12 + 1), ("val", B * T + 1)):
    h = np.zeros(256, np.int32); h[:3] = (20240520, 1, n)
    with open(f"{d}/{name}_000.bin", "wb") as f:
        f.write(h.tobytes()); f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
EOF2
  (cd "$d" && timeout 300 "$b" -i "$d/train_*.bin" -j "$d/val_*.bin" -e "d$depth" -b "$micro"     -t "$seq" -d $((micro * seq)) -x 10 -v 100000 -m 1 -s 0 -h 0 -z 0 >"$d/log" 2>&1) || {
    echo "llm.c FAILED: $(tail -2 "$d/log" | tr '\n' ' ' | cut -c1-120)"; return 1; }
  python3 - "$d/log" "$micro" "$seq" <<'EOF2'
import re, sys
log = open(sys.argv[1]).read()
ms = [float(m) for m in re.findall(r"^step +\d+/\d+ \|.*\| ([0-9.]+) ms \|", log, re.M)][2:]
mib = re.search(r"device memory usage: (\d+) MiB", log)
tokens = int(sys.argv[2]) * int(sys.argv[3])
if not ms:
    print("no step lines"); sys.exit(1)
mean = sum(ms) / len(ms)
print(f"{tokens / mean * 1e3:.0f} {mean:.1f} {mib.group(1) if mib else '-'}")
EOF2
}

infinity_check
((bench)) || { san_train; profile_step; exit $status; }
# The step benchmark: ZERO_GPU_BENCH_GRID entries MODEL:MICRO[xACCUM]:STAGES[:MODES] (ACCUM
# micro-steps of gradient accumulation per step, default 1: PyTorch's baselines run without it, so
# an entry with ACCUM > 1 compares offload with our own no-offload only; a stage followed by
# "o" has the optimizer offloaded to the CPU, clipping 1.0: its CPU Adam runs after backward; "on"
# offloaded without clipping and with --offload_overlap: the CPU Adam overlaps backward; MODES
# joined by "+"), T=1024, bf16,
# world 1; each run's last wall_clock_breakdown lines (and the offload pipeline's) are printed under
# the table;
# ZERO_GPU_TORCH_MODES the PyTorch baselines (eager / compile / fsdp2) run beside entries without
# their own; the mode llmc runs llm.c's train_gpt2cu (cuDNN attention, its default recompute of
# GELU, bf16) at the same micro batch and T for the GPT-2 presets (llmc_step). Ratios are against each entry's first mode; an offloaded stage is also compared with the
# same stage without offload when the entry has it (issue 11: offload 1.5B >= 0.9x no-offload).
# Memory: PyTorch's max_memory_allocated; ours cudaMemGetInfo after the last step (context included).
grid=${ZERO_GPU_BENCH_GRID:-gpt2-124m:8:0,1,2,3,2o,2on:eager+compile+fsdp2+llmc gpt2-124m:64:0,3:compile+llmc gpt2-350m:8:0,3:eager+llmc gpt2-1558m:4:2,2o,2on:eager+llmc llama-1b:4:0,3:eager}
modes=${ZERO_GPU_TORCH_MODES:-eager}
seq=${ZERO_GPU_BENCH_SEQ:-1024}
echo
echo "## Step benchmark: bf16, T=$seq, one GPU, world 1 (mean of steps 3-N; ratio: tokens/s over PyTorch ${modes%% *})"
echo
echo "| model | run | tok/s | ms/step | MFU | GPU MiB | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for entry in $grid; do
  IFS=: read -r model micro stages entry_modes <<<"$entry"
  accum=1
  [[ $micro == *x* ]] && accum=${micro#*x} micro=${micro%%x*}
  fpt=$(python3 "$torch_step" --model "$model" --seq "$seq" --flops-per-token)
  base=""
  declare -A stage_tps=()
  these_modes=${entry_modes:-$modes}
  ((accum > 1)) && these_modes=""
  for mode in ${these_modes//+/ }; do
    if [[ $mode == llmc ]]; then
      if line=$(llmc_step "$model" "$micro"); then
        read -r tps ms mib <<<"$line"
        [[ -z $base ]] && base=$tps
        echo "| $model | llm.c (cuDNN) | $tps | $ms | $(python3 -c "print(f'{$tps * $fpt / 989e12:.1%}')") | $mib | $(python3 -c "print(f'{$tps/$base:.2f}')") |"
      else
        echo "| $model | llm.c | ${line:0:150} | | | | |"
      fi
      continue
    fi
    line=$(timeout 300 python3 "$torch_step" --model "$model" --batch "$micro" --seq "$seq" \
      --steps 8 --mode "$mode" 2>&1 | grep -E "^torch-|Error|error" | tail -1)
    tps=$(sed -n 's/.*: \([0-9,]*\) tok\/s.*/\1/p' <<<"$line" | tr -d ,)
    [[ -z $base && -n $tps ]] && base=$tps
    if [[ -n $tps ]]; then
      echo "| $model | PyTorch $mode | $tps | $(sed -n 's/.*(\([0-9.]*\) ms\/step).*/\1/p' <<<"$line") | $(sed -n 's/.*MFU \([0-9.]*%\).*/\1/p' <<<"$line") | $(sed -n 's/.*peak \([0-9,]*\) MiB.*/\1/p' <<<"$line") | $(python3 -c "print(f'{$tps/$base:.2f}')") |"
    else
      echo "| $model | PyTorch $mode | FAILED: ${line:0:120} | | | | |"
    fi
  done
  for st in ${stages//,/ }; do
    stage=${st%%o*} offload=none clip=1.0 overlap=()
    [[ $st == *o* ]] && offload=cpu
    [[ $st == *on ]] && clip=0 overlap=(--offload_overlap)
    label="stage $stage"
    ((accum > 1)) && label="micro $micro x accumulation $accum, $label"
    [[ $offload == cpu ]] && label+=" offload cpu"
    [[ $offload == cpu && $clip == 0 ]] && label+=" no clipping (overlap)"
    d=$work/bench-$model-$micro-$accum-s$st
    mkdir -p "$d"
    # wall_clock_breakdown (host timers, no added syncs): its lines are printed under the table.
    config "$stage" bf16 "$offload" "$micro" "$accum" "$clip" |
      sed 's/"gradient_clipping"/"wall_clock_breakdown": true, "steps_per_print": 4, "gradient_clipping"/' >"$d/ds.json"
    if timeout 300 "$zero" train --deepspeed "$d/ds.json" --model "preset:$model" --train_file "$corpus" \
      --data_dtype uint8 --block_size "$seq" --max_steps 8 --output_dir "$d/out" --quiet --device "$device" \
      "${overlap[@]}" >"$d/log" 2>&1; then
      mib=$(sed -n 's/.*GPU memory in use after training: \([0-9]*\) MiB.*/\1/p' "$d/log")
      row=$(python3 - "$d/out/metrics.jsonl" "$model" "$label" "$fpt" "${base:-0}" "${mib:--}" \
        "${stage_tps[$stage]:-0}" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t = [r for r in rows if r["step"] >= 3]
dt = t[-1]["elapsed_s"] - rows[1]["elapsed_s"]
tps = sum(r["tokens"] for r in t) / dt
base, own = float(sys.argv[5]), float(sys.argv[7])
ratio = f"{tps / base:.2f}" if base > 0 else "-"
if "offload" in sys.argv[3] and own > 0:
    ratio += f" ({tps / own:.2f}x no-offload)"
print(f"{tps:.0f}\t| {sys.argv[2]} | zero.cpp {sys.argv[3]} | {tps:.0f} | {dt / len(t) * 1e3:.1f} | "
      f"{tps * float(sys.argv[4]) / 989e12:.1%} | {sys.argv[6]} | {ratio} |")
EOF2
      )
      [[ $offload == none ]] && stage_tps[$stage]=${row%%$'\t'*}
      echo "${row#*$'\t'}"
    else
      echo "| $model | zero.cpp stage $st | FAILED: $(tail -2 "$d/log" | tr '\n' ' ' | cut -c1-150) | | | | |"
      status=1
    fi
    breakdown+=$(grep -E '\[Rank 0\] (time|offload)' "$d/log" | tail -2 | sed "s/^/    $model s$st: /")$'\n'
  done
done
echo
echo "wall_clock_breakdown (last window of each run; offload: the pipeline's host times per step):"
echo "${breakdown:-    none}"
san_train
profile_step
exit $status
