#!/usr/bin/env bash
# Builds and runs every test: the release build (CUDA too when nvcc exists) with all ctest labels
# (unit, mpi, slow), the format check, the sanitizer presets (ASan+UBSan, TSan: unit tests plus the
# two-rank test labelled "sanitize"), and the libFuzzer targets for a bounded time.
# Usage: tools/test.sh [--quick]   (--quick: release build and its tests only)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

tools/install_deps.sh
jobs=$(nproc)
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
step "release tests"
ctest --preset release -j "$jobs"

if [[ $quick -eq 1 ]]; then exit 0; fi

for preset in asan-ubsan tsan; do
  step "$preset build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  step "$preset tests"
  ctest --preset "$preset" -j "$jobs"
done

step "fuzz (bounded)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
fuzz_seconds=${ZERO_FUZZ_SECONDS:-30}
shopt -s nullglob
for f in build/fuzz/fuzz/*_fuzz; do
  name=$(basename "$f")
  corpus=tests/fixtures/fuzz/${name%_fuzz}
  mkdir -p "build/fuzz/corpus/$name"
  seeds=()
  [[ -d "$corpus" ]] && seeds+=("$corpus")
  echo "$name: ${fuzz_seconds}s"
  "$f" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=0 \
    "build/fuzz/corpus/$name" "${seeds[@]}" 2>&1 | tail -n 3
done
echo "fuzz: done"
