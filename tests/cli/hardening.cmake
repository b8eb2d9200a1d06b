# Issue 13 (hardening), items 1-7 and 19: saves onto an existing tag, one job per output
# directory, signals, kill -9 during saves, checkpoint/run mismatches, save options, resume notes.
set(_zh_data ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin)
set(_zh_out ${CMAKE_BINARY_DIR}/test_out/hardening)
set(_zh_common --model preset:gpt2-tiny --train_file ${_zh_data} --block_size 16
    --per_device_train_batch_size 4 --learning_rate 1e-3 --quiet)
list(JOIN _zh_common " " _zh_common)
set(_zh_jobs ${PROJECT_SOURCE_DIR}/tests/cli/hardening_jobs.sh)

# Item 1 + 19: run A saves global_step2 and global_step4; a run resumed from global_step2 with
# --save_steps 2 saved nothing at step 4 (A's global_step4 stayed, `latest` named it). Now it
# replaces the tag and says so; the banner names the checkpoint, a longer --max_steps is reported,
# and the summary counts this run's steps.
add_test(NAME cli.train.resume_replaces_a_later_tag
         COMMAND sh -c "rm -rf ${_zh_out}/tag && $<TARGET_FILE:zero> train ${_zh_common} --max_steps 4 --save_steps 2 --output_dir ${_zh_out}/tag >/dev/null && $<TARGET_FILE:zero> train ${_zh_common} --max_steps 6 --save_steps 2 --resume_from_checkpoint ${_zh_out}/tag/global_step2 --output_dir ${_zh_out}/tag > ${_zh_out}/tag.log 2>&1 && grep -q 'saved checkpoint ${_zh_out}/tag/global_step4 (replaced' ${_zh_out}/tag.log && grep -q 'weights and optimizer state from ${_zh_out}/tag/global_step2' ${_zh_out}/tag.log && ! grep -q 'random init' ${_zh_out}/tag.log && grep -q 'total_num_steps changes from 4 to 6' ${_zh_out}/tag.log && grep -q '4 steps (3..6, resumed at step 2)' ${_zh_out}/tag.log && test $(cat ${_zh_out}/tag/latest) = global_step6 && test $(wc -l < ${_zh_out}/tag/metrics.jsonl) -eq 6")
set_tests_properties(cli.train.resume_replaces_a_later_tag PROPERTIES LABELS unit)

# Item 7: an invalid save option is refused before training (no metrics.jsonl written).
add_test(NAME cli.train.bad_save_dtype_refused_at_start
         COMMAND sh -c "rm -rf ${_zh_out}/fp8 && $<TARGET_FILE:zero> train ${_zh_common} --max_steps 30 --save_final --save_dtype fp8 --output_dir ${_zh_out}/fp8 2>&1; test $? -eq 2 && test ! -e ${_zh_out}/fp8/metrics.jsonl")
set_tests_properties(cli.train.bad_save_dtype_refused_at_start PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--save_dtype fp8: expected fp32, bf16 or fp16")

# Item 7: an AdamW checkpoint resumed under Lamb is refused, naming both.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/lamb.json
     "{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"lr\": 1e-3}}}")
add_test(NAME cli.train.resume_under_another_optimizer_refused
         COMMAND sh -c "rm -rf ${_zh_out}/opt ${_zh_out}/opt2 && $<TARGET_FILE:zero> train ${_zh_common} --max_steps 2 --save_steps 2 --output_dir ${_zh_out}/opt >/dev/null && $<TARGET_FILE:zero> train --model preset:gpt2-tiny --train_file ${_zh_data} --block_size 16 --per_device_train_batch_size 4 --quiet --max_steps 4 --deepspeed ${CMAKE_BINARY_DIR}/test_out/lamb.json --resume_from_checkpoint ${_zh_out}/opt --output_dir ${_zh_out}/opt2 2>&1; test $? -eq 2")
set_tests_properties(cli.train.resume_under_another_optimizer_refused PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "optimizer 'adamw', this run uses 'lamb'")

# Item 2 + 5: a second job on a running job's --output_dir is refused naming pid and host; SIGINT
# ends the first with 130 at a step boundary.
add_test(NAME cli.train.second_job_refused_and_sigint
         COMMAND ${_zh_jobs} lock $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zh_data} ${_zh_out}/lock)
