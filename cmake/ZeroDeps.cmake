# Finds every dependency (Debian packages, installed by tools/install_deps.sh) and the optional CUDA toolkit.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(OpenMP REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(GTest REQUIRED)
if(ZERO_BENCH)
  find_package(benchmark REQUIRED)
endif()
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# PCRE2 (UTF + UCP): tokenizer.json pre-tokenizer regexes with Unicode classes (src/text).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# ICU: the Unicode normal forms of tokenizer.json normalizers (NFC as Qwen2).
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)
# SentencePiece: a model directory with tokenizer.model and no tokenizer.json.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

# OpenBLAS, never the reference BLAS (30x slower): link the OpenMP flavour explicitly.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-openmp
          /usr/include/openblas /usr/include/x86_64-linux-gnu NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas
             PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu NO_DEFAULT_PATH)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: run tools/install_deps.sh (libopenblas-openmp-dev)")
endif()
add_library(zero_openblas INTERFACE)
target_include_directories(zero_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(zero_openblas INTERFACE ${OPENBLAS_LIBRARY})
set(ZERO_BLAS_TARGET zero_openblas)
message(STATUS "zero: OpenBLAS ${OPENBLAS_LIBRARY}")

# oneDNN (Debian's 2.6, OpenMP runtime): the bf16 GEMMs of bf16 models on CPUs with AVX512-BF16
# (src/kernels/matmul/bf16_gemm.h); OpenBLAS 0.3.21 has no sbgemm.
find_path(DNNL_INCLUDE_DIR dnnl.hpp PATHS /usr/include NO_DEFAULT_PATH)
find_library(DNNL_LIBRARY NAMES dnnl PATHS /usr/lib/x86_64-linux-gnu NO_DEFAULT_PATH)
if(NOT DNNL_INCLUDE_DIR OR NOT DNNL_LIBRARY)
  message(FATAL_ERROR "oneDNN not found: run tools/install_deps.sh (libdnnl-dev)")
endif()
add_library(zero_dnnl INTERFACE)
target_include_directories(zero_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(zero_dnnl INTERFACE ${DNNL_LIBRARY})
message(STATUS "zero: oneDNN ${DNNL_LIBRARY}")

# CUDA: built whenever the toolkit is found (ZERO_CUDA=AUTO), never required on CPU machines.
set(ZERO_WITH_CUDA OFF)
set(ZERO_WITH_NCCL OFF)
if(NOT ZERO_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    # One CUDA runtime per process: the shared libcudart that CUDA::cudart (zero_core) and
    # cuBLASLt use. CMake's default (Static) also put cudart_static on every link line of a target
    # with .cu objects, so executables carried two runtimes and only link order chose between them.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag ("requires the language dialect CUDA20 ... does
    # not support this"): teach it. nvcc 12+ with GCC 12 compiles C++20 host and device code.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    string(APPEND CMAKE_CUDA_FLAGS " --expt-relaxed-constexpr -lineinfo")
    # A kernel spilling more than a small budget of registers to local memory fails its compile
    # (tools/cuda_spill_guard.sh reads ptxas's per-kernel report; ccache, if any, runs inside it).
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/tools/cuda_spill_guard.sh
                                     ${CMAKE_CUDA_COMPILER_LAUNCHER})
    find_package(CUDAToolkit REQUIRED)
    set(ZERO_WITH_CUDA ON)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(ZERO_WITH_NCCL ON)
      add_library(zero_nccl INTERFACE)
      target_include_directories(zero_nccl INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(zero_nccl INTERFACE ${NCCL_LIBRARY})
    endif()
    message(STATUS "zero: CUDA ${CUDAToolkit_VERSION} archs ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${ZERO_WITH_NCCL}")
  elseif(ZERO_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZERO_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "zero: CUDA toolkit not found, building the CPU backend only")
  endif()
endif()
