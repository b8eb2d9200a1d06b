#!/usr/bin/env bash
# CPU step benchmarks: tokens/s of the tiny and 124M presets (one rank), and step time per ZeRO stage
# at world sizes 1, 2 and 4 with overlap_comm off vs on (zero bench step). Prints markdown to stdout.
# Usage: bench/cpu_steps.sh [build/release/bin/zero]  > bench/results/cpu_steps.md
set -euo pipefail
zero=${1:-build/release/bin/zero}
mpirun_flags=(--oversubscribe --allow-run-as-root --bind-to none)
echo "# CPU step benchmarks"
echo
echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F)."
echo "Command: bench/cpu_steps.sh (each rank gets cores / local ranks OpenMP threads)."
echo
echo '## One rank: tokens/s by model (fp32, stage 0)'
echo '```'
"$zero" bench step --model preset:gpt2-tiny --stages 0 --micro_batch 8 --block_size 64 --steps 20
"$zero" bench step --model preset:gpt2-mini --stages 0 --micro_batch 8 --block_size 128 --steps 10
"$zero" bench step --model preset:gpt2-124m --stages 0 --micro_batch 1 --block_size 256 --steps 2 --warmup 1
echo '```'
echo
echo '## Step time per stage and world size (gpt2-mini, micro 4 x T 128 per rank)'
for n in 1 2 4; do
  echo '```'
  mpirun "${mpirun_flags[@]}" -np "$n" "$zero" bench step --model preset:gpt2-mini --micro_batch 4 \
    --block_size 128 --steps 8
  echo '```'
done
echo
echo '## bf16 at world 2 (gradients and gathers in bf16: half the wire bytes of fp32)'
echo '```'
mpirun "${mpirun_flags[@]}" -np 2 "$zero" bench step --model preset:gpt2-mini --micro_batch 4 \
  --block_size 128 --steps 8 --bf16
echo '```'
