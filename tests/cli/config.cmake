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

# Only regular files are read, up to 16 MiB: /dev/zero, a FIFO, a directory or an oversized file
# is refused at once with exit 2 (before: /dev/zero aborted with std::bad_alloc, a FIFO blocked
# forever). TIMEOUT: a regression must fail, not hang the suite.
add_test(NAME cli.config.check_dev_zero
         COMMAND sh -c "$<TARGET_FILE:zero> config check /dev/zero 2>&1; echo rc=$?")
set_tests_properties(cli.config.check_dev_zero PROPERTIES LABELS unit TIMEOUT 30
  PASS_REGULAR_EXPRESSION "error: /dev/zero: is a character device, not a regular file \\(expected a DeepSpeed config file\\)\nrc=2\n$")
add_test(NAME cli.config.check_fifo
         COMMAND sh -c "d=$(mktemp -d) && mkfifo $d/ds.json && $<TARGET_FILE:zero> config check $d/ds.json 2>&1; rc=$?; rm -rf $d; echo rc=$rc")
set_tests_properties(cli.config.check_fifo PROPERTIES LABELS unit TIMEOUT 30
  PASS_REGULAR_EXPRESSION "ds.json: is a FIFO \\(named pipe\\), not a regular file .*\nrc=2\n$")
add_test(NAME cli.config.check_directory
         COMMAND sh -c "$<TARGET_FILE:zero> config check ${_cfg} 2>&1; echo rc=$?")
set_tests_properties(cli.config.check_directory PROPERTIES LABELS unit TIMEOUT 30
  PASS_REGULAR_EXPRESSION "configs: is a directory, not a regular file .*\nrc=2\n$")
add_test(NAME cli.config.check_too_large
         COMMAND sh -c "f=$(mktemp) && truncate -s 17M $f && $<TARGET_FILE:zero> config check $f 2>&1; rc=$?; rm -f $f; echo rc=$rc")
set_tests_properties(cli.config.check_too_large PROPERTIES LABELS unit TIMEOUT 30
  PASS_REGULAR_EXPRESSION ": larger than the 16 MiB limit for a DeepSpeed config file\nrc=2\n$")

# A triad whose product wraps around int64 (8 * (2^61 + 1) * 1 == 8 mod 2^64) is an error (before:
# "ok").
add_test(NAME cli.config.check_batch_overflow
         COMMAND sh -c "$<TARGET_FILE:zero> config check ${_cfg}/invalid/batch_overflow.json --world_size 1 2>&1; echo rc=$?")
set_tests_properties(cli.config.check_batch_overflow PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "error: gradient_accumulation_steps: .* overflows a 64-bit integer .*\nrc=2\n$")

# "enabled": "false" (the HF guide's fp32 example): read as false with a warning naming the key,
# and `config show` prints the boolean (before: an error).
add_test(NAME cli.config.show_string_boolean
         COMMAND sh -c "$<TARGET_FILE:zero> config show ${_cfg}/valid/seed_hf_1016_fp16_enabled_string.json 2>&1; echo rc=$?")
set_tests_properties(cli.config.show_string_boolean PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "warning: fp16\\.enabled: \"false\" is a string; read as the boolean false .*\"fp16\": {\n +\"enabled\": false, +// file\n.*rc=0\n$")

# gradient_accumulation_steps 1e18: the step's token batches cannot fit; refused by the memory
# check before anything is sized by it (before: std::length_error from the trainer).
file(WRITE ${CMAKE_BINARY_DIR}/test_out/huge_accumulation.json
     "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1000000000000000000}")
add_test(NAME cli.config.train_huge_accumulation
         COMMAND sh -c "$<TARGET_FILE:zero> train --model preset:gpt2-tiny --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin --block_size 16 --max_steps 1 --quiet --overwrite_output_dir --output_dir ${CMAKE_BINARY_DIR}/test_out/huge_accumulation --deepspeed ${CMAKE_BINARY_DIR}/test_out/huge_accumulation.json 2>&1; echo rc=$?")
set_tests_properties(cli.config.train_huge_accumulation PROPERTIES LABELS unit TIMEOUT 60
  PASS_REGULAR_EXPRESSION "not enough host memory: .*token batches of one step.*gradient_accumulation_steps"
  FAIL_REGULAR_EXPRESSION "length_error|bad_alloc|terminate|rc=0\n")

# n_layer 1e9 in a model's config.json: refused as the key is read (before: zero train built a
# billion-unit layout and aborted with std::bad_alloc after 11 s).
add_test(NAME cli.config.train_model_too_many_layers
         COMMAND sh -c "$<TARGET_FILE:zero> train --model ${PROJECT_SOURCE_DIR}/tests/fixtures/models/absurd/deep/config.json --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin --block_size 16 --max_steps 1 --quiet --overwrite_output_dir --output_dir ${CMAKE_BINARY_DIR}/test_out/too_many_layers 2>&1; echo rc=$?")
set_tests_properties(cli.config.train_model_too_many_layers PROPERTIES LABELS unit TIMEOUT 30
  PASS_REGULAR_EXPRESSION "deep/config.json: n_layer: 1000000000 is larger than the limit 65536\nrc=2\n$")
