#!/usr/bin/env bash
# The main job: installs dependencies, builds `zero`, trains a small GPT on the embedded corpus
# (examples/data/kjv.txt, byte-level) on CPU for a couple of minutes, then samples from it.
# Usage: tools/quickstart.sh [extra zero-train flags, e.g. --max_steps 100]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
fi
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target zero
zero=build/release/bin/zero
out=out/quickstart

echo "== config check"
"$zero" config check examples/ds_config_quickstart.json
echo "== memory estimate for GPT-2 124M on 8 GPUs (DeepSpeed's estimator)"
"$zero" estimate --model preset:gpt2-124m --num_gpus_per_node 8 --stage 3
echo "== training (CPU)"
"$zero" train --deepspeed examples/ds_config_quickstart.json --model preset:gpt2-mini \
  --train_file examples/data/kjv.txt --data_dtype uint8 --block_size 128 \
  --output_dir "$out" --overwrite_output_dir --max_steps 600 --logging_steps 50 --save_final "$@"
echo "== sample"
"$zero" generate --model "$out/final" --prompt "And God said" --max_new_tokens 300 --seed 1
