#!/usr/bin/env bash
# World 1 (2 OpenMP threads) vs world 2 (mpirun -np 2, 1 thread per rank) on one host: tokens/s per
# ZeRO stage x overlap_comm from `zero bench step`, the same tokens per step in both worlds (micro 2
# at world 1, micro 1 per rank at world 2, T 128). Binaries are interleaved round by round (A B A B)
# so a noisy shared machine hurts both alike; the summary is the median over rounds.
# Usage: [STEPS=4] [STAGES='0 1 2 3'] bench/cpu_world2.sh MODEL_DIR ROUNDS BIN_A [BIN_B]   (markdown to stdout)
# MODEL_DIR: an HF GPT-2 directory; the issue-14 shape (4 layers, 256 wide, vocab 50257) is made by
#   python -c "from transformers import GPT2Config, GPT2LMHeadModel as M; M(GPT2Config(
#   vocab_size=50257, n_positions=256, n_embd=256, n_layer=4, n_head=4)).save_pretrained('DIR')"
set -euo pipefail
model=$1 rounds=$2
shift 2
bins=("$@")
# On a shared machine libgomp's default spin-wait took 54% of world 1's cycles (world 2, one thread
# per rank, never spins): measure ZeRO, not the spinning, unless the caller says otherwise.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mpirun_flags=(--oversubscribe --allow-run-as-root --bind-to none -x OMP_WAIT_POLICY)
read -ra stages <<<"${STAGES:-0 1 2 3}"
common=(bench step --model "$model" --block_size 128 --steps "${STEPS:-4}" --warmup 1
  --stages "${stages[@]}")
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%F %H:%M') UTC;"
echo "OMP_WAIT_POLICY=$OMP_WAIT_POLICY."
echo
for ((r = 1; r <= rounds; ++r)); do
  for b in "${!bins[@]}"; do
    bin=${bins[$b]}
    echo "round $r bin $b: uptime:$(uptime | sed 's/.*load average://')" >&2
    echo "- round $r, ${bins[$b]}: load average$(uptime | sed 's/.*load average//')"
    "$bin" "${common[@]}" --micro_batch 2 2>/dev/null |
      awk -v b="$b" '$1 ~ /^[0-3]$/ {print b, 1, $1, $2, $4, $5}' >>"$raw"
    mpirun "${mpirun_flags[@]}" -np 2 "$bin" "${common[@]}" --micro_batch 1 2>/dev/null |
      awk -v b="$b" '$1 ~ /^[0-3]$/ {print b, 2, $1, $2, $4, $5}' >>"$raw"
  done
done
echo
echo "Median tokens/s over $rounds rounds (256 tokens per step in both worlds; comm wait ms/step):"
echo
printf '| bin | world | stage | overlap | tokens/s | comm wait ms |\n|---|---|---|---|---|---|\n'
python3 - "$raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    b, world, stage, overlap, tok, wait = line.split()
    rows.setdefault((int(b), int(world), int(stage), overlap), []).append((float(tok), float(wait)))
for key in sorted(rows):
    toks = [t for t, _ in rows[key]]
    waits = [w for _, w in rows[key]]
    print("| %d | %d | %d | %s | %.0f | %.1f |" % (*key, statistics.median(toks), statistics.median(waits)))
PY
