#!/usr/bin/env bash
# The Python wheels the GPU machine lacks for the DeepSpeed side-by-side runs (offload_bench.sh's
# ZERO_OB_WHEELS, train_ds_gpu.py): DeepSpeed 0.19.8 (the version the CPU goldens and the H200
# comparison used) built here as a pure-Python wheel (DS_BUILD_OPS=0: its CPU Adam and other ops
# are JIT-compiled there, where nvcc and ninja exist), and what its image does not hold: hjson and
# pydantic 2 with its compiled core for CPython 3.12 (the image's python3). Into the ignored .whl/.
#
#   tools/gpu/wheels.sh            -> .whl/*.whl (~5 MiB); the device call carries .whl and sets
#                                     ZERO_OB_WHEELS=$PWD/.whl
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  pydantic==2.11.7 pydantic-core==2.33.2 annotated-types==0.7.0 typing-inspection==0.4.1 hjson==3.1.0
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q wheel setuptools
# DeepSpeed's setup.py imports torch only to probe for ops; with DS_BUILD_OPS=0 it builds none.
DS_BUILD_OPS=0 "$venv/bin/python" -m pip wheel -q --no-deps deepspeed==0.19.8 -w .whl
ls -1 .whl
