#!/usr/bin/env bash
# clang-format over the C++/CUDA sources. --check fails (exit 1) on any difference instead of rewriting.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard \
  '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^tests/fixtures/' || true)
[[ ${#files[@]} -eq 0 ]] && exit 0
if [[ "${1:-}" == "--check" ]]; then
  clang-format --dry-run --Werror "${files[@]}"
  echo "format: ${#files[@]} files clean"
else
  clang-format -i "${files[@]}"
fi
