# `zero train` end to end: the real binary on the golden token stream, flags vs config, errors,
# and the same run across ranks (mpirun and zero launch) matching the single-rank metrics.
set(_zt_data ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin)
set(_zt_out ${CMAKE_BINARY_DIR}/test_out/train)
set(_zt_common --model preset:gpt2-tiny --train_file ${_zt_data} --block_size 16
    --per_device_train_batch_size 4 --max_steps 8 --learning_rate 1e-3 --quiet --overwrite_output_dir)
list(JOIN _zt_common " " _zt_common)

add_test(NAME cli.train.single
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --output_dir ${_zt_out}/single --save_final >/dev/null && test $(wc -l < ${_zt_out}/single/metrics.jsonl) -eq 8 && test -f ${_zt_out}/single/final/model.safetensors")
# Its output is read by the tests below (fixtures: `ctest -R` of one of them runs this first).
set_tests_properties(cli.train.single PROPERTIES LABELS unit FIXTURES_SETUP zt_single)

add_test(NAME cli.train.generate_from_final
         COMMAND $<TARGET_FILE:zero> generate --model ${_zt_out}/single/final --prompt_tokens 1,2,3 --max_new_tokens 5)
set_tests_properties(cli.train.generate_from_final PROPERTIES LABELS unit FIXTURES_REQUIRED zt_single
                     PASS_REGULAR_EXPRESSION " 1 2 3 [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+")

# An explicit config value contradicted by a flag: exit 2 naming both.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/lr_conflict.json
     "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}}")
