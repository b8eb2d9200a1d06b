#!/usr/bin/env bash
# NOT YET MEASURED: prepared without a GPU (issue 29 item 2), never run on one. ZeRO-Inference's
# weight stream on a real GPU, printed as markdown:
#   0. resident decoding (llama-1b bf16, batch 1 and 64) against HF transformers' generate;
#   1. streamed equals resident on the GPU: a Llama-3.2-1B-shaped bf16 directory (random weights,
#      make_random_llama.py) through a --prompts_file batch of 8, resident (--offload_param none
#      under a large --max_gpu_memory, so both hold the bf16 weights) against --offload_param cpu (and nvme when NVME_DIR is given) under a small budget:
#      the output files must be identical;
#   2. llama-8b in bf16 (16 GB of weights: a random-weight HF directory from
#      bench/gpu/make_random_llama.py unless MODEL_8B names a real one) streamed from pinned host
#      memory under --max_gpu_memory 6GiB at batch 1, 8 and 64: decode tokens/s against the PCIe
#      bound, batch x H2D bandwidth / weight bytes per forward, the bandwidth measured in the same
#      run (pinned host -> device, torch when it is there, else the zero runs' own best step);
#   3. llama-13b (26 GB bf16) the same at batch 8 when the host has the memory (HOST_GB).
# Each step prints its line even if an earlier one failed.
#
#   inference_stream.sh ZERO_BINARY WORKDIR [NVME_DIR]
set -uo pipefail
zero=$1 work=$2 nvme=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
make_llama=$here/make_random_llama.py  # beside this script in a pack; in the repository, bench/gpu/
[[ -f $make_llama ]] || make_llama=$here/../../bench/gpu/make_random_llama.py
budget=${BUDGET:-6GiB}
new_tokens=${NEW_TOKENS:-16}
mkdir -p "$work"

prompts() {  # count length -> a --prompts_file of token-id prompts on stdout
  python3 - "$1" "$2" <<'EOF'
import json, random, sys
n, t = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(1)
for i in range(n):
    print(json.dumps({"prompt_tokens": [rng.randrange(3, 30000) for _ in range(t)], "id": i}))
EOF
}

echo "## ZeRO-Inference weight stream (tools/gpu/inference_stream.sh)"
echo
prompts 8 24 >"$work/p8.jsonl"
prompts 64 24 >"$work/p64.jsonl"

# 0. Resident decoding against HF transformers' generate (bench/gpu/hf_generate.py: bf16, SDPA, a
# static cache, greedy) on the same random-weight directory and prompts: tokens/s at batch 1 and
# 64 (the issue's bar: >= 1.0x at both) and how many sequences give the same greedy tokens (bf16
# rounding differs between the two, so a tie can split a random model's sequence; the exactness
# check is the CPU fixtures' of tests/cli/hf_matrix). RESIDENT_MODELS (default llama-1b; llama-8b
# too when given), RESIDENT_NEW_TOKENS (default 64).
hf_generate=$here/hf_generate.py
[[ -f $hf_generate ]] || hf_generate=$here/../../bench/gpu/hf_generate.py
resident_tokens=${RESIDENT_NEW_TOKENS:-64}
echo "| model | batch | zero.cpp tokens/s | transformers tokens/s | ratio | same tokens |"
echo "|---|---|---|---|---|---|"
for m in ${RESIDENT_MODELS:-llama-1b}; do
  dir=$work/$m
  [[ $m == llama-8b && -n ${MODEL_8B:-} ]] && dir=$MODEL_8B
  [[ -f $dir/config.json ]] || python3 "$make_llama" "$dir" "$m" >/dev/null
  for batch in 1 64; do
    prompts "$batch" 24 >"$work/r$batch.jsonl"
    ours=$work/resident-$m-$batch
    # --offload_param none: the weights stay bf16 on the GPU, as transformers holds them.
    timeout 600 "$zero" generate --model "$dir" --device cuda --offload_param none --temperature 0 \
      --max_new_tokens "$resident_tokens" --batch_size "$batch" --prompts_file "$work/r$batch.jsonl" \
      --output "$ours.jsonl" 2>"$ours.err" ||
      { echo "| $m | $batch | FAILED: $(tail -1 "$ours.err") | | | |"; continue; }
    timeout 600 python3 "$hf_generate" "$dir" "$work/r$batch.jsonl" "$ours.hf.jsonl" --batch "$batch" \
      --max_new_tokens "$resident_tokens" >"$ours.hf.log" 2>&1 ||
      { echo "| $m | $batch | | FAILED: $(tail -1 "$ours.hf.log") | | |"; continue; }
    python3 - "$ours.err" "$ours.hf.log" "$ours.jsonl" "$ours.hf.jsonl" "$m" "$batch" <<'EOF'
import json, re, sys
err, hf_log, a, b, m, batch = sys.argv[1:]
ours = float(re.findall(r"new tokens in [\d.]+ s, ([\d.]+) tokens/s", open(err).read())[-1])
theirs = float(re.search(r"hf: \d+ new tokens in [\d.]+ s, ([\d.]+) tokens/s", open(hf_log).read()).group(1))
za = {r["index"]: r["completion_tokens"] for r in map(json.loads, open(a))}
hb = {r["index"]: r["completion_tokens"] for r in map(json.loads, open(b))}
same = sum(za[i] == hb.get(i) for i in za)
print(f"| {m} | {batch} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x | {same} of {len(za)} |")
EOF
  done
