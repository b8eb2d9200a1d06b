#!/usr/bin/env bash
# Packs what the GPU machine needs to verify the CUDA path: every GPU test built here (sm_90, the
# release preset), host debug info stripped (the device code keeps -lineinfo for compute-sanitizer),
# with the non-CUDA shared libraries they load (OpenBLAS, oneDNN, libgomp, ...). The GPU machine has
# the CUDA 13 runtime, cuBLAS and compute-sanitizer but none of our Debian packages and no network.
#
#   tools/gpu/pack.sh [BUILD_DIR]      -> .gpu/pack.tar.xz (+ .gpu/verify.sh), <= 60 MiB
#
# Then, on the GPU machine (the device tool carries .gpu):  bash .gpu/verify.sh   (results in $OUT)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
limit_mib=60

# GPU tests: *_cuda_test (kernels) and cuda_*_test (device/cuda_backend_test), not the emulated
# *_emu_test binaries.
tests=$(cd "$build/tests" 2>/dev/null && ls -1 *_cuda_test cuda_*_test 2>/dev/null | grep -v '_emu_test$' || true)
if [[ -z "$tests" ]]; then
  echo "pack.sh: no *_cuda_test in $build/tests: configure with CUDA (cmake --preset release with nvcc)" >&2
  exit 1
fi
benches=""
[[ -x "$build/bench/kernels_gpu_bench" ]] && benches=kernels_gpu_bench
cmake --build "$build" --target $tests $benches zero >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/pack/bin" "$stage/pack/lib" "$stage/pack/bench" "$stage/pack/app"
if [[ -n "$benches" ]]; then
  strip --strip-debug -o "$stage/pack/bench/kernels_gpu_bench" "$build/bench/kernels_gpu_bench"
  cp bench/gpu/run.sh bench/gpu/torch_kernels.py "$stage/pack/bench/"
fi
for t in $tests; do
  strip --strip-debug -o "$stage/pack/bin/$t" "$build/tests/$t"
done
# The training check (train_check.sh): the zero binary, the embedded corpus, the PyTorch step.
strip --strip-debug -o "$stage/pack/app/zero" "$build/bin/zero"
cp examples/data/kjv.txt tools/gpu/train_check.sh bench/gpu/torch_step.py "$stage/pack/app/"
# The ZeRO-Offload benchmark (verify.sh --offload-bench): its script and Python helpers.
cp tools/gpu/offload_bench.sh bench/gpu/offload_bench_report.py bench/gpu/train_ds_gpu.py \
  bench/gpu/make_random_llama.py "$stage/pack/app/"
# ZeRO-Inference's benchmark (verify.sh --inference-bench): resident vs transformers, the stream.
cp tools/gpu/inference_stream.sh bench/gpu/hf_generate.py "$stage/pack/app/"
# llm.c, the step benchmark's baseline (train_check.sh's llmc mode), when .llmc/ holds it
# (tools/gpu/llmc_build.sh): the binary and, to rebuild it there, its source and cudnn-frontend.
if [[ -x .llmc/bin/train_gpt2cu ]]; then
  mkdir -p "$stage/pack/app/llmc/bin"
  strip --strip-debug -o "$stage/pack/app/llmc/bin/train_gpt2cu" .llmc/bin/train_gpt2cu
  cp -r .llmc/src .llmc/cudnn-frontend "$stage/pack/app/llmc/"
  cp tools/gpu/llmc_build.sh "$stage/pack/app/"
fi
# Shared libraries outside the CUDA toolkit and glibc: the GPU machine has its own CUDA and libc.
{ for t in $tests; do ldd "$build/tests/$t"; done; ldd "$build/bin/zero"; } | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/usr/local/cuda|/libc\.so|/libm\.so|/libdl\.so|/libpthread\.so|/librt\.so|/ld-linux|/libstdc\+\+|/libgcc_s' |
  while read -r lib; do cp -L "$lib" "$stage/pack/lib/"; done
git rev-parse HEAD >"$stage/pack/commit"
(git diff --quiet HEAD && echo clean || echo dirty) >>"$stage/pack/commit"
nvcc --version | tail -1 >"$stage/pack/nvcc"

mkdir -p .gpu
# ZERO_PACK_XZ_LEVEL: CI, which only dry-runs the pack, asks for the fastest level.
XZ_OPT="-T0 -${ZERO_PACK_XZ_LEVEL:-6}" tar -C "$stage" -cJf .gpu/pack.tar.xz pack
cp tools/gpu/verify.sh .gpu/verify.sh
size=$(stat -c %s .gpu/pack.tar.xz)
echo "pack.sh: .gpu/pack.tar.xz $((size / 1024 / 1024)) MiB, $(echo $tests | wc -w) test binaries, $(ls "$stage/pack/lib" | wc -l) libraries"
if ((size > limit_mib * 1024 * 1024)); then
  echo "pack.sh: the pack is over ${limit_mib} MiB (the device tool carries 64 MiB in all)" >&2
  exit 1
fi
