# Multi-rank communicator tests: real processes under mpirun (DESIGN.md §7). Included from
# tests/CMakeLists.txt. Each program has its own main (MPI init, GoogleTest, MPI finalize).

set(_zero_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none)
set(_zero_mpi_env "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")

function(_zero_add_mpi_program target)
  add_executable(${target} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${target}.cc)
  target_link_libraries(${target} PRIVATE zero_comm GTest::gtest ${ARGN})
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
endfunction()

# Every collective × dtype × odd sizes, async overlap, byte counters, a late peer (timeout).
_zero_add_mpi_program(comm_mpitest)
foreach(n 2 3 4)
  add_test(NAME mpi.comm.np${n} COMMAND ${_zero_mpirun} -np ${n} $<TARGET_FILE:comm_mpitest>)
  set(_labels mpi)
  if(n EQUAL 2)
    list(APPEND _labels sanitize tsan)
  endif()
  set_tests_properties(mpi.comm.np${n} PROPERTIES LABELS "${_labels}" TIMEOUT 120
                       ENVIRONMENT "${_zero_mpi_env}")
endforeach()

# The same over Open MPI's collectives (the shared-memory path is the default on one host).
add_test(NAME mpi.comm.mpi_path.np3 COMMAND ${_zero_mpirun} -np 3 $<TARGET_FILE:comm_mpitest>)
set_tests_properties(mpi.comm.mpi_path.np3 PROPERTIES LABELS mpi TIMEOUT 120
                     ENVIRONMENT "${_zero_mpi_env};ZERO_SHM_COLLECTIVES=0")

# A rank stops itself (SIGSTOP): the others must report kDeadlineExceeded naming it. mpirun exits
# non-zero by design (a rank is killed), so the verdict is the output line, not the exit code.
_zero_add_mpi_program(comm_timeout_mpitest)
if(ZERO_SANITIZE)
  set_target_properties(comm_timeout_mpitest PROPERTIES EXCLUDE_FROM_ALL ON)  # label mpi only
endif()
add_test(NAME mpi.comm.timeout.np3 COMMAND ${_zero_mpirun} -np 3 $<TARGET_FILE:comm_timeout_mpitest>)
set_tests_properties(mpi.comm.timeout.np3 PROPERTIES LABELS mpi TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "COMM-TIMEOUT-TEST PASS" ENVIRONMENT "${_zero_mpi_env}")
add_test(NAME mpi.comm.timeout.mpi_path.np3
         COMMAND ${_zero_mpirun} -np 3 $<TARGET_FILE:comm_timeout_mpitest>)
set_tests_properties(mpi.comm.timeout.mpi_path.np3 PROPERTIES LABELS mpi TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "COMM-TIMEOUT-TEST PASS"
                     ENVIRONMENT "${_zero_mpi_env};ZERO_SHM_COLLECTIVES=0")

# NCCL id exchange over MPI: needs the NCCL library, not a GPU.
if(ZERO_WITH_NCCL)
  _zero_add_mpi_program(nccl_bootstrap_mpitest)
  add_test(NAME mpi.comm.nccl_bootstrap.np2
           COMMAND ${_zero_mpirun} -np 2 $<TARGET_FILE:nccl_bootstrap_mpitest>)
  set_tests_properties(mpi.comm.nccl_bootstrap.np2 PROPERTIES LABELS mpi TIMEOUT 120
                       ENVIRONMENT "${_zero_mpi_env}")
endif()
