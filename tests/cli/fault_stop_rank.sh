#!/usr/bin/env bash
# A rank that stops responding (SIGSTOP) during `zero train` on 2 ranks: the other rank must exit
# non-zero within the collective timeout with a message naming the stopped rank, and the job must
# end (no hang). Usage: fault_stop_rank.sh ZERO_BINARY MPIEXEC TOKENS_FILE OUT_DIR
set -u
zero=$1 mpiexec=$2 tokens=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
export ZERO_COMM_TIMEOUT_MS=3000 OMP_NUM_THREADS=1
"$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 2 "$zero" train \
  --model preset:gpt2-tiny --train_file "$tokens" --block_size 16 --per_device_train_batch_size 2 \
  --max_steps 100000 --quiet --output_dir "$out/run" >"$out/log" 2>&1 &
job=$!
# Wait until training is under way (metrics appear), then stop rank 1.
for _ in $(seq 1 100); do
  [[ -s "$out/run/metrics.jsonl" ]] && break
  sleep 0.1
done
victim=""
# Only this test's job: other two-rank tests may be running beside it.
for pid in $(pgrep -f "$zero train.*--output_dir $out/run"); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
    victim=$pid
  fi
done
if [[ -z "$victim" ]]; then
  echo "FAIL: could not find rank 1"; kill -9 $job; exit 1
fi
kill -STOP "$victim"
start=$(date +%s)
# The job must end by itself; give it 60 s before calling it a hang.
for _ in $(seq 1 600); do
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
if kill -0 $job 2>/dev/null; then
  echo "FAIL: the job hung"; kill -CONT "$victim"; kill -9 "$victim" $job; exit 1
fi
wait $job
rc=$?
kill -9 "$victim" 2>/dev/null
elapsed=$(( $(date +%s) - start ))
cat "$out/log" | grep -v "^ \|^{\|^}" | head -20
if [[ $rc -eq 0 ]]; then echo "FAIL: exit status 0"; exit 1; fi
if ! grep -q "rank(s) that did not reach it: 1" "$out/log"; then echo "FAIL: rank 1 not named"; exit 1; fi
echo "PASS: exit $rc after ${elapsed}s, rank 1 named"
