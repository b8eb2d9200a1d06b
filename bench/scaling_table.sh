#!/usr/bin/env bash
# docs/scaling.md's H100 table: `zero estimate --throughput` for gpt2-1558m, llama-8b and
# llama-13b at 8, 64 and 512 GPUs (8 per node: NVLink in the node, NDR InfiniBand across), stages
# 0-3, overlap_comm off and on, bf16. Prints markdown. The inputs are stated in docs/scaling.md.
# Usage: bench/scaling_table.sh [build/release/bin/zero]
set -euo pipefail
zero=${1:-build/release/bin/zero}
# name | compute flags | optimizer ms | the compute's source
models=(
  "gpt2-1558m|--step_ms 191.0 --micro_batch 4 --seq_len 1024|14.5|measured: ZeRO.cpp on one H200, micro 4 x T 1024, stage 2 (performance-anchors.md 0b)"
  "llama-8b|--gpu h100 --mfu 0.4 --micro_batch 2 --seq_len 4096|67.1|FLOPs: (6N + 12LCT) x 8192 tokens at 40% of 989 TFLOP/s"
  "llama-13b|--gpu h100 --mfu 0.4 --micro_batch 2 --seq_len 4096|108.8|FLOPs: (6N + 12LCT) x 8192 tokens at 40% of 989 TFLOP/s"
)
for entry in "${models[@]}"; do
  IFS='|' read -r name flags optimizer source <<<"$entry"
  echo "### $name"
  echo
  echo "One GPU's step: $source; optimizer $optimizer ms of it (28 B/param at 3.35 TB/s)."
  echo
  echo "| GPUs | stage | step ms (overlap off) | tok/s/GPU | efficiency | step ms (overlap on) | tok/s/GPU | efficiency | exposed comm ms (on) | global tok/s (on) | states GiB/GPU | fits 80 GB |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for nodes in 1 8 64; do
    for stage in 0 1 2 3; do
      # shellcheck disable=SC2086
      off=$("$zero" estimate --model "preset:$name" --throughput $flags --optimizer_ms "$optimizer" \
        --num_gpus_per_node 8 --num_nodes "$nodes" --stage "$stage" --overlap_comm false --json)
      # shellcheck disable=SC2086
      on=$("$zero" estimate --model "preset:$name" --throughput $flags --optimizer_ms "$optimizer" \
        --num_gpus_per_node 8 --num_nodes "$nodes" --stage "$stage" --overlap_comm true --json)
      /usr/bin/python3 - "$off" "$on" <<'EOF'
import json, sys
off, on = (json.loads(a)["rows"][0] for a in sys.argv[1:3])
gib = off["model_states_bytes"] / 2**30
print("| %d | %d | %.1f | %.0f | %.3f | %.1f | %.0f | %.3f | %.1f | %.3g | %.1f | %s |" % (
    off["world_size"], off["stage"], off["step_ms"], off["tokens_per_s_per_gpu"],
    off["scaling_efficiency"], on["step_ms"], on["tokens_per_s_per_gpu"], on["scaling_efficiency"],
    on["exposed_comm_ms"], on["tokens_per_s"], gib,
    "yes" if gib <= 55 else ("tight" if gib <= 74.5 else "no")))
EOF
    done
  done
  echo
done