set_tests_properties(cli.train.second_job_refused_and_sigint PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "PASS: second job refused")

# Item 5 (under mpirun, NVMe swap files, --save_on_interrupt). The multi-rank fault tests run
# serially: cli.train.stopped_rank_is_named finds its victim as any `zero train` of rank 1.
add_test(NAME cli.train.sigterm_np2_saves_and_cleans_up
         COMMAND ${_zh_jobs} sigterm $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zh_data} ${_zh_out}/sigterm)
set_tests_properties(cli.train.sigterm_np2_saves_and_cleans_up PROPERTIES LABELS mpi RUN_SERIAL TRUE TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "PASS: SIGTERM")

# Item 6: kill -9 of one of two ranks while saving every step; resume keeps one line per step.
add_test(NAME cli.train.kill9_np2_resume_keeps_metrics
         COMMAND ${_zh_jobs} kill9 $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zh_data} ${_zh_out}/kill9)
set_tests_properties(cli.train.kill9_np2_resume_keeps_metrics PROPERTIES LABELS mpi RUN_SERIAL TRUE TIMEOUT 180
                     PASS_REGULAR_EXPRESSION "PASS: kill -9")

# Item 7 (CLI): a manifest listing rank 0's file twice fails `zero ckpt verify`.
add_test(NAME cli.ckpt.verify_refuses_a_file_listed_twice
         COMMAND sh -c "mkdir -p ${_zh_out} && rm -rf ${_zh_out}/twice && cp -r ${PROJECT_SOURCE_DIR}/tests/fixtures/checkpoint/hand_built ${_zh_out}/twice && sed -i 's/rank_1.safetensors/rank_0.safetensors/' ${_zh_out}/twice/global_step7/manifest.json && $<TARGET_FILE:zero> ckpt verify ${_zh_out}/twice 2>&1; test $? -ne 0")
set_tests_properties(cli.ckpt.verify_refuses_a_file_listed_twice PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "files.1. is 'rank_0.safetensors'")

# Item 6, deterministically: a save that fails after its tag directory is in place (here `latest`
# cannot be replaced: it is a directory) used to end the run before step N's metrics line was
# written, so resuming from global_step2 left steps [1, 3]. The line is written and synced first.
add_test(NAME cli.train.failed_publish_keeps_the_metrics_line
         COMMAND sh -c "rm -rf ${_zh_out}/publish && mkdir -p ${_zh_out}/publish/latest && $<TARGET_FILE:zero> train ${_zh_common} --max_steps 6 --save_steps 2 --output_dir ${_zh_out}/publish >/dev/null 2>&1; rmdir ${_zh_out}/publish/latest && $<TARGET_FILE:zero> train ${_zh_common} --max_steps 3 --resume_from_checkpoint ${_zh_out}/publish/global_step2 --output_dir ${_zh_out}/publish >/dev/null && /usr/bin/python3 -c \"import json,sys; s=[json.loads(l)['step'] for l in open('${_zh_out}/publish/metrics.jsonl')]; print(s); sys.exit(s != [1, 2, 3])\"")
set_tests_properties(cli.train.failed_publish_keeps_the_metrics_line PROPERTIES LABELS unit)

# Item 2 (`zero ckpt` writes): to-fp32 into a directory whose lock another process holds (here the
# flock tool, with a holder line written first) is refused naming the holder.
add_test(NAME cli.ckpt.to_fp32_refuses_a_locked_directory
         COMMAND sh -c "rm -rf ${_zh_out}/locked && mkdir -p ${_zh_out}/locked && echo 'pid 4242 host elsewhere (zero train)' > ${_zh_out}/locked/.lock && flock -n ${_zh_out}/locked/.lock $<TARGET_FILE:zero> ckpt to-fp32 ${PROJECT_SOURCE_DIR}/tests/fixtures/checkpoint/hand_built ${_zh_out}/locked 2>&1; test $? -eq 2 && test ! -e ${_zh_out}/locked/config.json")
