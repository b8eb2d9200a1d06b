# `zero launch` end to end: the printed mpirun / srun line, bad input (exit 2), and one real
# two-rank run through mpirun (label mpi).
set(_hostfiles ${PROJECT_SOURCE_DIR}/tests/fixtures/hostfiles)

add_test(NAME cli.launch.dry_run_two_ranks
         COMMAND zero launch --dry_run --num_gpus 2 -- zero --version)
set_tests_properties(cli.launch.dry_run_two_ranks PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION
                     "zero launch: mpirun -np 2 --bind-to none .*-x MASTER_ADDR=127\\.0\\.0\\.1 -x MASTER_PORT=29500 .*/zero --version")

add_test(NAME cli.launch.dry_run_hostfile_include
         COMMAND zero launch --dry_run --hostfile ${_hostfiles}/good.hostfile
                 --include worker-0:1,3@worker-1:1,3 --master_port 4242 -- zero train)
set_tests_properties(cli.launch.dry_run_hostfile_include PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION
                     "mpirun -np 4 --host worker-0:2,worker-1:2 --bind-to none .*-x CUDA_VISIBLE_DEVICES=1,3 -x MASTER_ADDR=worker-0 -x MASTER_PORT=4242 ")

add_test(NAME cli.launch.dry_run_slurm
         COMMAND zero launch --dry_run --launcher slurm --hostfile ${_hostfiles}/good.hostfile
                 --num_nodes 2 -- zero train)
set_tests_properties(cli.launch.dry_run_slurm PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION
                     "zero launch: srun -n 8 --nodes 2 --nodelist=worker-0,worker-1 --ntasks-per-node 4 --export=ALL,MASTER_ADDR=worker-0,MASTER_PORT=29500 ")

add_test(NAME cli.launch.dry_run_deepspeed_env
         COMMAND sh -c "d=$(mktemp -d) && cd $d && printf 'NCCL_DEBUG=INFO\\n' > .deepspeed_env && $<TARGET_FILE:zero> launch --dry_run -- true; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(cli.launch.dry_run_deepspeed_env PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "-x NCCL_DEBUG=INFO ")

add_test(NAME cli.launch.bad_hostfile_exit2
         COMMAND sh -c "$<TARGET_FILE:zero> launch --dry_run --hostfile ${_hostfiles}/duplicate.hostfile -- true 2>&1; test $? -eq 2")
set_tests_properties(cli.launch.bad_hostfile_exit2 PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION
                     "zero launch: error: .*duplicate\\.hostfile:4: duplicate host 'worker-1' \\(already listed at line 2\\)")

add_test(NAME cli.launch.include_and_num_gpus_exit2
         COMMAND sh -c "$<TARGET_FILE:zero> launch --dry_run --num_gpus 1 --include localhost -- true 2>&1; test $? -eq 2")
set_tests_properties(cli.launch.include_and_num_gpus_exit2 PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "cannot combine --num_nodes/--num_gpus with --include/--exclude")

add_test(NAME cli.launch.missing_command_exit2
         COMMAND sh -c "$<TARGET_FILE:zero> launch --dry_run 2>&1; test $? -eq 2")
set_tests_properties(cli.launch.missing_command_exit2 PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "no command to run")

# Real runs: two ranks each print `zero X.Y.Z`; the child's exit status comes back.
add_test(NAME cli.launch.mpirun_two_ranks
         COMMAND sh -c "$<TARGET_FILE:zero> launch --num_gpus 2 -- zero --version | grep -c '^zero [0-9]' | grep -qx 2")
set_tests_properties(cli.launch.mpirun_two_ranks PROPERTIES LABELS mpi TIMEOUT 60)

add_test(NAME cli.launch.mpirun_exit_status
         COMMAND sh -c "$<TARGET_FILE:zero> launch -- sh -c 'exit 3'; test $? -eq 3")
set_tests_properties(cli.launch.mpirun_exit_status PROPERTIES LABELS mpi TIMEOUT 60)

# Several hosts on one machine (tests/cli/netns_hosts.sh): network namespaces on a bridge, each
# with its own address, hostname and disk; mpirun's agent enters them. Skipped (77) without root.
foreach(_case train env checkpoint lost_host dead_link unreachable)
  add_test(NAME cli.launch.netns_${_case}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/netns_hosts.sh $<TARGET_FILE:zero>
                   ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin
                   ${CMAKE_BINARY_DIR}/test_out/netns_${_case} ${_case})
  set_tests_properties(cli.launch.netns_${_case} PROPERTIES LABELS mpi TIMEOUT 180
                       SKIP_RETURN_CODE 77)
endforeach()
