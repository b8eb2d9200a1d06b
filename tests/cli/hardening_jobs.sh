#!/usr/bin/env bash
# Issue 13 fault tests on the real binary (bounded polling, no fixed sleeps):
#   lock    a second job on a running job's --output_dir is refused naming the holder's pid and
#           host; SIGINT then stops the first at a step boundary with exit 130.
#   sigterm under mpirun on 2 ranks with NVMe swap files, SIGTERM to rank 1 only: every rank stops
#           after the same step, --save_on_interrupt writes a checkpoint that verifies, metrics has
#           one line per step up to it, and no swap file is left.
#   kill9   kill -9 of rank 1 while 2 ranks save every step (3 trials): resuming from `latest`
#           leaves metrics.jsonl with exactly one line per step 1..N.
#   alone   a rank that fails alone ends the job within seconds (not the 30-minute collective
#           timeout): rank 0 cannot use --output_dir; a bad token only in rank 1's share.
#   mismatch ranks started with different settings are refused, naming the key and both values.
# Usage: hardening_jobs.sh MODE ZERO_BINARY MPIEXEC TOKENS_FILE OUT_DIR
set -u
mode=$1 zero=$2 mpiexec=$3 tokens=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
export ZERO_COMM_TIMEOUT_MS=5000 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common=(--model preset:gpt2-tiny --train_file "$tokens" --block_size 16
        --per_device_train_batch_size 2 --quiet)
