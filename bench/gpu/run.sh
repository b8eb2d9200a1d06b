#!/usr/bin/env bash
# ZeRO.cpp's GPU kernels against PyTorch's on the same GPU, same shapes (GPT-2 124M, B=8, T=1024,
# bf16), in one run: prints a markdown table (ratio > 1: ours is faster).
#   bench/gpu/run.sh KERNELS_GPU_BENCH [--iters N]
# tools/gpu/verify.sh runs it on the GPU machine with the packed binary.
set -euo pipefail
bench=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
ours=$(mktemp) theirs=$(mktemp)
trap 'rm -f "$ours" "$theirs"' EXIT
"$bench" "$@" >"$ours"
python3 "$here/torch_kernels.py" "$@" >"$theirs"
echo "| op | ZeRO.cpp ms | PyTorch $(python3 -c 'import torch; print(torch.__version__)') ms | ratio | ours | PyTorch |"
echo "| --- | ---: | ---: | ---: | --- | --- |"
join -t $'\t' <(sort "$ours") <(sort "$theirs") |
  awk -F '\t' '{ printf "| %s | %.3f | %.3f | %.2fx | %s | %s |\n", $1, $2, $4, $4 / $2, $3, $5 }'
