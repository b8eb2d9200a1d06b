#!/usr/bin/env bash
# `zero eval` on several CPU ranks (issue 29 item 5): under mpirun with 2 and 3 ranks each rank
# holds a 1/N shard of every unit, evaluates its own samples of each round (zero train's split:
# 200 samples in batches of 3 leave the last round short and some ranks only padding), and rank 0
# alone prints the JSON line: the eval loss of one rank with the whole model (the all-reduce sums
# in another order: 1e-6 relative), the same token count; so do 2 ranks with their block shards in
# their own swap files (--offload_param nvme). --max_host_memory is refused on several CPU ranks
# before any output.
# Usage: eval_ranks.sh ZERO MPIEXEC HF_MODEL_DIR TOKENS_FILE OUT_DIR
set -u
zero=$1 mpiexec=$2 hf=$3 tokens=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
mpi() { local n=$1; shift; "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np "$n" "$zero" "$@"; }

for model in "$hf" preset:llama-tiny; do
  args=(eval --model "$model" --validation_file "$tokens" --block_size 16 --per_device_eval_batch_size 3)
  "$zero" "${args[@]}" >"$out/one.json" 2>"$out/one.err" || { cat "$out/one.err"; fail "one rank"; }
  for n in 2 3; do
    mpi "$n" "${args[@]}" >"$out/n$n.json" 2>"$out/n$n.err" || { cat "$out/n$n.err"; fail "$n ranks"; }
    [[ $(grep -c . "$out/n$n.json") -eq 1 ]] || fail "$n ranks printed $(grep -c . "$out/n$n.json") lines"
    grep -q "zero eval: $n ranks, each holding a 1/$n shard of every unit" "$out/n$n.err" ||
      { cat "$out/n$n.err"; fail "no shard line"; }
    /usr/bin/python3 - "$out/one.json" "$out/n$n.json" <<'PY' || fail "$model: $n ranks differ from one rank"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
ok = a["eval_tokens"] == b["eval_tokens"] and abs(a["eval_loss"] - b["eval_loss"]) <= 1e-6 * abs(a["eval_loss"])
print("one rank", a, "\nN ranks ", b)
sys.exit(0 if ok else 1)
PY
  done
  echo "ok: $model: 2 and 3 ranks evaluate one rank's loss over $(/usr/bin/python3 -c "import json; print(json.load(open('$out/one.json'))['eval_tokens'])") tokens"
done

# The block shards in each rank's swap file (--offload_param nvme): one rank's loss again.
args=(eval --model preset:llama-tiny --validation_file "$tokens" --block_size 16 --per_device_eval_batch_size 3)
"$zero" "${args[@]}" >"$out/one.json" 2>"$out/one.err" || { cat "$out/one.err"; fail "one rank"; }
mpi 2 "${args[@]}" --offload_param nvme --nvme_path "$out/nvme" >"$out/nv.json" 2>"$out/nv.err" ||
  { cat "$out/nv.err"; fail "2 ranks, offload_param nvme"; }
grep -q "zero eval: 2 ranks, each holding a 1/2 shard of every unit ([0-9]* bytes in host memory; its blocks'" \
  "$out/nv.err" || { cat "$out/nv.err"; fail "no nvme shard line"; }
/usr/bin/python3 - "$out/one.json" "$out/nv.json" <<'PY' || fail "2 ranks from nvme differ from one rank"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if a["eval_tokens"] == b["eval_tokens"] and abs(a["eval_loss"] - b["eval_loss"]) <= 1e-6 * abs(a["eval_loss"]) else 1)
PY
[[ -z $(ls -A "$out/nvme" 2>/dev/null) ]] || fail "swap files left: $(ls -R "$out/nvme")"
echo "ok: 2 ranks with their block shards on nvme evaluate one rank's loss"

mpi 2 "${args[@]}" --offload_param nvme --nvme_path "$out/nvme" --max_host_memory 1GiB >"$out/r.txt" \
  2>"$out/r.err" && fail "--max_host_memory was accepted"
grep -q "^error: .*--max_host_memory on 2 CPU ranks (zero eval): not planned there" "$out/r.err" ||
  { cat "$out/r.err"; fail "no reason"; }
[[ ! -s "$out/r.txt" ]] || fail "output before the refusal"
echo "ok: --max_host_memory is refused on 2 CPU ranks"
echo PASS
