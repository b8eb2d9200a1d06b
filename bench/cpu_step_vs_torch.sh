#!/usr/bin/env bash
# One GPT-2 training step on CPU (fp32, stage 0, one rank, AdamW + clipping, random tokens):
# `zero bench step` next to the same model and step in PyTorch (bench/torch/gpt2_cpu_step.py,
# Debian's python3-torch), run in the same invocation with the same threads; prints the ratio.
# Usage: bench/cpu_step_vs_torch.sh [build/release/bin/zero] [T]
set -euo pipefail
zero=${1:-build/release/bin/zero}
T=${2:-256}
threads=$(nproc)
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "python3-torch is not installed (apt-get install python3-torch): no baseline" >&2
  exit 1
fi
ours=$(OMP_NUM_THREADS=$threads "$zero" bench step --model preset:gpt2-124m --stages 0 \
  --micro_batch 1 --block_size "$T" --steps 3 --warmup 1)
echo "$ours"
theirs=$(/usr/bin/python3 "$(dirname "$0")/torch/gpt2_cpu_step.py" --T "$T" --steps 3 --warmup 1 \
  --threads "$threads")
echo "$theirs"
# The overlap-off row of stage 0 is the plain step.
our_ms=$(echo "$ours" | awk '$1 == "0" && $2 == "off" {print $3}')
their_ms=$(echo "$theirs" | sed -n 's/^torch step: \([0-9.]*\) ms.*/\1/p')
awk -v a="$our_ms" -v b="$their_ms" \
  'BEGIN {printf "zero %.1f ms/step vs torch %.1f ms/step: %.2fx PyTorch\n", a, b, b / a}'
