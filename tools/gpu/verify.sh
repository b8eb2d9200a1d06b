#!/usr/bin/env bash
# Verifies the CUDA path on a GPU machine from what tools/gpu/pack.sh packed (.gpu/pack.tar.xz):
# every *_cuda_test, then compute-sanitizer memcheck on all of them and racecheck / synccheck /
# initcheck on a fixed eighth of each kernel binary's cases, and the kernel benchmark beside PyTorch
# (bench/gpu/run.sh, on a quiet GPU between the two). Leaves at most 8 files in $OUT (summary.md
# first). Exit status 0 only when every test and every sanitizer run is clean.
#
#   bash .gpu/verify.sh            on the GPU machine (the device tool: carry .gpu)
#   bash .gpu/verify.sh --bench    the kernel benchmark alone
#   bash .gpu/verify.sh --offload-bench  the ZeRO-Offload benchmark alone (app/offload_bench.sh:
#                                  llama-1b / 8b / 13B and gpt2-1558m, DeepSpeed beside it when
#                                  importable; ZERO_OB_* variables as that script says; about 8
#                                  minutes with its default grid) -> $OUT/offload_bench.md
#   bash .gpu/verify.sh --inference-bench  ZeRO-Inference alone (app/inference_stream.sh: resident
#                                  llama-1b against transformers' generate at batch 1 / 64, streamed
#                                  = resident, llama-8b streamed under 6 GiB at batch 1 / 8 / 64
#                                  against the PCIe bound; RESIDENT_MODELS, BUDGET, NEW_TOKENS as
#                                  that script says) -> $OUT/inference_bench.md
#   bash .gpu/verify.sh --dry-run  anywhere: unpack, resolve every library, run the binaries (which
#                                  skip without a device); what CI runs so this works the first time
#
# Environment: ZERO_GPU_TESTS=REGEX runs only the test binaries whose names match (default all),
# ZERO_GPU_SAN=REGEX sanitizes only the test binaries whose names match (default all;
# a short lease spends its minutes on what changed), ZERO_GPU_KBENCH=0 skips the kernel benchmark,
# ZERO_GPU_SAN_TIMEOUT=S bounds each sanitizer run (default 380),
# ZERO_GPU_TRAIN=0 skips the training check (app/train_check.sh: --device cuda vs cpu, the step
# grid beside PyTorch (ZERO_GPU_BENCH_GRID), memcheck over training runs, and an ncu kernel-time
# table of a gpt2-124m step: ZERO_GPU_PROFILE=0 skips that).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dry=0 bench_only=0 offload_only=0 inference_only=0
[[ "${1:-}" == "--dry-run" ]] && dry=1
[[ "${1:-}" == "--inference-bench" ]] && inference_only=1
[[ "${1:-}" == "--bench" ]] && bench_only=1
[[ "${1:-}" == "--offload-bench" ]] && offload_only=1
out=${OUT:-$here/out}
mkdir -p "$out"
work=$(mktemp -d /tmp/zero-gpu.XXXXXX)
tar -C "$work" -xJf "$here/pack.tar.xz" || { echo "verify.sh: cannot unpack $here/pack.tar.xz" >&2; exit 1; }
bin=$work/pack/bin
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && cuda_lib="$cuda_lib:$d"
done
# pip's CUDA wheels (nvidia-cublas, ...) as a fallback for a toolkit without cuBLAS.
for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  [[ -d $d ]] && cuda_lib="$cuda_lib:$d"
done
export LD_LIBRARY_PATH="$work/pack/lib$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
jobs=$(nproc)
repeat=3
((dry)) && repeat=1
summary=$out/summary.md
fail=0

{
  echo "# CUDA verification ($(date -u +%F' '%H:%M) UTC)"
  echo
  echo "- commit: $(tr '\n' ' ' <"$work/pack/commit"), built with $(cat "$work/pack/nvcc")"
  if ((dry)); then
    echo "- dry run: no GPU used"
  else
    echo "- device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
    echo "- compute-sanitizer: $(compute-sanitizer --version 2>&1 | grep -i version | head -1)"
  fi
} >"$summary"

