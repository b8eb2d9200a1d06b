# Checkpoints across real ranks: save at step 20 and resume bit-identically at every stage and world
# size 1–4, and resharding chains (save at one world size / stage, resume at another in a second
# mpirun, ordered by ctest fixtures).
add_executable(checkpoint_mpitest ${CMAKE_CURRENT_LIST_DIR}/checkpoint_mpitest.cc)
target_link_libraries(checkpoint_mpitest PRIVATE zero_runtime zero_checkpoint GTest::gtest)
target_compile_definitions(checkpoint_mpitest PRIVATE ZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(checkpoint_mpitest PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
if(ZERO_SANITIZE)
  # Its tests are labelled mpi only, which the sanitizer stages do not run: not built there.
  set_target_properties(checkpoint_mpitest PROPERTIES EXCLUDE_FROM_ALL ON)
endif()
set(_ckpt_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none)
set(_ckpt_env "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")

foreach(n 1 2 3 4)
  add_test(NAME mpi.checkpoint.resume.np${n}
           COMMAND ${_ckpt_mpirun} -np ${n} $<TARGET_FILE:checkpoint_mpitest>
                   --gtest_filter=EveryStage/Resume.*)
  set_tests_properties(mpi.checkpoint.resume.np${n} PROPERTIES LABELS mpi TIMEOUT 600
                       ENVIRONMENT "${_ckpt_env}")
endforeach()

# Each chain: "save_np save_stage resume_np resume_stage global_batch".
foreach(chain "4 3 2 2 4" "2 3 3 1 6" "1 1 4 3 4")
  separate_arguments(_c UNIX_COMMAND "${chain}")
  list(GET _c 0 _snp)
  list(GET _c 1 _sst)
  list(GET _c 2 _rnp)
  list(GET _c 3 _rst)
  list(GET _c 4 _tbs)
  set(_name w${_snp}s${_sst}_to_w${_rnp}s${_rst})
  set(_dir ${CMAKE_BINARY_DIR}/tests/checkpoint_reshard/${_name})
  add_test(NAME mpi.checkpoint.reshard.${_name}.save
           COMMAND ${_ckpt_mpirun} -np ${_snp} $<TARGET_FILE:checkpoint_mpitest>
                   --gtest_filter=Reshard.Save)
  set_tests_properties(mpi.checkpoint.reshard.${_name}.save PROPERTIES LABELS mpi TIMEOUT 600
                       FIXTURES_SETUP ckpt_${_name}
                       ENVIRONMENT "${_ckpt_env};ZERO_CKPT_DIR=${_dir};ZERO_CKPT_STAGE=${_sst};ZERO_CKPT_TBS=${_tbs}")
  add_test(NAME mpi.checkpoint.reshard.${_name}.resume
           COMMAND ${_ckpt_mpirun} -np ${_rnp} $<TARGET_FILE:checkpoint_mpitest>
                   --gtest_filter=Reshard.Resume)
  set_tests_properties(mpi.checkpoint.reshard.${_name}.resume PROPERTIES LABELS mpi TIMEOUT 600
                       FIXTURES_REQUIRED ckpt_${_name}
                       ENVIRONMENT "${_ckpt_env};ZERO_CKPT_DIR=${_dir};ZERO_CKPT_STAGE=${_rst};ZERO_CKPT_TBS=${_tbs}")
endforeach()