add_test(NAME cli.train.flag_contradicts_config
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/lr_conflict.json --output_dir ${_zt_out}/conflict 2>&1; test $? -eq 2")
set_tests_properties(cli.train.flag_contradicts_config PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--learning_rate.*optimizer.params.lr|optimizer.params.lr.*--learning_rate")

# --device: cpu or cuda; anything else is exit 2 naming the flag before any work.
add_test(NAME cli.train.unknown_device
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --device tpu --output_dir ${_zt_out}/tpu 2>&1; test $? -eq 2")
set_tests_properties(cli.train.unknown_device PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--device tpu: expected cpu or cuda")

# --device cuda: trains on a GPU (one rank, nothing offloaded: the ZeRO state on the GPU, no
# staging); without one (or in a build without CUDA), exit 2 saying which.
add_test(NAME cli.train.device_cuda
         COMMAND sh -c "out=$($<TARGET_FILE:zero> train ${_zt_common} --max_steps 2 --device cuda --output_dir ${_zt_out}/cuda 2>&1); rc=$?; echo \"$out\" | tail -3; if test $rc -eq 0 && echo \"$out\" | grep -q 'master weights and moments GPU memory'; then echo trained-on-gpu; elif test $rc -eq 2 && echo \"$out\" | grep -q 'no usable GPU\\|no CUDA backend'; then echo refused-clearly; fi")
set_tests_properties(cli.train.device_cuda PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "trained-on-gpu|refused-clearly")

# --offload_overlap (opt-in): with --device cuda, offload_optimizer cpu, no clipping and bf16 the
# CPU Adam overlaps backward and the banner says so (or, without a GPU, exit 2 saying which); on
# the CPU it is a note that the flag has no effect there, and training runs as without it.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/offload_overlap.json
     "{\"bf16\": {\"enabled\": true}, \"gradient_clipping\": 0, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}}")
add_test(NAME cli.train.offload_overlap_cuda
         COMMAND sh -c "out=$($<TARGET_FILE:zero> train ${_zt_common} --max_steps 2 --device cuda --offload_overlap --deepspeed ${CMAKE_BINARY_DIR}/test_out/offload_overlap.json --output_dir ${_zt_out}/overlap_cuda 2>&1); rc=$?; echo \"$out\" | tail -3; if test $rc -eq 0 && echo \"$out\" | grep -q 'CPU Adam overlapping backward (--offload_overlap)'; then echo overlapped-on-gpu; elif test $rc -eq 2 && echo \"$out\" | grep -q 'no usable GPU\\|no CUDA backend'; then echo refused-clearly; fi")
set_tests_properties(cli.train.offload_overlap_cuda PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "overlapped-on-gpu|refused-clearly")
add_test(NAME cli.train.offload_overlap_on_cpu_is_a_note
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --max_steps 2 --offload_overlap --deepspeed ${CMAKE_BINARY_DIR}/test_out/offload_overlap.json --output_dir ${_zt_out}/overlap_cpu 2>&1 && test $(wc -l < ${_zt_out}/overlap_cpu/metrics.jsonl) -eq 2 && echo trained")
set_tests_properties(cli.train.offload_overlap_on_cpu_is_a_note PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--offload_overlap has no effect here.*trained")

# The refusal comes first: without a usable GPU nothing else is printed (no banner before the
# error, as there was), exit 2.
add_test(NAME cli.train.device_cuda_refuses_first
         COMMAND sh -c "out=$($<TARGET_FILE:zero> train ${_zt_common} --max_steps 1 --device cuda --output_dir ${_zt_out}/cuda_first 2>&1); rc=$?; if test $rc -eq 0; then echo trained-on-gpu; elif test $rc -eq 2 && test $(echo \"$out\" | wc -l) -eq 1 && echo \"$out\" | grep -q '^error: --device cuda: .*\\(no usable GPU\\|no CUDA backend\\)'; then echo refused-first; else echo \"rc=$rc: $out\"; fi")
set_tests_properties(cli.train.device_cuda_refuses_first PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "trained-on-gpu|refused-first")

# A typo DeepSpeed would ignore stops the run.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/typo.json "{\"gradient_clipin\": 1.0}")
add_test(NAME cli.train.config_typo
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/typo.json --output_dir ${_zt_out}/typo 2>&1; test $? -eq 2")
set_tests_properties(cli.train.config_typo PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "gradient_clipin.*gradient_clipping")

# Token ids beyond the model's vocabulary are refused with the position.
# 64 bytes of "z" read as uint16: 32 tokens of id 0x7a7a = 31354.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/big_ids.bin "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz")
add_test(NAME cli.train.vocab_too_small
         COMMAND sh -c "$<TARGET_FILE:zero> train --model preset:gpt2-tiny --train_file ${CMAKE_BINARY_DIR}/test_out/big_ids.bin --data_dtype uint16 --block_size 16 --max_steps 2 --quiet --overwrite_output_dir --output_dir ${_zt_out}/vocab 2>&1; test $? -eq 2")
set_tests_properties(cli.train.vocab_too_small PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "token id 31354 at position 0 is >= vocab_size 256")

# ZeRO-3 on 2 ranks (mpirun) and through zero launch reproduce the single-rank curve.
add_test(NAME cli.train.zero3_np2_matches_single
         COMMAND sh -c "${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np 2 $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json --output_dir ${_zt_out}/zero3 >/dev/null && $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json --per_device_train_batch_size 8 --output_dir ${_zt_out}/zero3_single >/dev/null && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/zero3/metrics.jsonl ${_zt_out}/zero3_single/metrics.jsonl 1e-5")
set_tests_properties(cli.train.zero3_np2_matches_single PROPERTIES LABELS mpi TIMEOUT 300
                     FIXTURES_REQUIRED zt_single FIXTURES_SETUP zt_zero3
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")

add_test(NAME cli.train.launch_np2_zero3
         COMMAND sh -c "$<TARGET_FILE:zero> launch --num_gpus 2 -- zero train ${_zt_common} --deepspeed ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json --output_dir ${_zt_out}/launch >/dev/null 2>&1 && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/launch/metrics.jsonl ${_zt_out}/zero3/metrics.jsonl 1e-6")
set_tests_properties(cli.train.launch_np2_zero3 PROPERTIES LABELS mpi TIMEOUT 300
                     FIXTURES_REQUIRED zt_zero3
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")

# Checkpoints: save every 4 steps, resume from step 4 in another directory: steps 5..8 are
# bit-identical; resume the single-rank stage-1 checkpoint on 2 ranks at stage 3 (resharding).
add_test(NAME cli.train.save_and_resume
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --save_steps 4 --output_dir ${_zt_out}/ckpt >/dev/null && test -f ${_zt_out}/ckpt/global_step8/manifest.json && test \"$(cat ${_zt_out}/ckpt/latest)\" = global_step8 && rm -rf ${_zt_out}/resumed && $<TARGET_FILE:zero> train ${_zt_common} --resume_from_checkpoint ${_zt_out}/ckpt/global_step4 --output_dir ${_zt_out}/resumed >/dev/null && head -n 1 ${_zt_out}/resumed/metrics.jsonl | grep -q 'step.: 5,' && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/resumed/metrics.jsonl ${_zt_out}/ckpt/metrics.jsonl 0")
set_tests_properties(cli.train.save_and_resume PROPERTIES LABELS unit)

# The example ZeRO-3 config with stage 1: the same optimizer and schedule on both sides.
file(READ ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json _zt_z3)
string(REPLACE "\"stage\": 3" "\"stage\": 1" _zt_z1 "${_zt_z3}")
file(WRITE ${CMAKE_BINARY_DIR}/test_out/stage1.json "${_zt_z1}")
add_test(NAME cli.train.resume_resharded_np2_stage3
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --per_device_train_batch_size 8 --deepspeed ${CMAKE_BINARY_DIR}/test_out/stage1.json --save_steps 4 --output_dir ${_zt_out}/s1 >/dev/null && rm -rf ${_zt_out}/s3 && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np 2 $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json --resume_from_checkpoint ${_zt_out}/s1/global_step4 --output_dir ${_zt_out}/s3 >/dev/null && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/s3/metrics.jsonl ${_zt_out}/s1/metrics.jsonl 1e-5")
set_tests_properties(cli.train.resume_resharded_np2_stage3 PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")

# A rank stopped with SIGSTOP mid-run: the other exits non-zero within the collective timeout
# naming it, and the job ends instead of hanging.
add_test(NAME cli.train.stopped_rank_is_named
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/fault_stop_rank.sh $<TARGET_FILE:zero>
                 ${MPIEXEC_EXECUTABLE} ${_zt_data} ${CMAKE_BINARY_DIR}/test_out/fault)
set_tests_properties(cli.train.stopped_rank_is_named PROPERTIES LABELS mpi TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "PASS: exit")

# ZeRO-3 with the optimizer state on NVMe (io_uring swap files): identical losses to the in-memory
# run, and its checkpoint resumes identically.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/nvme3.json
     "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"${CMAKE_BINARY_DIR}/test_out/nvme_swap\", \"pipeline_read\": true, \"pipeline_write\": true}}}")
file(WRITE ${CMAKE_BINARY_DIR}/test_out/stage3.json "{\"zero_optimization\": {\"stage\": 3}}")
add_test(NAME cli.train.nvme_offload_matches_and_resumes
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/nvme3.json --save_steps 4 --output_dir ${_zt_out}/nvme >/dev/null 2>&1 && $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/stage3.json --output_dir ${_zt_out}/mem >/dev/null && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/nvme/metrics.jsonl ${_zt_out}/mem/metrics.jsonl 0 && rm -rf ${_zt_out}/nvme_resumed && $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/nvme3.json --resume_from_checkpoint ${_zt_out}/nvme/global_step4 --output_dir ${_zt_out}/nvme_resumed >/dev/null 2>&1 && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/nvme_resumed/metrics.jsonl ${_zt_out}/mem/metrics.jsonl 0 && test ! -e ${CMAKE_BINARY_DIR}/test_out/nvme_swap")
set_tests_properties(cli.train.nvme_offload_matches_and_resumes PROPERTIES LABELS unit)

# ZeRO-Infinity on 2 ranks: parameter shards (all of them: max_in_cpu 0, persistence 0) and the
# optimizer state in NVMe swap files under one shared nvme_path: the in-memory single-rank ZeRO-3
# curve; its checkpoint (streamed from the swap files) verifies and resumes bit-identically, the
# final model is gathered from them, and nothing is left behind in the swap directory.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/infinity.json
     "{\"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"${CMAKE_BINARY_DIR}/test_out/infinity_swap/nvme\", \"max_in_cpu\": 0, \"buffer_count\": 2, \"buffer_size\": 4096}, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"${CMAKE_BINARY_DIR}/test_out/infinity_swap/nvme\", \"pipeline_read\": true, \"pipeline_write\": true, \"fast_init\": true}}}")
add_test(NAME cli.train.infinity_np2_matches_in_memory
         COMMAND sh -c "rm -rf ${CMAKE_BINARY_DIR}/test_out/infinity_swap && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np 2 $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/infinity.json --save_steps 4 --save_final --output_dir ${_zt_out}/infinity >/dev/null 2>&1 && $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/stage3.json --per_device_train_batch_size 8 --output_dir ${_zt_out}/infinity_ref >/dev/null && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/infinity/metrics.jsonl ${_zt_out}/infinity_ref/metrics.jsonl 1e-5 && $<TARGET_FILE:zero> ckpt verify ${_zt_out}/infinity >/dev/null && test -f ${_zt_out}/infinity/final/model.safetensors && rm -rf ${_zt_out}/infinity_resumed && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np 2 $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/infinity.json --resume_from_checkpoint ${_zt_out}/infinity/global_step4 --output_dir ${_zt_out}/infinity_resumed >/dev/null 2>&1 && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/infinity_resumed/metrics.jsonl ${_zt_out}/infinity/metrics.jsonl 0 && test ! -e ${CMAKE_BINARY_DIR}/test_out/infinity_swap")
set_tests_properties(cli.train.infinity_np2_matches_in_memory PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=passive")

# bf16 optimizer state (DeepSpeed 0.19's bf16.bf16_master_weights_and_grads + bf16_optimizer_states,
# ZeRO-Offload's CPU Adam on bf16 master weights and moments): the checkpoint at step 4 (fp32
# values, the bf16 ones widened: docs/formats/checkpoint.md) resumes steps 5..8 bit-identically.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/bf16_state.json
     "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true, \"bf16_optimizer_states\": true}, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}}")
add_test(NAME cli.train.bf16_state_save_and_resume
         COMMAND sh -c "rm -rf ${_zt_out}/bf16_state ${_zt_out}/bf16_state_resumed && $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/bf16_state.json --save_steps 4 --output_dir ${_zt_out}/bf16_state >/dev/null && $<TARGET_FILE:zero> train ${_zt_common} --deepspeed ${CMAKE_BINARY_DIR}/test_out/bf16_state.json --resume_from_checkpoint ${_zt_out}/bf16_state/global_step4 --output_dir ${_zt_out}/bf16_state_resumed >/dev/null && head -n 1 ${_zt_out}/bf16_state_resumed/metrics.jsonl | grep -q 'step.: 5,' && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zt_out}/bf16_state_resumed/metrics.jsonl ${_zt_out}/bf16_state/metrics.jsonl 0")
set_tests_properties(cli.train.bf16_state_save_and_resume PROPERTIES LABELS unit)