set_tests_properties(cli.ckpt.to_fp32_refuses_a_locked_directory PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "in use by another job: pid 4242 host elsewhere")

# Items 8 and 9: a rank that fails alone ends the job at once (the collective timeout is 30
# minutes; the test's limit is 60 s), and ranks started with different settings are refused.
add_test(NAME cli.train.rank_failing_alone_ends_the_job
         COMMAND ${_zh_jobs} alone $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zh_data} ${_zh_out}/alone)
set_tests_properties(cli.train.rank_failing_alone_ends_the_job PROPERTIES LABELS mpi RUN_SERIAL TRUE
                     TIMEOUT 150 PASS_REGULAR_EXPRESSION "PASS: a rank failing alone")
add_test(NAME cli.train.ranks_with_different_settings_refused
         COMMAND ${_zh_jobs} mismatch $<TARGET_FILE:zero> ${MPIEXEC_EXECUTABLE} ${_zh_data} ${_zh_out}/mismatch)
set_tests_properties(cli.train.ranks_with_different_settings_refused PROPERTIES LABELS mpi
                     TIMEOUT 150 PASS_REGULAR_EXPRESSION "PASS: ranks with different settings")

# Item 12: flags out of range are refused naming the flag (they were reinterpreted: 0 = default,
# -1 = unlimited or 2^64 - 1); bad token lists and sampling values in zero generate.
foreach(_zh_bad "--block_size 0" "--block_size -5" "--save_steps -1" "--save_total_limit -1"
        "--seed -1" "--max_steps -5" "--learning_rate nan" "--adam_beta2 1.5")
  string(REPLACE " " ";" _zh_args "${_zh_bad}")
  list(GET _zh_args 0 _zh_flag)
  string(MAKE_C_IDENTIFIER "${_zh_bad}" _zh_id)
  add_test(NAME cli.train.flag_out_of_range_${_zh_id}
           COMMAND sh -c "$<TARGET_FILE:zero> train ${_zh_common} --max_steps 2 ${_zh_bad} --output_dir ${_zh_out}/range_${_zh_id} 2>&1; test $? -eq 2 && test ! -e ${_zh_out}/range_${_zh_id}")
  set_tests_properties(cli.train.flag_out_of_range_${_zh_id} PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "${_zh_flag}: must be")
endforeach()
foreach(_zh_bad "--prompt_tokens abc" "--prompt_tokens 1,,2" "--temperature -1" "--temperature nan"
        "--top_k -3")
  string(MAKE_C_IDENTIFIER "${_zh_bad}" _zh_id)
  add_test(NAME cli.generate.bad_${_zh_id}
           COMMAND sh -c "$<TARGET_FILE:zero> generate --model preset:gpt2-tiny --max_new_tokens 2 ${_zh_bad} 2>&1; test $? -eq 2")
  set_tests_properties(cli.generate.bad_${_zh_id} PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "--(prompt_tokens|temperature|top_k)")
endforeach()
add_test(NAME cli.ckpt.max_shard_size_zero_refused
         COMMAND sh -c "$<TARGET_FILE:zero> ckpt to-fp32 ${PROJECT_SOURCE_DIR}/tests/fixtures/checkpoint/hand_built ${_zh_out}/shard0 --max_shard_size 0 2>&1; test $? -eq 2")
set_tests_properties(cli.ckpt.max_shard_size_zero_refused PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "must be at least 1 byte")

# Item 12: `zero train | head` used to die of SIGPIPE after step 1; the run goes on to the end.
add_test(NAME cli.train.closed_stdout_keeps_training
         COMMAND bash -c "mkdir -p ${_zh_out} && rm -rf ${_zh_out}/pipe && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/closed_stdout.py $<TARGET_FILE:zero> train ${_zh_common} --max_steps 6 --logging_steps 1 --output_dir ${_zh_out}/pipe && test $(wc -l < ${_zh_out}/pipe/metrics.jsonl) -eq 6")
set_tests_properties(cli.train.closed_stdout_keeps_training PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "stdout is closed")

