#!/bin/sh
# Issue 33: a DeepSpeed checkpoint made by DeepSpeed itself (tests/fixtures/checkpoint/deepspeed/*)
# imported with `zero ckpt import`, consolidated with `zero ckpt to-fp32`, then resumed with
# `zero train --resume_from_checkpoint`: the resumed losses must equal DeepSpeed's own continuation
# after its load_checkpoint (expected.json) within 1e-5.
#   deepspeed_resume.sh ZERO FIXTURE_DIR WORK_DIR STAGE [LAUNCH...]
# STAGE: the ZeRO stage of the resumed run (DeepSpeed's may differ); LAUNCH: e.g. mpirun -np 2.
# ZERO_DS_DIRECT=1: resume from FIXTURE_DIR itself (zero train imports it into OUT/deepspeed_import).
set -eu
zero=$1 fix=$2 work=$3 stage=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
"$zero" ckpt import "$fix" "$work/ck" --model "$fix/config.json"
"$zero" ckpt to-fp32 "$work/ck" "$work/hf" >/dev/null
/usr/bin/python3 - "$fix/ds_config.json" "$stage" "$work/ds_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["zero_optimization"]["stage"] = int(sys.argv[2])
# The batch stays 4 sequences; --per_device_train_batch_size x world makes it.
c.pop("train_batch_size")
c.pop("train_micro_batch_size_per_gpu")
json.dump(c, open(sys.argv[3], "w"))
PY
world=1
resume_from="$work/ck"
[ "${ZERO_DS_DIRECT:-0}" = 1 ] && resume_from="$fix"
[ $# -gt 0 ] && world=2
micro=$((4 / world))
"$@" "$zero" train --model "$work/hf" --train_file "$fix/tokens.bin" --block_size 16 \
  --per_device_train_batch_size $micro --max_steps 8 --logging_steps 1 --quiet \
  --deepspeed "$work/ds_config.json" --resume_from_checkpoint "$resume_from" --output_dir "$work/run"
/usr/bin/python3 - "$fix/expected.json" "$work/run/metrics.jsonl" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))["losses_after_resume"]
got = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
got = {r["step"]: r["loss"] for r in got}
worst = 0.0
for i, w in enumerate(want):
    step = 4 + i
    if step not in got:
        sys.exit(f"step {step} missing from metrics.jsonl")
    worst = max(worst, abs(got[step] - w))
    if abs(got[step] - w) > 1e-5:
        sys.exit(f"step {step}: loss {got[step]} vs DeepSpeed's {w}")
print(f"resumed curve matches DeepSpeed's: {len(want)} steps, max |diff| {worst:.2e}")
PY
