#!/usr/bin/env bash
# Builds and runs every test:
#   1. format check;
#   2. the release build (CUDA too when nvcc exists) with every ctest label (unit, mpi, slow), and
#      with CUDA the GPU pack (tools/gpu/pack.sh) and its verify script's dry run;
#   3. the clang sanitizer build (ASan + UBSan, the `fuzz` preset): unit tests, the two-rank tests
#      labelled `sanitize`, and every libFuzzer target for ZERO_FUZZ_SECONDS (default 20) seconds;
#   4. ThreadSanitizer on the threaded code (communication thread, overlap): tests labelled `tsan`.
# Each sanitizer build starts in the background, at the lowest priority, while the stage before it
# runs its tests.
# Usage: tools/test.sh [--quick]   (--quick: steps 1-2 only)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

tools/install_deps.sh
jobs=$(nproc)
# One test more than cores: the end-to-end tests wait on mpirun, timeouts and child processes (on 2
# cores the release tests kept them 68% busy at -j 2; -j 3 cut their wall time by about a tenth).
test_jobs=$((jobs + 1))
export OMP_WAIT_POLICY=passive
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  # Paths relative to the checkout, so a fresh clone reuses earlier compilations.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi

step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

step "format check"
tools/format.sh --check

step "release build"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
# Background builds at the lowest priority: the test stages leave cores idle (mpirun, timeouts,
# child processes; the release tests kept 2 cores about 68% busy), which the next stage's build
# takes instead (`nice -n 19`: the tests keep priority). background_build NAME PRESET [TARGETS...]
# starts one; finish_build NAME waits for it, then runs the same build in the foreground (a no-op
# when the background one succeeded; its errors printed here when it did not).
# Each runs in a session of its own, so an early exit (a failed stage) stops its compilers too.
declare -A background=()
trap 'for pid in "${background[@]}"; do kill -- "-$pid" 2>/dev/null || true; done' EXIT
background_build() {
  local name=$1 preset=$2
  shift 2
  setsid bash -c 'preset=$1 jobs=$2; shift 2; targets=(); (($# > 0)) && targets=(--target "$@")
    cmake --preset "$preset" >/dev/null &&
      exec nice -n 19 cmake --build --preset "$preset" -j "$jobs" "${targets[@]}"' \
    _ "$preset" "$jobs" "$@" >"build/$name-background.log" 2>&1 &
  background[$name]=$!
}
finish_build() {
  local name=$1 preset=$2
  shift 2
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  wait "${background[$name]}" || true
  unset "background[$name]"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs" "${targets[@]}"
}
mapfile -t tsan_targets < <(sed -n 's/^tsan_target: //p' tests/tsan_targets.txt)

step "release tests"
[[ $quick -eq 0 ]] && background_build fuzz fuzz
# Without a usable GPU the GPU-only binaries' cases (label `gpu`, ~4000 of them) would each start a
# process only to skip; the GPU pack's dry run below runs every such binary once instead.
gpu_filter=()
nvidia-smi -L >/dev/null 2>&1 || gpu_filter=(-LE gpu)
ctest --preset release -j "$test_jobs" "${gpu_filter[@]}"
if compgen -G "build/release/tests/*_cuda_test" >/dev/null; then
  step "GPU pack and its dry run (tools/gpu: what a GPU machine runs, its device cases skipped)"
  ZERO_PACK_XZ_LEVEL=0 tools/gpu/pack.sh build/release
  OUT=build/release/gpu-dry-run bash .gpu/verify.sh --dry-run >/dev/null
fi

if [[ $quick -eq 1 ]]; then exit 0; fi

step "sanitizer build (clang, ASan + UBSan, fuzz targets; begun in the background)"
finish_build fuzz fuzz
step "sanitizer tests"
background_build tsan tsan "${tsan_targets[@]}"
ctest --preset fuzz -j "$test_jobs"

step "fuzz (bounded)"
fuzz_seconds=${ZERO_FUZZ_SECONDS:-20}
shopt -s nullglob
for f in build/fuzz/fuzz/*_fuzz; do
  name=$(basename "$f")
  corpus=tests/fixtures/fuzz/${name%_fuzz}
  scratch=build/fuzz/corpus/$name
  mkdir -p "$scratch"
  seeds=()
  [[ -d "$corpus" ]] && seeds+=("$corpus")
  echo "$name: ${fuzz_seconds}s"
  # New inputs go to the scratch corpus (first directory); the committed seeds stay untouched.
  "$f" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    "$scratch" "${seeds[@]}" 2>&1 | tail -n 4
done

step "ThreadSanitizer build (threaded code; begun in the background)"
finish_build tsan tsan "${tsan_targets[@]}"
step "ThreadSanitizer tests"
ctest --preset tsan -j "$jobs"
echo "all tests passed"
