#!/usr/bin/env bash
# Builds llm.c's GPT-2 trainer (train_gpt2cu: bf16, cuDNN flash attention, sm_90) from its public
# source, the baseline issue 28 races (bench: tools/gpu/train_check.sh's "llmc" mode). The source is
# never committed: it lives in the ignored folder .llmc/ (karpathy/llm.c at f1e2ace in .llmc/src,
# NVIDIA/cudnn-frontend's include/ in .llmc/cudnn-frontend, e.g. `git archive` of the mirrors).
#
#   tools/gpu/llmc_build.sh [LLMC_DIR]      -> LLMC_DIR/bin/train_gpt2cu   (default .llmc)
#
# Here (nvcc, cuDNN in /usr/local/cuda) it builds what tools/gpu/pack.sh packs; on the GPU machine
# train_check.sh rebuilds from the packed source when the packed binary does not start there, with
# cuDNN's headers and library from PyTorch's nvidia-cudnn wheel.
set -euo pipefail
dir=$(cd "${1:-$(dirname "$0")/../../.llmc}" && pwd)
src=$dir/src frontend=$dir/cudnn-frontend/include
[[ -f $src/train_gpt2.cu && -d $frontend ]] || {
  echo "llmc_build.sh: need $src/train_gpt2.cu and $frontend (llm.c and cudnn-frontend sources)" >&2
  exit 1
}
cudnn_inc=() cudnn_lib=()
# cuDNN from the toolkit, else from the nvidia-cudnn wheel (the GPU machine's PyTorch has one).
if [[ ! -f /usr/local/cuda/include/cudnn.h ]]; then
  wheel=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null ||
    python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])')
  cudnn_inc=(-I"$wheel/include") cudnn_lib=(-L"$wheel/lib" -Xlinker -rpath -Xlinker "$wheel/lib")
  [[ -e $wheel/lib/libcudnn.so ]] || ln -sf libcudnn.so.9 "$wheel/lib/libcudnn.so" 2>/dev/null || true
fi
mkdir -p "$dir/bin" "$dir/obj"
# CUDA 13's cudaMemAdvise takes a cudaMemLocation where llm.c (written for CUDA 12) passes
# cudaCpuDeviceId in its managed-memory fallback: the same advice, said in CUDA 13's type.
if [[ $(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p') -ge 13 ]]; then
  sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$src/llmc/cuda_utils.cuh"
fi
flags=(--threads=0 -t=0 --use_fast_math -std=c++17 -O3 -DENABLE_BF16 -DENABLE_CUDNN
  --generate-code "arch=compute_90,code=[compute_90,sm_90]" -I"$src" -I"$frontend" "${cudnn_inc[@]}")
nvcc -c "${flags[@]}" "$src/llmc/cudnn_att.cpp" -o "$dir/obj/cudnn_att.o"
# cudnn-frontend 1.x compiles some kernels at run time: NVRTC and the driver API (libcuda's link
# stub; the driver's library at run time).
stubs=$(dirname "$(command -v nvcc)")/../lib64/stubs
nvcc "${flags[@]}" "$src/train_gpt2.cu" "$dir/obj/cudnn_att.o" -lcublas -lcublasLt -lcudnn \
  "${cudnn_lib[@]}" -lnvrtc -L"$stubs" -lcuda -o "$dir/bin/train_gpt2cu"
echo "llmc_build.sh: $dir/bin/train_gpt2cu"
