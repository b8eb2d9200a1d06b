# `zero bench step` end to end: stage 3 with offload_param, a bf16 model's shards taking half an
# fp32 model's bytes (issue 10 item 3), and bad input exiting 2.
set(_bs_out ${CMAKE_BINARY_DIR}/test_out/bench_step)
set(_bs_common --model preset:gpt2-mini --stages 3 --steps 1 --warmup 0 --micro_batch 1
    --block_size 16)
list(JOIN _bs_common " " _bs_common)

# Columns of the stage-3 "off" row: $9 param MiB, $11 swap MiB. bf16 param MiB (host shards +
# peak gathered, offload_param cpu) and swap MiB (offload_param nvme) are half the fp32 ones (to
# the printed 0.01), and the swap directory is gone afterwards.
add_test(NAME cli.bench.step_stage3_bf16_shards_take_half
         COMMAND sh -c "rm -rf ${_bs_out} && for d in '' --bf16; do for o in cpu nvme; do \
'$<TARGET_FILE:zero>' bench step ${_bs_common} $d --offload_param $o --nvme_path ${_bs_out}/swap \
| awk -v o=$o '$1 == 3 && $2 == \"off\" { print o, $9, $11 }' || exit 1; done; done \
| awk '{ v[NR] = ($1 == \"cpu\") ? $2 : $3 } END { \
ok = NR == 4 && v[1] > 0 && v[2] > 0 && (v[1] - 2 * v[3]) ^ 2 < 4e-4 && (v[2] - 2 * v[4]) ^ 2 < 4e-4; \
print (ok ? \"HALF\" : \"NOT HALF\"), v[1], v[2], v[3], v[4] }' && test ! -e ${_bs_out}/swap")
set_tests_properties(cli.bench.step_stage3_bf16_shards_take_half PROPERTIES LABELS unit
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive"
                     PASS_REGULAR_EXPRESSION "^HALF ")

add_test(NAME cli.bench.step_bad_offload_param
         COMMAND sh -c "'$<TARGET_FILE:zero>' bench step --offload_param disk 2>&1; test $? -eq 2")
set_tests_properties(cli.bench.step_bad_offload_param PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--offload_param: disk not in \\{none,cpu,nvme\\}")

# --device: cpu (named in the header) or cuda; anything else is exit 2 naming the flag, and
# `--device cuda` without a usable GPU is exit 2 with train's message before anything is printed.
add_test(NAME cli.bench.step_unknown_device
         COMMAND sh -c "'$<TARGET_FILE:zero>' bench step --device tpu 2>&1; test $? -eq 2")
set_tests_properties(cli.bench.step_unknown_device PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--device tpu: expected cpu or cuda")
add_test(NAME cli.bench.step_device_cpu_in_header
         COMMAND sh -c "'$<TARGET_FILE:zero>' bench step ${_bs_common} --stages 0 --device cpu")
set_tests_properties(cli.bench.step_device_cpu_in_header PROPERTIES LABELS unit
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive"
                     PASS_REGULAR_EXPRESSION "^zero bench step: [^\n]*, device cpu\n")
add_test(NAME cli.bench.step_device_cuda
         COMMAND sh -c "out=$('$<TARGET_FILE:zero>' bench step ${_bs_common} --stages 0 --device cuda 2>&1); rc=$?; echo \"$out\" | tail -4; if test $rc -eq 0 && echo \"$out\" | grep -q ', device GPU 0: .*(sm_' && echo \"$out\" | grep -q 'staging MiB *GPU MiB'; then echo ran-on-gpu; elif test $rc -eq 2 && test $(echo \"$out\" | wc -l) -eq 1 && echo \"$out\" | grep -q '^error: .*--device cuda: .*\\(no usable GPU\\|no CUDA backend\\)'; then echo refused-first; fi")
set_tests_properties(cli.bench.step_device_cuda PROPERTIES LABELS unit
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive"
                     PASS_REGULAR_EXPRESSION "ran-on-gpu|refused-first")

# --offload_optimizer cpu (+ --offload_overlap): runs (on the CPU the host engine's CPU Adam; with
# --device cuda the offload pipeline, whose host times are printed per stage) and says which mode;
# --offload_overlap alone is exit 2 naming both flags.
add_test(NAME cli.bench.step_offload_optimizer
         COMMAND sh -c "'$<TARGET_FILE:zero>' bench step ${_bs_common} --stages 2 --offload_optimizer cpu --offload_overlap")
set_tests_properties(cli.bench.step_offload_optimizer PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "offload_optimizer cpu: the CPU Adam overlapping backward.*\n2 +off ")
add_test(NAME cli.bench.step_offload_overlap_needs_offload
         COMMAND sh -c "'$<TARGET_FILE:zero>' bench step --offload_overlap 2>&1; test $? -eq 2")
set_tests_properties(cli.bench.step_offload_overlap_needs_offload PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--offload_overlap needs --offload_optimizer cpu")
# A zero or negative count is refused naming the flag (--micro_batch 0 used to reach the model and
# fail inside it, exiting 0).
add_test(NAME cli.bench.step_counts_checked
         COMMAND sh -c "'$<TARGET_FILE:zero>' bench step --micro_batch 0 2>&1; test $? -eq 2")
set_tests_properties(cli.bench.step_counts_checked PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--micro_batch: .*>= 1")

# Stage 3's timed steps start in its steady state (runtime/step_benchmark.h kStage3WarmupSteps):
# at world 2 an fp32 step moves one gather of every parameter plus one reduce-scatter of every
# gradient, exactly twice stage 0's all-reduce payload, even with --warmup 1 (before: its second
# step's extra gather made it 2.5x over 2 timed steps).
add_test(NAME cli.bench.step_stage3_wire_is_steady_state
         COMMAND sh -c "${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none \
-np 2 '$<TARGET_FILE:zero>' bench step --model preset:gpt2-tiny --stages 0 3 --steps 2 \
--warmup 1 --micro_batch 1 --block_size 16 | awk '$2 == \"off\" { w[$1] = $8 } END { \
print (w[0] > 0 && w[3] == 2 * w[0] ? \"STEADY\" : \"NOT STEADY\"), w[0], w[3] }'")
set_tests_properties(cli.bench.step_stage3_wire_is_steady_state PROPERTIES LABELS mpi
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive"
                     PASS_REGULAR_EXPRESSION "^STEADY ")
