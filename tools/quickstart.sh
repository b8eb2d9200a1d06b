#!/usr/bin/env bash
# The main job: installs dependencies, builds `zero`, trains a small GPT on the embedded corpus
# (examples/data/kjv.txt, byte-level) on CPU for under 3 minutes, then samples from it and prints
# the share of the sample's words found in the corpus (tools/corpus_words.py).
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
  --train_file examples/data/kjv.txt --data_dtype uint8 --data_order shuffle --block_size 128 \
  --output_dir "$out" --overwrite_output_dir --max_steps 1600 --logging_steps 100 --save_final "$@"
echo "== sample"
prompt="And God said"
"$zero" generate --model "$out/final" --prompt "$prompt" --max_new_tokens 300 --temperature 0.6 \
  --seed 1 | tee "$out/sample.txt"
echo
echo "== check: does the sample read as words?"
python3 tools/corpus_words.py examples/data/kjv.txt --prompt "$prompt" <"$out/sample.txt"