mpi=("$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 2)

# Jobs started in the background, killed on the way out whatever happens.
jobs_started=()
cleanup() {
  for j in "${jobs_started[@]}"; do kill -9 "$j" 2>/dev/null; done
  # Ranks mpirun started for this test (their command lines name this test's directory).
  for p in $(pgrep -f -- "--output_dir $out/"); do kill -9 "$p" 2>/dev/null; done
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; grep -v '^ \|^{\|^}' "$out"/*.log 2>/dev/null | tail -20; exit 1; }

# Waits (up to 20 s) until FILE has at least N lines.
wait_lines() {
  for _ in $(seq 1 200); do
    [[ -f "$1" && $(wc -l <"$1") -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}

# Waits (up to 60 s) for background job $1 to end; its status goes to $rc.
wait_job() {
  for _ in $(seq 1 600); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$1" 2>/dev/null; then kill -9 "$1"; fail "job $1 did not end"; fi
  wait "$1"
  rc=$?
}

# The pid of rank R of a running `zero train` writing to $1.
rank_pid() {
  for pid in $(pgrep -f "$zero train"); do
    if tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qx "$1" &&
       tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# Steps listed in a metrics file must be exactly 1..N.
check_metrics() {
  python3 - "$1" "$2" <<'PY' || fail "metrics $1 is not one line per step 1..$2"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
want = list(range(1, int(sys.argv[2]) + 1))
sys.exit(0 if steps == want else print(steps) or 1)
PY
}

case $mode in
lock)
  "$zero" train "${common[@]}" --max_steps 100000 --output_dir "$out/run" >"$out/a.log" 2>&1 &
  a=$!
  jobs_started+=($a)
  wait_lines "$out/run/metrics.jsonl" 1 || fail "job A did not start"
  "$zero" train "${common[@]}" --max_steps 4 --overwrite_output_dir --output_dir "$out/run" \
    >"$out/b.log" 2>&1
  b_rc=$?
  [[ $b_rc -eq 2 ]] || fail "second job exit $b_rc, expected 2"
  grep -q "is in use by another job: pid $a host $(hostname)" "$out/b.log" ||
    fail "second job's error does not name pid $a and host $(hostname)"
  kill -INT $a
  wait_job $a
  [[ $rc -eq 130 ]] || fail "SIGINT: exit $rc, expected 130"
  grep -q "SIGINT received: stopping after step" "$out/a.log" || fail "no SIGINT message"
  steps=$(wc -l <"$out/run/metrics.jsonl")
  check_metrics "$out/run/metrics.jsonl" "$steps"
  echo "PASS: second job refused naming pid $a; SIGINT exit 130 after step $steps"
  ;;
sigterm)
  cfg=$out/nvme.json
  echo "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$out/swap\"}}}" >"$cfg"
  mkdir -p "$out/swap"
  "${mpi[@]}" "$zero" train "${common[@]}" --deepspeed "$cfg" --max_steps 100000 \
    --save_on_interrupt --output_dir "$out/run" >"$out/a.log" 2>&1 &
  job=$!
  jobs_started+=($job)
  wait_lines "$out/run/metrics.jsonl" 2 || fail "training did not start"
  victim=$(rank_pid "$out/run" 1) || fail "rank 1 not found"
  kill -TERM "$victim"
  wait_job $job
  [[ $rc -ne 0 ]] || fail "exit status 0"
  grep -q "SIGTERM received: stopping after step" "$out/a.log" || fail "no SIGTERM message"
  [[ -z "$(ls -A "$out/swap")" ]] || fail "swap files left: $(ls -R "$out/swap")"
  step=$(sed 's/global_step//' "$out/run/latest")
  "$zero" ckpt verify "$out/run" >/dev/null || fail "the interrupt checkpoint does not verify"
  check_metrics "$out/run/metrics.jsonl" "$step"
  echo "PASS: SIGTERM to rank 1: all ranks stopped after step $step (exit $rc), saved, no swap files"
  ;;
kill9)
  for trial in $(seq 1 "${TRIALS:-3}"); do
    run=$out/run$trial
    "${mpi[@]}" "$zero" train "${common[@]}" --max_steps 100000 --save_steps 1 \
      --output_dir "$run" >"$out/t$trial.log" 2>&1 &
    job=$!
    jobs_started+=($job)
    wait_lines "$run/metrics.jsonl" $((2 + trial % 5)) || fail "trial $trial did not start"
    victim=$(rank_pid "$run" 1) || fail "rank 1 not found"
    kill -9 "$victim"
    wait_job $job
    step=$(sed 's/global_step//' "$run/latest")
    "${mpi[@]}" "$zero" train "${common[@]}" --max_steps $((step + 1)) --save_steps 1 \
      --resume_from_checkpoint "$run" --output_dir "$run" >"$out/r$trial.log" 2>&1 ||
      fail "trial $trial: resume from step $step failed"
    check_metrics "$run/metrics.jsonl" $((step + 1))
    echo "trial $trial: killed at checkpoint step $step; resumed metrics hold steps 1..$((step + 1))"
  done
  echo "PASS: kill -9 during saves, ${TRIALS:-3} trials"
  ;;
alone)
  # The collective timeout stays at its 30-minute default: only the abort can end these quickly.
  unset ZERO_COMM_TIMEOUT_MS
  touch "$out/not_a_dir"
  timeout 60 "${mpi[@]}" "$zero" train "${common[@]}" --max_steps 4 \
    --output_dir "$out/not_a_dir" >"$out/setup.log" 2>&1
  rc=$?
  [[ $rc -ne 124 ]] || fail "a set-up failure on rank 0 alone left the job waiting"
  [[ $rc -eq 2 ]] || fail "set-up failure on rank 0: exit $rc, expected 2"
  grep -q "not_a_dir" "$out/setup.log" || fail "the error does not name the output directory"
  # 64 samples of 16 tokens; sample 3 holds a token id past the vocabulary. Each step takes 4
  # samples (2 per rank), so exactly one rank reads it, in step 1.
  python3 -c "
import array, sys
t = array.array('H', [i % 200 for i in range(64 * 16 + 1)])
t[3 * 16 + 5] = 65000
t.tofile(open(sys.argv[1], 'wb'))" "$out/bad.bin"
  timeout 60 "${mpi[@]}" "$zero" train --model preset:gpt2-tiny --train_file "$out/bad.bin" \
    --block_size 16 --per_device_train_batch_size 2 --quiet --max_steps 8 \
    --output_dir "$out/run" >"$out/token.log" 2>&1
  rc=$?
  [[ $rc -ne 124 ]] || fail "a bad token in one rank's share left the other rank waiting"
  [[ $rc -eq 2 ]] || fail "bad token: exit $rc, expected 2"
  grep -q "^\[rank 1\] error: .*token id 65000" "$out/token.log" || fail "the error does not name rank 1"
  echo "PASS: a rank failing alone ends the job (exit $rc)"
  ;;
mismatch)
  mpmd=("$mpiexec" --oversubscribe --allow-run-as-root --bind-to none)
  timeout 60 "${mpmd[@]}" -np 1 "$zero" train "${common[@]}" --max_steps 4 --learning_rate 1e-3 \
    --output_dir "$out/lr" : -np 1 "$zero" train "${common[@]}" --max_steps 4 \
    --learning_rate 2e-3 --output_dir "$out/lr" >"$out/lr.log" 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "different learning rates: exit $rc, expected 2"
  grep -q "optimizer.params.lr: rank 0 has 0.001, rank 1 has 0.002" "$out/lr.log" ||
    fail "the error does not name the learning rate and both values"
  [[ ! -e "$out/lr/metrics.jsonl" ]] || fail "a refused run wrote metrics"
  timeout 60 "${mpmd[@]}" -np 1 "$zero" train "${common[@]}" --max_steps 4 --output_dir "$out/st" \
    : -np 1 "$zero" train "${common[@]}" --max_steps 6 --output_dir "$out/st" >"$out/st.log" 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "different --max_steps: exit $rc, expected 2"
  grep -q "rank 0 has 4, rank 1 has 6" "$out/st.log" || fail "the error does not name max_steps"
  echo "PASS: ranks with different settings refused"
  ;;
*) fail "unknown mode $mode" ;;
esac
