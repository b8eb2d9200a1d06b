# zero_add_layer(<layer> DEPS ...): one static library per layer from src/<layer>/**.cc (and **.cu when the
# CUDA backend is built), plus one GoogleTest executable per *_test.cc beside the code (label "unit").
# Files named *_fuzz.cc are libFuzzer targets (ZERO_FUZZ); *_bench.cc are skipped here (bench/ builds them).

function(_zero_collect_sources dir out_srcs out_tests out_fuzz)
  file(GLOB_RECURSE all CONFIGURE_DEPENDS ${dir}/*.cc)
  set(tests ${all})
  list(FILTER tests INCLUDE REGEX "_test\\.cc$")
  set(fuzz ${all})
  list(FILTER fuzz INCLUDE REGEX "_fuzz\\.cc$")
  set(srcs ${all})
  list(FILTER srcs EXCLUDE REGEX "_(test|fuzz|bench|main)\\.cc$")
  # CUDA-only files: *.cu, host code *_cuda.cc / cuda_*.cc and tests *_cuda_test.cc / cuda_*_test.cc
  # (they use the CUDA runtime).
  if(ZERO_WITH_CUDA)
    file(GLOB_RECURSE cu CONFIGURE_DEPENDS ${dir}/*.cu)
    list(FILTER cu EXCLUDE REGEX "_test\\.cu$")
    list(APPEND srcs ${cu})
  else()
    list(FILTER srcs EXCLUDE REGEX "(_cuda|/cuda_[^/]*)\\.cc$")
    list(FILTER tests EXCLUDE REGEX "(_cuda_test|/cuda_[^/]*_test)\\.cc$")
  endif()
  set(${out_srcs} ${srcs} PARENT_SCOPE)
  set(${out_tests} ${tests} PARENT_SCOPE)
  set(${out_fuzz} ${fuzz} PARENT_SCOPE)
endfunction()

# zero_test_optimization(<target>): how much a test executable's own code is optimised. Its time goes
# into the libraries it calls (built as the preset says); the test bodies (gtest macros, expected
# values) are the slowest code to compile and need no optimiser: -O1 in optimised builds, -O0 under
# AddressSanitizer (half the compile time of -O1 there). Measured per translation unit in CI's
# compile commands: engine_test.cc 9.7 -> 8.1 s (GCC, -O2 -> -O1), checkpoint_test.cc 15.8 -> 6.1 s
# (clang + ASan/UBSan, -O1 -> -O0). Target options come after CMAKE_CXX_FLAGS, so the last -O wins.
function(zero_test_optimization target)
  if("address" IN_LIST ZERO_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  elseif(NOT ZERO_SANITIZE AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
  endif()
endfunction()

# zero_add_test(<target> SOURCES ... DEPS ... [LABELS ...] [TEST_PREFIX p] [ENVIRONMENT VAR=value ...]
#               [KEEP_OPTIMIZATION]):
# a GoogleTest executable registered with ctest; TEST_PREFIX keeps its test names apart from another
# binary's same tests; KEEP_OPTIMIZATION builds its sources as the preset says (zero_test_optimization
# otherwise: for tests whose own translation unit holds the code under test).
function(zero_add_test target)
  cmake_parse_arguments(ARG "KEEP_OPTIMIZATION" "TEST_PREFIX" "SOURCES;DEPS;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  # GPU-only test binaries (*_cuda_test, cuda_*_test; not the emulator's *_emu_test) also carry
  # `gpu`: without a GPU every case skips, and tools/test.sh then runs each binary once (the GPU
  # pack's dry run) instead of thousands of one-case processes.
  if(target MATCHES "(_cuda_test|^cuda_.*_test)$" AND NOT target MATCHES "_emu_test$")
    list(APPEND ARG_LABELS gpu)
  endif()
  # Executables listed in tests/tsan_targets.txt also run in the ThreadSanitizer stage.
  file(STRINGS ${PROJECT_SOURCE_DIR}/tests/tsan_targets.txt _tsan REGEX "^tsan_target: ")
  if("tsan_target: ${target}" IN_LIST _tsan)
    list(APPEND ARG_LABELS tsan)
  endif()
  add_executable(${target} ${ARG_SOURCES})
  if(NOT ARG_KEEP_OPTIMIZATION)
    zero_test_optimization(${target})
  endif()
  target_link_libraries(${target} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${target} PRIVATE ZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # List-valued properties cannot go through gtest_discover_tests(PROPERTIES ...): CMake 3.25 flattens
  # them (LABELS "unit;tsan" became LABELS unit plus a bogus property named tsan). A second include
  # file, run by ctest after the discovered tests are defined, sets them from the test list instead.
  gtest_discover_tests(${target} DISCOVERY_MODE PRE_TEST TEST_LIST ${target}_TESTS
                       TEST_PREFIX "${ARG_TEST_PREFIX}")
  # ThreadSanitizer cannot see libgomp's barriers: one OpenMP thread there (the comm thread still runs).
  set(omp_threads 2)
  if("thread" IN_LIST ZERO_SANITIZE)
    set(omp_threads 1)
  endif()
  # ENVIRONMENT: extra VAR=value entries for every test of the executable.
  set(test_env OMP_NUM_THREADS=${omp_threads} OMP_WAIT_POLICY=passive ${ARG_ENVIRONMENT})
  set(props_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_properties.cmake)
  file(WRITE ${props_file}
       "foreach(t IN LISTS ${target}_TESTS)\n"
       "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARG_LABELS}\"\n"
       "    ENVIRONMENT \"${test_env}\")\n"
       "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${props_file})
endfunction()

function(_zero_add_tests_and_fuzz lib tests fuzz)
  foreach(t ${tests})
    get_filename_component(name ${t} NAME_WE)
    zero_add_test(${name} SOURCES ${t} DEPS ${lib})
  endforeach()
  if(ZERO_FUZZ)
    foreach(f ${fuzz})
      get_filename_component(name ${f} NAME_WE)
      add_executable(${name} ${f})
      target_link_libraries(${name} PRIVATE ${lib})
      target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
      target_link_options(${name} PRIVATE -fsanitize=fuzzer)
      set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    endforeach()
  endif()
endfunction()

function(zero_add_layer layer)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  set(dir ${PROJECT_SOURCE_DIR}/src/${layer})
  _zero_collect_sources(${dir} srcs tests fuzz)
  set(lib zero_${layer})
  if(srcs)
    add_library(${lib} STATIC ${srcs})
    target_include_directories(${lib} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${lib} PUBLIC ${ARG_DEPS})
  else()
    add_library(${lib} INTERFACE)
    target_include_directories(${lib} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${lib} INTERFACE ${ARG_DEPS})
  endif()
  # Coverage instrumentation for libFuzzer only where the fuzz targets' code lives (core: safetensors,
  # config: the ds_config loader, checkpoint: the torch.save / pickle reader): elsewhere it only
  # slows the sanitizer build and its tests.
  if(ZERO_FUZZ AND srcs AND (layer STREQUAL "core" OR layer STREQUAL "config" OR
                             layer STREQUAL "checkpoint"))
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
  _zero_add_tests_and_fuzz(${lib} "${tests}" "${fuzz}")
endfunction()

# Kernels: one library per op folder (src/kernels/<op>/), so ops build and test independently;
# zero_kernels is the interface library that links them all.
function(zero_add_kernels)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  add_library(zero_kernels INTERFACE)
  target_include_directories(zero_kernels INTERFACE ${PROJECT_SOURCE_DIR}/src)
  file(GLOB op_dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/*)
  # Shared kernel helpers (src/kernels/*.h/.cc directly in kernels/) form zero_kernel_common.
  file(GLOB common CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/*.cc)
  list(FILTER common EXCLUDE REGEX "_(test|fuzz|bench)\\.cc$")
  if(common)
    add_library(zero_kernel_common STATIC ${common})
  else()
    add_library(zero_kernel_common INTERFACE)
  endif()
  get_target_property(_type zero_kernel_common TYPE)
  set(_common_scope PUBLIC)
  if(_type STREQUAL "INTERFACE_LIBRARY")
    set(_common_scope INTERFACE)
    target_include_directories(zero_kernel_common INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(zero_kernel_common INTERFACE ${ARG_DEPS})
  else()
    target_include_directories(zero_kernel_common PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(zero_kernel_common PUBLIC ${ARG_DEPS})
  endif()
  target_link_libraries(zero_kernels INTERFACE zero_kernel_common)
  if(ZERO_WITH_CUDA)
    # cuBLASLt for the matmuls (fused epilogues); every kernel library sees it through common.
    target_link_libraries(zero_kernel_common ${_common_scope} CUDA::cublasLt CUDA::cublas)
    target_compile_definitions(zero_kernel_common ${_common_scope} ZERO_CUDA_WITH_CUBLAS=1)
  endif()
  foreach(d ${op_dirs})
    if(NOT IS_DIRECTORY ${d})
      continue()
    endif()
    get_filename_component(op ${d} NAME)
    _zero_collect_sources(${d} srcs tests fuzz)
    set(lib zero_kernel_${op})
    if(srcs)
      add_library(${lib} STATIC ${srcs})
      target_link_libraries(${lib} PUBLIC zero_kernel_common)
      target_link_libraries(zero_kernels INTERFACE ${lib})
    else()
      add_library(${lib} INTERFACE)
      target_link_libraries(${lib} INTERFACE zero_kernel_common)
    endif()
    _zero_add_tests_and_fuzz(${lib} "${tests}" "${fuzz}")
  endforeach()
  file(GLOB ktests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/*_test.cc)
  _zero_add_tests_and_fuzz(zero_kernels "${ktests}" "")
endfunction()
