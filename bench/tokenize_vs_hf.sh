#!/usr/bin/env bash
# `zero data prepare` vs HF `tokenizers` (Rust, encode_batch) on the same corpus with the same
# threads, for a GPT-2-style and a Llama-3-style 32k byte-level BPE (bench/tokenize/tokenize_vs_hf.py
# builds the corpus and trains both); checks that both give identical ids. Never run in CI (needs
# PyPI's `tokenizers`). Results: bench/results/tokenize.md.
# Usage: bench/tokenize_vs_hf.sh [build/release/bin/zero] [VENV] [-- extra args: --mb 12 --reps 5 --threads 2]
#   VENV: a virtual environment with `tokenizers`; created (pip install tokenizers) when missing.
set -euo pipefail
positional=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do positional+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
zero=$(realpath "${positional[0]:-build/release/bin/zero}")
venv=${positional[1]:-/tmp/zero-bench-venv}
if ! "$venv/bin/python" -c 'import tokenizers' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q tokenizers
fi
work=${WORK:-/tmp/zero-bench-tokenize}
exec "$venv/bin/python" "$(dirname "$0")/tokenize/tokenize_vs_hf.py" --zero "$zero" --work "$work" "$@"
