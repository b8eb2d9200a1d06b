# Issue 13 item 18, logs: plain lines under mpirun (no "\r" / ESC, whole messages), the live line
# only on a terminal we own, wall_clock_breakdown timers, OUTPUT_DIR/ds_config.effective.json,
# zero launch --enable_each_rank_log, errors named by rank.
set(_zl_check ${PROJECT_SOURCE_DIR}/tests/cli/logs_check.sh)
set(_zl_data ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin)
set(_zl_out ${CMAKE_BINARY_DIR}/test_out/logs)

foreach(_zl_mode plain rank_log errors)
  add_test(NAME cli.logs.${_zl_mode}
           COMMAND ${_zl_check} ${_zl_mode} $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zl_data}
                   ${_zl_out}/${_zl_mode})
  set_tests_properties(cli.logs.${_zl_mode} PROPERTIES LABELS mpi TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "PASS: ")
endforeach()
add_test(NAME cli.logs.live
         COMMAND ${_zl_check} live $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zl_data} ${_zl_out}/live)
set_tests_properties(cli.logs.live PROPERTIES LABELS unit TIMEOUT 60 PASS_REGULAR_EXPRESSION "PASS: ")
