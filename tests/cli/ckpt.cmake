# `zero ckpt` end to end: info / verify on the hand-built fixture (docs/formats/checkpoint.md),
# bad input exiting 2, and to-fp32 on a checkpoint the multi-rank reshard chain wrote.
set(_ckpt_fix ${PROJECT_SOURCE_DIR}/tests/fixtures/checkpoint/hand_built)

add_test(NAME cli.ckpt.info COMMAND zero ckpt info ${_ckpt_fix})
set_tests_properties(cli.ckpt.info PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "tag: +global_step7\nworld size: +2\nzero stage: +2\n.*rank_1\\.safetensors +[0-9]+ bytes  xxh3 f58997baf5a57daf")

add_test(NAME cli.ckpt.verify COMMAND zero ckpt verify ${_ckpt_fix}/global_step7)
set_tests_properties(cli.ckpt.verify PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "^ok: .*global_step7 \\(2 files")

add_test(NAME cli.ckpt.missing COMMAND zero ckpt verify ${_ckpt_fix}/no_such_dir)
set_tests_properties(cli.ckpt.missing PROPERTIES LABELS unit WILL_FAIL TRUE)
add_test(NAME cli.ckpt.missing_message
         COMMAND sh -c "'$<TARGET_FILE:zero>' ckpt info '${_ckpt_fix}/no_such_dir'; echo rc=$?")
set_tests_properties(cli.ckpt.missing_message PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "no checkpoint here.*rc=2")

# The fixture's model is made up: consolidation refuses it, naming the manifest.
add_test(NAME cli.ckpt.to_fp32_bad_model
         COMMAND sh -c "'$<TARGET_FILE:zero>' ckpt to-fp32 '${_ckpt_fix}' '${CMAKE_CURRENT_BINARY_DIR}/ckpt_bad_out'; echo rc=$?")
set_tests_properties(cli.ckpt.to_fp32_bad_model PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "manifest\\.json.*rc=2")

# A real checkpoint (world 4, stage 3, gpt2_tiny at step 20) consolidated into sharded HF files.
set(_ckpt_real ${CMAKE_BINARY_DIR}/tests/checkpoint_reshard/w4s3_to_w2s2)
add_test(NAME cli.ckpt.to_fp32
         COMMAND sh -c "rm -rf '${CMAKE_CURRENT_BINARY_DIR}/ckpt_fp32' && '$<TARGET_FILE:zero>' ckpt to-fp32 '${_ckpt_real}' '${CMAKE_CURRENT_BINARY_DIR}/ckpt_fp32' --max_shard_size 20KB && ls '${CMAKE_CURRENT_BINARY_DIR}/ckpt_fp32'")
set_tests_properties(cli.ckpt.to_fp32 PROPERTIES LABELS mpi FIXTURES_REQUIRED ckpt_w4s3_to_w2s2
  PASS_REGULAR_EXPRESSION "config\\.json\nmodel-00001-of-0000[0-9]\\.safetensors\n.*model\\.safetensors\\.index\\.json")
