#!/usr/bin/env bash
# Issue 13 item 18: what `zero train` writes to logs (the real binary, 2 ranks under mpirun).
#   plain      redirected 2-rank run: no "\r" or ESC in stdout, every line one whole message,
#              wall_clock_breakdown's DeepSpeed timer line, OUT/ds_config.effective.json parses
#              with train_batch_size resolved, a one-line config summary (the dump only with
#              --verbose, and no timer line without wall_clock_breakdown).
#   live       a terminal we own (script(1) gives one): the live line is used, and a message
#              printed while it shows starts on a fresh line.
#   rank_log   zero launch --enable_each_rank_log DIR: DIR/<timestamp>_rank<N>.log per rank.
#   errors     a bad flag on 2 ranks: one "[rank R] error: ..." line per rank, whole lines.
# Usage: logs_check.sh MODE ZERO_BINARY MPIEXEC TOKENS_FILE OUT_DIR
set -u
mode=$1 zero=$2 mpiexec=$3 tokens=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common=(--model preset:gpt2-tiny --train_file "$tokens" --block_size 16
        --per_device_train_batch_size 4 --learning_rate 1e-3)
mpi=("$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 2)
fail() { echo "FAIL: $*"; exit 1; }
cr=$(printf '\r') esc=$(printf '\033')

case $mode in
plain)
  printf '{"wall_clock_breakdown": true, "steps_per_print": 2, "train_batch_size": "auto", "zero_optimization": {"stage": 2}}' \
    >"$out/wcb.json"
  "${mpi[@]}" "$zero" train "${common[@]}" --max_steps 4 --deepspeed "$out/wcb.json" \
    --output_dir "$out/run" >"$out/stdout" 2>"$out/stderr" || fail "run exited $?: $(cat "$out/stderr")"
  if LC_ALL=C grep -q "[$cr$esc]" "$out/stdout"; then fail "control characters in stdout"; fi
  # Each line is one message: the banner, a progress line, or DeepSpeed's [Rank 0] lines.
  bad=$(grep -Ev '^(zero train: |step [0-9]+/4 \| loss [^|]+\|[^|]+\|[^|]+\| [0-9]+ tok/s \| host RSS [0-9]+ MiB \| ETA [^ ]+$|\[Rank 0\] )' "$out/stdout")
  [ -z "$bad" ] || fail "lines that are not one message: $bad"
  [ "$(grep -c '^step ' "$out/stdout")" -eq 2 ] || fail "expected 2 progress lines (steps 2, 4)"
  timer='^\[Rank 0\] time \(ms\) \| fwd: [0-9]+\.[0-9]{2} \| bwd: [0-9]+\.[0-9]{2} \| bwd_inner: [0-9]+\.[0-9]{2} \| bwd_allreduce: [0-9]+\.[0-9]{2} \| step: [0-9]+\.[0-9]{2}$'
  [ "$(grep -Ec "$timer" "$out/stdout")" -eq 2 ] || fail "expected 2 wall_clock_breakdown lines"
  [ "$(wc -l <"$out/stdout")" -lt 20 ] || fail "the effective config was dumped without --verbose"
  grep -q "^zero train: config: .*train_batch_size 8 (micro 4 x accumulation 1 x world 2).*ds_config.effective.json" \
    "$out/stdout" || fail "no one-line config summary"
  /usr/bin/python3 -c "import json,sys; c=json.load(open(sys.argv[1])); assert c['train_batch_size']==8 and c['wall_clock_breakdown'] is True, c" \
    "$out/run/ds_config.effective.json" || fail "ds_config.effective.json"
  [ ! -e "$out/run/ds_config.effective.json.tmp" ] || fail "tmp file left"
  # --verbose: the full dump, resolved there too; no timers without wall_clock_breakdown.
  "$zero" train "${common[@]}" --max_steps 2 --verbose --output_dir "$out/verbose" >"$out/v.stdout" 2>&1 ||
    fail "verbose run: $(cat "$out/v.stdout")"
  grep -q "effective DeepSpeed config:" "$out/v.stdout" || fail "--verbose printed no dump"
  grep -Eq '"train_batch_size": 4,? +// derived' "$out/v.stdout" || fail "dump: train_batch_size not resolved"
  if grep -q "time (ms)" "$out/v.stdout"; then fail "timer line without wall_clock_breakdown"; fi
  echo "PASS: plain lines under mpirun, timers, effective config"
  ;;
live)
  command -v script >/dev/null || { echo "PASS: skipped (no script(1))"; exit 0; }
  script -qec "$(printf '%q ' "$zero" train "${common[@]}" --max_steps 3 --save_steps 1 --output_dir "$out/live")" \
    /dev/null >"$out/tty" 2>&1 || fail "run: $(cat "$out/tty")"
  LC_ALL=C grep -q "$esc\[K" "$out/tty" || fail "no live line on a terminal we own"
  # A message (the save) never glued onto the live line: no line holds a progress line and it.
  if tr '\r' '\n' <"$out/tty" | grep -q 'ETA.*zero train'; then fail "message glued to the live line"; fi
  [ "$(grep -c 'saved checkpoint' "$out/tty")" -eq 3 ] || fail "expected 3 save messages"
  echo "PASS: live line on our own terminal, messages on fresh lines"
  ;;
rank_log)
  "$zero" launch --num_gpus 2 --enable_each_rank_log "$out/ranks" -- zero train "${common[@]}" \
    --max_steps 2 --output_dir "$out/run" >"$out/launch.out" 2>&1 || fail "launch: $(cat "$out/launch.out")"
  r0=$(ls "$out"/ranks/*_rank0.log 2>/dev/null) r1=$(ls "$out"/ranks/*_rank1.log 2>/dev/null)
  [ -n "$r0" ] && [ -n "$r1" ] || fail "per-rank files: $(ls "$out/ranks")"
  grep -q '^step 2/2 ' "$r0" || fail "rank 0's progress not in $r0"
  if grep -q '^step ' "$out/launch.out"; then fail "rank output reached the launcher's stdout"; fi
  echo "PASS: per-rank logs $(basename "$r0") $(basename "$r1")"
  ;;
errors)
  "${mpi[@]}" "$zero" train "${common[@]}" --max_steps 2 --data_dtype int7 --output_dir "$out/err" \
    >"$out/stdout" 2>"$out/stderr"
  rc=$?
  [ $rc -ne 0 ] || fail "a bad flag exited 0"
  # Every rank fails the same way: the start-up agreement prints that error once, by rank 0.
  [ "$(grep -c "error: --data_dtype int7" "$out/stderr")" -eq 1 ] ||
    fail "the error is not printed exactly once: $(cat "$out/stderr")"
  grep -q "^\[rank 0\] error: --data_dtype int7: expected uint8, uint16 or uint32$" "$out/stderr" ||
    fail "the error line does not name rank 0: $(cat "$out/stderr")"
  echo "PASS: one error line per rank, named"
  ;;
*) fail "unknown mode $mode" ;;
esac
