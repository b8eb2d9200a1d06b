# The ZeRO parity ladder, wire volume and memory tests at world sizes 1–4 (real mpirun processes).
add_executable(zero_parity_mpitest ${CMAKE_CURRENT_LIST_DIR}/zero_parity_mpitest.cc)
target_link_libraries(zero_parity_mpitest PRIVATE zero_runtime GTest::gtest)
target_compile_definitions(zero_parity_mpitest PRIVATE ZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(zero_parity_mpitest PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
foreach(n 1 2 3 4)
  add_test(NAME mpi.zero.np${n}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np ${n}
                   $<TARGET_FILE:zero_parity_mpitest>)
  set(_labels mpi)
  if(n EQUAL 2)
    list(APPEND _labels sanitize tsan)
  endif()
  set_tests_properties(mpi.zero.np${n} PROPERTIES LABELS "${_labels}" TIMEOUT 600
                       ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")
endforeach()
