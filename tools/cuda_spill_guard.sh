#!/usr/bin/env bash
# The CUDA compile launcher (CMAKE_CUDA_COMPILER_LAUNCHER, set in cmake/ZeroDeps.cmake): runs the
# compile with ptxas's per-kernel report and fails it when a kernel spills more than
# ZERO_SPILL_BUDGET bytes (spill stores + loads, default 64) to local memory, naming the kernel.
# The rest of ptxas's report is dropped; warnings and errors pass through.
set -uo pipefail
budget=${ZERO_SPILL_BUDGET:-64}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" -Xptxas=-v 2>"$log"
rc=$?
grep -v -E '^ptxas info|^    [0-9]+ bytes stack frame|^ptxas          ' "$log" >&2
over=$(awk -v budget="$budget" '
  /Function properties for/ { name = $NF }
  /bytes spill stores/ { if ($5 + $9 > budget) printf "%s: %d bytes spill stores + %d bytes spill loads\n", name, $5, $9 }
' "$log")
if [[ -n "$over" ]]; then
  echo "cuda_spill_guard: kernels spill more than $budget bytes to local memory (ZERO_SPILL_BUDGET):" >&2
  echo "$over" | sed 's/^/  /' >&2
  [[ $rc -eq 0 ]] && rc=1
fi
exit $rc