done
echo

# 1. Streamed equals resident, on the GPU.
dir1=$work/llama-1b
[[ -f $dir1/config.json ]] || python3 "$make_llama" "$dir1" llama-1b >/dev/null
common="--model $dir1 --device cuda --temperature 0 --max_new_tokens 8 --batch_size 8 --prompts_file $work/p8.jsonl"
"$zero" generate $common --offload_param none --max_gpu_memory 60GiB --output "$work/resident.jsonl" \
  2>"$work/resident.err" || echo "- resident llama-1b FAILED: $(tail -1 "$work/resident.err")"
for off in cpu nvme; do
  extra=""
  if [[ $off == nvme ]]; then
    [[ -n $nvme ]] || continue
    extra="--nvme_path $nvme"
  fi
  if "$zero" generate $common --offload_param $off $extra --max_gpu_memory 2GiB \
    --output "$work/streamed_$off.jsonl" 2>"$work/streamed_$off.err"; then
    if cmp -s "$work/resident.jsonl" "$work/streamed_$off.jsonl"; then
      echo "- llama-1b batch 8, streamed from $off under 2GiB: same lines as resident ($(grep -c . "$work/resident.jsonl") lines)"
    else
      echo "- llama-1b batch 8, streamed from $off: LINES DIFFER from resident"
    fi
    grep -h 'streamed\|resident' "$work/streamed_$off.err" | sed 's/^/  - /'
  else
    echo "- llama-1b streamed from $off FAILED: $(tail -1 "$work/streamed_$off.err")"
  fi
  [[ -n $nvme && $off == nvme && -n "$(ls -A "$nvme" 2>/dev/null)" ]] && echo "  - files left in $nvme: $(ls "$nvme")"
done

# The H2D bandwidth of pinned host memory on this machine, now.
bw=$(python3 - 2>/dev/null <<'EOF'
import time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
y = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
for _ in range(2): y.copy_(x, non_blocking=True)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): y.copy_(x, non_blocking=True)
torch.cuda.synchronize(); print(10 * (1 << 30) / (time.perf_counter() - t))
EOF
)
echo
echo "Pinned host -> device: ${bw:-unknown (no torch)} bytes/s"
echo

run_model() {  # label model-dir batch prompts
  local label=$1 dir=$2 batch=$3 file=$4 err
  err=$work/$label-b$batch.err
  if ! "$zero" generate --model "$dir" --device cuda --offload_param cpu --max_gpu_memory "$budget" \
    --temperature 0 --max_new_tokens "$new_tokens" --batch_size "$batch" --prompts_file "$file" \
    --output "$work/$label-b$batch.jsonl" 2>"$err"; then
    echo "| $label | $batch | FAILED: $(tail -1 "$err") | | |"
    return
  fi
  python3 - "$err" "$batch" "${bw:-0}" "$label" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
batch, bw, label = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
plan = re.search(r"through (\d+) device slots of (\d+) bytes \((\d+) of (\d+) blocks", text)
speed = re.search(r"new tokens in ([\d.]+) s, ([\d.]+) tokens/s", text)
if not plan or not speed:
    print(f"| {label} | {batch} | no plan / speed line | | |"); sys.exit()
block, blocks = int(plan.group(2)), int(plan.group(4))
per_forward = block * blocks  # every block copied once per forward (the resident units stay)
tps = float(speed.group(2))
bound = batch * bw / per_forward if bw else 0
ratio = f"{tps / bound:.2f}" if bound else "n/a"
print(f"| {label} | {batch} | {tps:.2f} tokens/s | {bound:.2f} tokens/s ({per_forward / 1e9:.1f} GB per forward) | {ratio} |")
EOF
}

# 2. llama-8b, bf16, under the budget.
dir8=${MODEL_8B:-$work/llama-8b}
[[ -f $dir8/config.json ]] || python3 "$make_llama" "$dir8" llama-8b >/dev/null
echo "| model | batch | decode+prefill tokens/s | PCIe bound | ratio |"
echo "|---|---|---|---|---|"
prompts 1 24 >"$work/p1.jsonl"
run_model llama-8b "$dir8" 1 "$work/p1.jsonl"
run_model llama-8b "$dir8" 8 "$work/p8.jsonl"
run_model llama-8b "$dir8" 64 "$work/p64.jsonl"

# 3. llama-13b when the host holds its 26 GB of pinned blocks twice over.
host_gb=${HOST_GB:-$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)}
if ((host_gb >= 60)); then
  dir13=${MODEL_13B:-$work/llama-13b}
  [[ -f $dir13/config.json ]] || python3 "$make_llama" "$dir13" llama-13b >/dev/null
  run_model llama-13b "$dir13" 8 "$work/p8.jsonl"
else
  echo "| llama-13b | 8 | skipped: ${host_gb} GB of host memory available | | |"
fi
