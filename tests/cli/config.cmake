# `zero config check|show` end to end: exit status, stderr format, base64 input, --strict, show.
set(_cfg ${PROJECT_SOURCE_DIR}/tests/fixtures/configs)

add_test(NAME cli.config.check_valid_seed
         COMMAND zero config check ${_cfg}/valid/seed_hf_229.json)
set_tests_properties(cli.config.check_valid_seed PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "seed_hf_229.json: ok")

add_test(NAME cli.config.check_valid_real_commented
         COMMAND zero config check ${_cfg}/valid/seed_zh_stage2_commented.json --world_size 8)
set_tests_properties(cli.config.check_valid_real_commented PROPERTIES LABELS unit)

add_test(NAME cli.config.check_base64
         COMMAND zero config check eyJ0cmFpbl9iYXRjaF9zaXplIjogOH0 --world_size 2)
set_tests_properties(cli.config.check_base64 PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION ": ok")

add_test(NAME cli.config.check_typo_exit2
         COMMAND sh -c "$<TARGET_FILE:zero> config check ${_cfg}/invalid/typo_zero_key.json 2>&1; test $? -eq 2")
set_tests_properties(cli.config.check_typo_exit2 PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "error: zero_optimization\\.stage3_prefetch_bucket_sise: unknown key \\(did you mean zero_optimization\\.stage3_prefetch_bucket_size\\?\\)")

add_test(NAME cli.config.check_syntax_line_column
         COMMAND sh -c "$<TARGET_FILE:zero> config check ${_cfg}/invalid/syntax_missing_comma.json 2>&1; test $? -eq 2")
set_tests_properties(cli.config.check_syntax_line_column PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "error: .*syntax_missing_comma\\.json: line 3, column 3: ")

add_test(NAME cli.config.check_batch_triad
         COMMAND sh -c "$<TARGET_FILE:zero> config check ${_cfg}/invalid/batch_mismatch.json --world_size 4 2>&1; test $? -eq 2")
set_tests_properties(cli.config.check_batch_triad PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "error: train_batch_size: .*32 != 4 \\* 4 \\* 4")

add_test(NAME cli.config.check_batch_without_world_size
         COMMAND zero config check ${_cfg}/invalid/batch_mismatch.json)
set_tests_properties(cli.config.check_batch_without_world_size PROPERTIES LABELS unit)

add_test(NAME cli.config.check_warning_exit0
         COMMAND sh -c "$<TARGET_FILE:zero> config check ${_cfg}/valid/real/llama_factory_ds_z3_offload_config.json 2>&1")
set_tests_properties(cli.config.check_warning_exit0 PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "warning: comms_config: unknown key")

add_test(NAME cli.config.check_strict
         COMMAND zero config check ${_cfg}/valid/real/llama_factory_ds_z3_offload_config.json --strict)
set_tests_properties(cli.config.check_strict PROPERTIES LABELS unit WILL_FAIL TRUE)

add_test(NAME cli.config.check_missing_file
         COMMAND sh -c "$<TARGET_FILE:zero> config check /nonexistent/ds.json 2>&1; test $? -eq 2")
set_tests_properties(cli.config.check_missing_file PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "error: /nonexistent/ds.json: no such file")

add_test(NAME cli.config.show_markers
         COMMAND zero config show ${_cfg}/valid/real/dse_cifar_ds_config.json --world_size 2)
set_tests_properties(cli.config.show_markers PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "\"train_micro_batch_size_per_gpu\": 2, +// derived.*\"lr\": 0.001, +// file.*\"bias_correction\": true, +// default")

add_test(NAME cli.config.show_auto
         COMMAND zero config show ${_cfg}/valid/real/llava_zero3_offload.json)
set_tests_properties(cli.config.show_auto PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "\"lr\": \"auto\", +// auto")

add_test(NAME cli.config.show_invalid_exit2
         COMMAND zero config show ${_cfg}/invalid/fp16_and_bf16.json)
set_tests_properties(cli.config.show_invalid_exit2 PROPERTIES LABELS unit WILL_FAIL TRUE)