# Item 13: a model whose weights are all NaN stopped with exit 0 after skipping every step.
add_test(NAME cli.train.nonfinite_loss_stops
         COMMAND sh -c "/usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/nan_model.py ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny ${_zh_out}/nan_model && rm -rf ${_zh_out}/nan && $<TARGET_FILE:zero> train --model ${_zh_out}/nan_model --train_file ${_zh_data} --block_size 16 --per_device_train_batch_size 2 --quiet --max_steps 50 --max_nonfinite_steps 3 --output_dir ${_zh_out}/nan 2>&1; test $? -eq 1 && test $(wc -l < ${_zh_out}/nan/metrics.jsonl) -eq 3")
set_tests_properties(cli.train.nonfinite_loss_stops PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "not finite\\) in the last 3 steps \\(1..3\\)")

# Item 16: --bf16 with --fp16 is an error; unknown flags get a did-you-mean; HF's no-op flags are
# accepted with a note; --model_name_or_path is --model.
add_test(NAME cli.train.bf16_and_fp16_refused
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zh_common} --max_steps 2 --bf16 --fp16 --output_dir ${_zh_out}/both 2>&1; test $? -eq 2")
set_tests_properties(cli.train.bf16_and_fp16_refused PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--bf16 and --fp16 are both set")
add_test(NAME cli.train.unknown_flag_did_you_mean
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zh_common} --max_steps 2 --learnig_rate 1e-3 --output_dir ${_zh_out}/typo 2>&1; test $? -eq 2")
set_tests_properties(cli.train.unknown_flag_did_you_mean PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "unknown flag --learnig_rate \\(did you mean --learning_rate\\?\\)")
add_test(NAME cli.train.hf_noop_flags_and_alias
         COMMAND sh -c "rm -rf ${_zh_out}/hf && $<TARGET_FILE:zero> train --model_name_or_path preset:gpt2-tiny --train_file ${_zh_data} --block_size 16 --per_device_train_batch_size 4 --quiet --max_steps 2 --do_train --report_to none --local_rank 0 --output_dir ${_zh_out}/hf 2>&1 && test $(wc -l < ${_zh_out}/hf/metrics.jsonl) -eq 2")
set_tests_properties(cli.train.hf_noop_flags_and_alias PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "note: --do_train")

# Item 19: `zero` alone is a usage error.
add_test(NAME cli.no_arguments_is_a_usage_error
         COMMAND sh -c "$<TARGET_FILE:zero> 2>&1; test $? -eq 2")
set_tests_properties(cli.no_arguments_is_a_usage_error PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "Subcommands:")

# Issue 10 item 5: the stage / offload rules are applied once (sanitize_engine_options): nvme
# optimizer offload below stage 3 is reported once (it was warned twice: validator and engine),
# and the config summary shows what runs (cpu), not what was written.
file(WRITE ${CMAKE_BINARY_DIR}/test_out/s2_nvme.json
     "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"${CMAKE_BINARY_DIR}/test_out/s2_nvme_swap\"}}}")
add_test(NAME cli.train.offload_rules_reported_once
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zh_common} --max_steps 1 --deepspeed ${CMAKE_BINARY_DIR}/test_out/s2_nvme.json --overwrite_output_dir --output_dir ${_zh_out}/s2nvme > ${CMAKE_BINARY_DIR}/test_out/s2_nvme.log 2>&1 && test $(grep -c 'treated as' ${CMAKE_BINARY_DIR}/test_out/s2_nvme.log) -eq 1 && grep -q 'optimizer on cpu' ${CMAKE_BINARY_DIR}/test_out/s2_nvme.log && echo once")
set_tests_properties(cli.train.offload_rules_reported_once PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "once")

# Issue 32 item 1: nothing left behind on NVMe by a SIGKILLed run once the next run on the same
# nvme_path has started (tests/cli/nvme_left_behind.sh; the live-run side: src/offload/swap_dir_test.cc).
add_test(NAME cli.train.nvme_sigkill_leaves_nothing_behind
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/nvme_left_behind.sh $<TARGET_FILE:zero>
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin ${CMAKE_BINARY_DIR}/test_out/nvme_left_behind)
set_tests_properties(cli.train.nvme_sigkill_leaves_nothing_behind PROPERTIES LABELS unit TIMEOUT 180
                     PASS_REGULAR_EXPRESSION "PASS: ")
