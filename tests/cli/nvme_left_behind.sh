#!/bin/sh
# Issue 32 item 1: a `zero train` on NVMe offload killed with SIGKILL leaves its swap files (nothing
# can run at its death); the next run on the same nvme_path removes them, says so, and leaves only
# its own files — which go when it ends.
# usage: nvme_left_behind.sh ZERO DATA OUT
set -u
zero=$1 data=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
swap=$out/swap
printf '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "%s"}, "offload_optimizer": {"device": "nvme", "nvme_path": "%s"}}}' \
  "$swap" "$swap" >"$out/ds.json"
fail() { echo "FAIL: $*"; exit 1; }
common="--model preset:gpt2-tiny --train_file $data --block_size 16 --per_device_train_batch_size 4 --learning_rate 1e-3 --quiet --overwrite_output_dir --deepspeed $out/ds.json"

# Run 1: long enough to be killed while it trains.
# shellcheck disable=SC2086
"$zero" train $common --max_steps 100000 --output_dir "$out/run1" >"$out/run1.log" 2>&1 &
pid=$!
i=0
until [ -n "$(ls "$swap" 2>/dev/null | grep '^zero_swap_')" ] && [ -s "$out/run1/metrics.jsonl" ]; do
  i=$((i + 1))
  [ $i -gt 600 ] && { kill -9 $pid; fail "run 1 made no swap directory in 60 s: $(cat "$out/run1.log")"; }
  sleep 0.1
done
kill -9 $pid
wait $pid 2>/dev/null
left=$(ls "$swap" | grep '^zero_swap_')
[ -n "$left" ] || fail "run 1 left nothing: the test would prove nothing"
bytes=$(du -sb "$swap" | cut -f1)
echo "run 1 SIGKILLed, left: $left ($bytes bytes)"

# Run 2 on the same nvme_path: reclaims run 1's directory, and ends with nothing left.
# shellcheck disable=SC2086
"$zero" train $common --max_steps 2 --output_dir "$out/run2" >"$out/run2.log" 2>&1 ||
  fail "run 2 exited $?: $(cat "$out/run2.log")"
for d in $left; do
  grep -q "removed $swap/$d (.* swap files, [0-9]* bytes" "$out/run2.log" ||
    fail "run 2 did not say it removed $d: $(cat "$out/run2.log")"
  [ ! -e "$swap/$d" ] || fail "$d is still there"
done
[ ! -e "$swap" ] || [ -z "$(ls -A "$swap")" ] || fail "left under nvme_path: $(ls -A "$swap")"
grep "removed" "$out/run2.log"
echo "PASS: the SIGKILLed run's swap directories were reclaimed by the next run, which left nothing"
