#!/usr/bin/env bash
# Stage-3 inference on CPU ranks (issue 29 item 4): `zero generate` under mpirun with 2 and 4 (3 for a batch)
# ranks, each holding a 1/N shard of every unit and gathering units as the model uses them, prints
# the tokens one rank with the whole model prints (greedy and sampled, a Gemma 2 fixture and the
# Llama preset), writes the same --prompts_file output (rank 0 alone writes it), also with the block
# shards in each rank's swap file (--offload_param nvme, 3 ranks), and refuses --max_host_memory on
# several CPU ranks (and GPU budgets too small for one rank) before any output. `--device cuda` on 2 ranks partitions the blocks over the GPUs (one per rank; a shared
# GPU gathers through pinned host memory) and prints one GPU rank's tokens, also with the shards
# in pinned memory (--offload_param cpu); without a usable GPU it is refused as on one rank, saying why (the
# emulated GPU ranks' tokens are tested in cuda_engine_emu_test's GatheredOnEmulator).
# Usage: generate_ranks.sh ZERO MPIEXEC HF_MODEL_DIR PROMPTS_MODEL OUT_DIR
set -u
zero=$1 mpiexec=$2 hf=$3 bpe=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
mpi() { local n=$1; shift; "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np "$n" "$zero" "$@"; }

for model in "$hf" preset:llama-tiny; do
  for sampling in "--temperature 0" "--temperature 0.8 --top_k 20 --seed 7"; do
    args=(generate --model "$model" --prompt_tokens 5,6,7,8 --max_new_tokens 16 $sampling)
    "$zero" "${args[@]}" >"$out/one.txt" 2>"$out/one.err" || { cat "$out/one.err"; fail "one rank"; }
    for n in 2 4; do
      mpi "$n" "${args[@]}" >"$out/n$n.txt" 2>"$out/n$n.err" || { cat "$out/n$n.err"; fail "$n ranks"; }
      cmp -s "$out/one.txt" "$out/n$n.txt" ||
        fail "$model $sampling: $n ranks printed $(cat "$out/n$n.txt"), one rank $(cat "$out/one.txt")"
      grep -q "zero generate: $n ranks, each holding a 1/$n shard" "$out/n$n.err" || fail "no shard line"
      [[ $(grep -c "zero generate: $n ranks" "$out/n$n.err") -eq 1 ]] || fail "the line printed twice"
    done
    echo "ok: $model $sampling: 2-4 ranks print $(wc -w <"$out/one.txt") tokens as one rank"
  done
done

# A --prompts_file batch: the same JSONL from rank 0 as from one rank.
printf '%s\n' '{"prompt": "Hello"}' '{"prompt": "a b c", "max_new_tokens": 4}' '{"prompt": "Once"}' \
  >"$out/prompts.jsonl"
batch=(generate --model "$bpe" --prompts_file "$out/prompts.jsonl" --max_new_tokens 8 --batch_size 2)
"$zero" "${batch[@]}" --output "$out/one.jsonl" 2>"$out/b1.err" || { cat "$out/b1.err"; fail "batch"; }
mpi 3 "${batch[@]}" --output "$out/n3.jsonl" 2>"$out/b3.err" || { cat "$out/b3.err"; fail "batch 3"; }
cmp -s "$out/one.jsonl" "$out/n3.jsonl" || fail "the batch output differs: $(diff "$out/one.jsonl" "$out/n3.jsonl")"
echo "ok: --prompts_file on 3 ranks writes one rank's output"

# CPU ranks with --offload_param nvme: each rank's block shards in its own swap file under
# --nvme_path (read back one block ahead of each gather): one rank's tokens, the swap directories
# gone after the run.
nv=(generate --model preset:llama-tiny --prompt_tokens 5,6,7,8 --max_new_tokens 16 --temperature 0.8 --top_k 20 --seed 7)
"$zero" "${nv[@]}" >"$out/nv1.txt" 2>"$out/nv1.err" || { cat "$out/nv1.err"; fail "one rank"; }
mpi 3 "${nv[@]}" --offload_param nvme --nvme_path "$out/nvme" >"$out/nv3.txt" 2>"$out/nv3.err" ||
  { cat "$out/nv3.err"; fail "3 CPU ranks, offload_param nvme"; }
cmp -s "$out/nv1.txt" "$out/nv3.txt" ||
  fail "3 CPU ranks from nvme printed $(cat "$out/nv3.txt"), one rank $(cat "$out/nv1.txt")"
grep -q "zero generate: 3 ranks, each holding a 1/3 shard of every unit ([0-9]* bytes in host memory; its blocks' [0-9]* bytes in its own swap file under $out/nvme/" \
  "$out/nv3.err" || { cat "$out/nv3.err"; fail "no nvme shard line"; }
[[ -z $(ls -A "$out/nvme" 2>/dev/null) ]] || fail "swap files left: $(ls -R "$out/nvme")"
echo "ok: 3 CPU ranks with their block shards on nvme print one rank's tokens"

# CPU ranks take no host budget (not planned there); GPU ranks take offload_param cpu / nvme (their
# shards off the GPU) and the budgets, one rank's: a budget too small for two gather slots is
# refused naming it, the rank and the bytes needed. Refused before any output (and before the GPU
# is probed).
refused() {  # device regex flags...
  local device=$1 want=$2
  shift 2
  mpi 2 generate --model preset:llama-tiny --prompt_tokens 1,2 --device "$device" "$@" \
    >"$out/r.txt" 2>"$out/r.err" && fail "accepted: $device $*"
  grep -q "$want" "$out/r.err" || { cat "$out/r.err"; fail "no reason: $device $*"; }
  [[ ! -s "$out/r.txt" ]] || fail "output before the refusal: $device $*"
}
refused cpu "^error: --max_host_memory on 2 CPU ranks (zero generate): not planned there" \
  --offload_param nvme --nvme_path "$out/nvme" --max_host_memory 1GiB
refused cuda "^error: --max_gpu_memory 1000 is too small for rank [01] of 2: [0-9]* bytes needed" \
  --offload_param cpu --max_gpu_memory 1000
refused cuda "^error: --max_host_memory 1000 is too small for rank [01] of 2: [0-9]* bytes needed" \
  --offload_param nvme --nvme_path "$out/nvme" --max_host_memory 1000
echo "ok: a host budget on CPU ranks and budgets too small for one GPU rank are refused on 2 ranks"

# GPU ranks: the tokens of one GPU rank (an fp32 preset: the one rank's fp32 copy is the
# checkpoint's dtype); without a GPU, one rank's refusal.
gpu=(generate --model preset:llama-tiny --prompt_tokens 5,6,7,8 --max_new_tokens 16 --temperature 0 --device cuda)
if "$zero" "${gpu[@]}" >"$out/g1.txt" 2>"$out/g1.err"; then
  mpi 2 "${gpu[@]}" >"$out/g2.txt" 2>"$out/g2.err" || { cat "$out/g2.err"; fail "2 GPU ranks"; }
  cmp -s "$out/g1.txt" "$out/g2.txt" ||
    fail "2 GPU ranks printed $(cat "$out/g2.txt"), one $(cat "$out/g1.txt")"
  grep -q "zero generate: 2 GPU ranks, .* a 1/2 shard of every block on its device" "$out/g2.err" ||
    { cat "$out/g2.err"; fail "no partition line"; }
  mpi 2 "${gpu[@]}" --offload_param cpu --max_gpu_memory 8GiB >"$out/g2c.txt" 2>"$out/g2c.err" ||
    { cat "$out/g2c.err"; fail "2 GPU ranks, offload_param cpu"; }
  cmp -s "$out/g1.txt" "$out/g2c.txt" || fail "2 GPU ranks from pinned shards printed $(cat "$out/g2c.txt")"
  grep -q "shard of every block in pinned host memory" "$out/g2c.err" || { cat "$out/g2c.err"; fail "no plan line"; }
  echo "ok: 2 GPU ranks print one GPU rank's $(wc -w <"$out/g1.txt") tokens (shards on the GPUs and in pinned memory)"
else
  mpi 2 "${gpu[@]}" >"$out/g2.txt" 2>"$out/g2.err" && fail "--device cuda ran on 2 ranks without a GPU"
  grep -q "^error: --device cuda: " "$out/g2.err" || { cat "$out/g2.err"; fail "no reason"; }
  grep -q "shards the weights" "$out/g2.err" && fail "--device cuda refused as a rank combination"
  [[ ! -s "$out/g2.txt" ]] || fail "output before the refusal"
  echo "ok: no usable GPU here: --device cuda on 2 ranks is refused as on one ($(head -c 60 "$out/g1.err")...)"
fi
echo "PASS"