# Every library must resolve here (libcuda comes with the driver, absent on a machine without one).
missing=$(for t in "$bin"/* "$work/pack/app/zero"; do ldd "$t"; done | grep 'not found' | grep -v libcuda.so | sort -u)
if [[ -n "$missing" ]]; then
  echo "- MISSING LIBRARIES:" >>"$summary"
  echo "$missing" | sed 's/^/  - /' >>"$summary"
  cat "$summary"
  exit 1
fi

run_test() {  # binary -> one line "name passed failed skipped seconds rc" ; full log in $work/log
  local t=$1 name log start rc
  name=$(basename "$t")
  log=$work/log/$name.test
  start=$(date +%s)
  # Three passes on a GPU: a missing stream order shows up as a flaky case, not once in a while.
  timeout 150 "$t" --gtest_color=no --gtest_repeat="$repeat" >"$log" 2>&1
  rc=$?
  printf '%s passed=%s failed=%s skipped=%s %ss rc=%s\n' "$name" \
    "$(grep -c '^\[       OK \]' "$log")" "$(grep -c -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log")" \
    "$(grep -c -E '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log")" "$(($(date +%s) - start))" "$rc"
}
sanitize() {  # tool binary -> one line ; full log in $work/log
  local tool=$1 t=$2 name log start rc shard=()
  name=$(basename "$t")
  log=$work/log/$name.$tool
  # memcheck sees every case; the slower tools a fixed eighth (gtest's sharding: deterministic).
  [[ $tool != memcheck ]] && shard=(env GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=0)
  # The arena's out-of-memory test makes cudaMalloc fail on purpose: API errors are its subject.
  local api=all
  [[ $name == device_arena_cuda_test ]] && api=no
  # initcheck: every GEMM on our reference kernel (ZERO_CUDA_REFERENCE_GEMM=1). initcheck does not
  # see the stores of cuBLASLt's Hopper kernels: on the H100 (bench/results/gpu_verify_stop24.md)
  # cuda_transformer_test gave 15160 "uninitialized" reads, all of GEMM outputs (rope reading q),
  # and 0 with the reference GEMM. Our own kernels' every read is still checked.
  local env_gemm=()
  [[ $tool == initcheck ]] && env_gemm=(env ZERO_CUDA_REFERENCE_GEMM=1)
  start=$(date +%s)
  timeout "${ZERO_GPU_SAN_TIMEOUT:-380}" "${shard[@]}" "${env_gemm[@]}" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 200 --report-api-errors $api \
    --target-processes all "$t" --gtest_color=no --gtest_brief=1 >"$log" 2>&1
  rc=$?
  local line
  line=$(printf '%s %s %ss rc=%s %s' "$tool" "$name" "$(($(date +%s) - start))" "$rc" \
    "$(grep -E '(ERROR SUMMARY|RACECHECK SUMMARY)' "$log" | tail -1)")
  if ((rc != 0)); then
    # Where the reports point (kernel and source line, counted), the first three.
    line+=" | sites: $(grep -E '^=========     at ' "$log" | sed -E 's/^=========     at //; s/\+0x[0-9a-f]+//' |
      sort | uniq -c | sort -rn | head -3 | awk '{$1 = $1; print}' | paste -sd ';')"
  fi
  echo "$line"
}
export -f run_test sanitize
export work repeat
mkdir -p "$work/log"

run_bench() {
  [[ ${ZERO_GPU_KBENCH:-1} == 0 ]] && return 0
  [[ -x $work/pack/bench/kernels_gpu_bench ]] || return 0
  echo "## Kernels beside PyTorch (bench/gpu/run.sh; ratio > 1: ours faster)" >>"$summary"
  bash "$work/pack/bench/run.sh" "$work/pack/bench/kernels_gpu_bench" >"$out/kernels_bench.md" 2>&1 ||
    echo "- FAILED (kernels_bench.md)" >>"$summary"
  cat "$out/kernels_bench.md" >>"$summary"
}
if ((offload_only)); then
  (cd "$work/pack/app" && bash offload_bench.sh "$work/pack/app/zero" "$work/pack/app/kjv.txt" \
    "$work/offload" "$out/offload_bench.md") >"$out/offload_bench.log" 2>&1
  rc=$?
  cat "$out/offload_bench.md" >>"$summary"
  cat "$summary"
  exit $rc
fi
if ((inference_only)); then
  mkdir -p "$work/inference-nvme"
  (cd "$work/pack/app" && bash inference_stream.sh "$work/pack/app/zero" "$work/inference" \
    "$work/inference-nvme") >"$out/inference_bench.md" 2>"$out/inference_bench.log"
  rc=$?
  cat "$out/inference_bench.md" >>"$summary"
  cat "$summary"
  exit $rc
fi
if ((bench_only)); then
  run_bench
  cat "$summary"
  exit 0
fi

echo "## Tests" >>"$summary"
ls "$bin"/* | grep -E "/(${ZERO_GPU_TESTS:-.*})\$" | xargs -P 4 -I{} bash -c 'run_test {}' | sort >"$work/tests.txt"
sed 's/^/- /' "$work/tests.txt" >>"$summary"
grep -q -E 'failed=[1-9]|rc=[1-9]' "$work/tests.txt" && fail=1
cat "$work"/log/*.test >"$out/tests.log"
if ((dry)); then
  echo "- (dry run: every binary ran; with no device they skip)" >>"$summary"
  "$work/pack/app/zero" --version >/dev/null || { echo "- app/zero does not start" >>"$summary"; fail=1; }
  cat "$summary"
  exit $fail
fi

if [[ ${ZERO_GPU_TRAIN:-1} != 0 ]]; then
  (cd "$work/pack/app" && bash train_check.sh "$work/pack/app/zero" "$work/pack/app/kjv.txt" "$work/train") \
    >"$out/train.md" 2>&1 || fail=1
  cat "$out/train.md" >>"$summary"
fi
run_bench
# Registers, stack, shared and local memory of every kernel (the spill budget's record).
if command -v cuobjdump >/dev/null; then
  for t in "$bin"/*; do cuobjdump -res-usage "$t" 2>/dev/null; done |
    awk '/Function/ { name = $2 } /REG:/ { print $0 "\t" name }' | sed 's/^[[:space:]]*//' |
    sort -u >"$out/res_usage.txt"
  echo "## Kernel resources (res_usage.txt): $(wc -l <"$out/res_usage.txt") kernels, max REG $(grep -o 'REG:[0-9]*' "$out/res_usage.txt" | cut -d: -f2 | sort -n | tail -1), kernels with LOCAL > 0: $(grep -c -v 'LOCAL:0 ' "$out/res_usage.txt")" >>"$summary"
fi
echo "## compute-sanitizer" >>"$summary"
{
  san_bins=$(ls "$bin"/* | grep -E "/(${ZERO_GPU_SAN:-.*})\$")
  for t in $san_bins; do echo "memcheck $t"; done
  for t in $san_bins; do
    case $(basename "$t") in device_arena_cuda_test | matmul_cuda_test) continue ;; esac
    for tool in racecheck synccheck initcheck; do echo "$tool $t"; done
  done
} | xargs -P "$jobs" -L 1 bash -c 'sanitize "$0" "$1"' | sort >"$work/san.txt"
sed 's/^/- /' "$work/san.txt" >>"$summary"
grep -q -E ' rc=[1-9]' "$work/san.txt" && fail=1
for tool in memcheck racecheck synccheck initcheck; do
  for f in "$work"/log/*."$tool"; do echo "=== $(basename "$f")"; cat "$f"; done | head -c 4000000 >"$out/$tool.log"
done
echo >>"$summary"
((fail)) && echo "**FAILED**: see tests.log and the sanitizer logs" >>"$summary" || echo "**All clean.**" >>"$summary"
cat "$summary"
exit $fail
