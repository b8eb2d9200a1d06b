#!/usr/bin/env bash
# Stage-3 inference on CPU ranks (issue 29 item 4): `zero generate` under mpirun with 2 and 4 (3 for a batch)
# ranks, each holding a 1/N shard of every unit and gathering units as the model uses them, prints
# the tokens one rank with the whole model prints (greedy and sampled, a Gemma 2 fixture and the
# Llama preset), writes the same --prompts_file output (rank 0 alone writes it), and refuses the
# GPU / weight-stream flags on several ranks before any output.
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

# The GPU and the weight stream are one rank's: refused on several, naming why.
mpi 2 generate --model preset:llama-tiny --prompt_tokens 1,2 --offload_param nvme \
  --nvme_path "$out/nvme" >"$out/r.txt" 2>"$out/r.err" && fail "the stream flags were accepted"
grep -q "zero generate on 2 ranks shards the weights over CPU ranks" "$out/r.err" || { cat "$out/r.err"; fail "no reason"; }
[[ ! -s "$out/r.txt" ]] || fail "output before the refusal"
echo "PASS"
