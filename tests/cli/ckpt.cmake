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

# A DeepSpeed checkpoint directory (tests/fixtures/checkpoint/deepspeed_dir: `latest`,
# zero_to_fp32.py, empty stand-ins for the .pt pickles) is named with the commands that import or
# convert it, by `zero ckpt` and by --resume_from_checkpoint (whose import of the empty files fails
# first, saying why), exiting 2.
set(_ckpt_ds ${PROJECT_SOURCE_DIR}/tests/fixtures/checkpoint/deepspeed_dir)
add_test(NAME cli.ckpt.deepspeed_dir
         COMMAND sh -c "'$<TARGET_FILE:zero>' ckpt info '${_ckpt_ds}' 2>&1; echo rc=$?")
set_tests_properties(cli.ckpt.deepspeed_dir PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "DeepSpeed checkpoint.*tag global_step10.*zero_to_fp32\\.py .*--tag global_step10 --safe_serialization.*--model OUT_DIR.*rc=2")
add_test(NAME cli.train.resume_deepspeed_dir
         COMMAND sh -c "'$<TARGET_FILE:zero>' train --model preset:gpt2-tiny --train_file '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin' --block_size 16 --max_steps 1 --quiet --resume_from_checkpoint '${_ckpt_ds}' --output_dir '${CMAKE_CURRENT_BINARY_DIR}/ckpt_ds_resume' 2>&1; echo rc=$?")
set_tests_properties(cli.train.resume_deepspeed_dir PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "--resume_from_checkpoint: could not import it: .*too short for a zip archive.*DeepSpeed checkpoint.*zero ckpt import.*zero_to_fp32\\.py.*rc=2")

# A transformers-5 config (rope_parameters yarn, sliding_window, dtype) trained and saved with
# --save_dtype bf16: config.json keeps that layout and says bfloat16; generation_config.json is made.
add_test(NAME cli.train.save_keeps_transformers5_config
         COMMAND sh -c "rm -rf '${CMAKE_CURRENT_BINARY_DIR}/hf5_save' && '$<TARGET_FILE:zero>' train --model '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/mistral_tiny_sliding_yarn' --train_file '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin' --block_size 16 --per_device_train_batch_size 4 --max_steps 2 --quiet --save_final --save_dtype bf16 --output_dir '${CMAKE_CURRENT_BINARY_DIR}/hf5_save' >/dev/null && cd '${CMAKE_CURRENT_BINARY_DIR}/hf5_save/final' && test -f generation_config.json && grep -q '\"dtype\": \"bfloat16\"' config.json && grep -q '\"rope_type\": \"yarn\"' config.json && ! grep -q 'torch_dtype\\|\"rope_scaling\"\\|^  \"rope_theta\"' config.json && echo saved-ok")
set_tests_properties(cli.train.save_keeps_transformers5_config PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "saved-ok")

# Issue 15: a model's own generation_config.json travels through a checkpoint to `zero ckpt
# to-fp32` (it used to be replaced by one made from config.json's bos/eos ids).
add_test(NAME cli.ckpt.to_fp32_keeps_generation_config
         COMMAND sh -c "d='${CMAKE_CURRENT_BINARY_DIR}/test_out/gencfg' && rm -rf $d && mkdir -p $d && cp -r '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny' $d/model && printf '{\"eos_token_id\": 5, \"max_length\": 77, \"do_sample\": true}' > $d/model/generation_config.json && '$<TARGET_FILE:zero>' train --model $d/model --train_file '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin' --block_size 16 --per_device_train_batch_size 4 --max_steps 2 --save_steps 2 --quiet --output_dir $d/run >/dev/null && '$<TARGET_FILE:zero>' ckpt to-fp32 $d/run $d/hf >/dev/null && grep -q '\"max_length\": 77' $d/hf/generation_config.json && grep -q '\"do_sample\": true' $d/hf/generation_config.json && echo kept")
set_tests_properties(cli.ckpt.to_fp32_keeps_generation_config PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "kept")

# `zero bench ckpt` saves through the trainer's request builder (runtime/engine_checkpoint.h).
add_test(NAME cli.bench.ckpt_runs COMMAND $<TARGET_FILE:zero> bench ckpt)
set_tests_properties(cli.bench.ckpt_runs PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION "share = model state bytes")

# Issue 33: DeepSpeed checkpoints made by DeepSpeed itself (0.14.4 for the fp32 GPT-2s, 0.19.8 for
# the bf16 / fp16 GPT-2s and the Llamas; tests/fixtures/checkpoint/deepspeed/,
# tools/golden/make_deepspeed_ckpt.py) imported, consolidated and resumed; the 10 resumed losses
# equal DeepSpeed's own continuation after its load_checkpoint within the dtype's tolerance
# (deepspeed_resume.sh): at the same stage, at another stage, and (mpi) at world size 2 / stage 3.
set(_ds_fix ${PROJECT_SOURCE_DIR}/tests/fixtures/checkpoint/deepspeed)
set(_ds_sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/deepspeed_resume.sh)
foreach(_case "gpt2_tiny_stage2_w1;2" "gpt2_tiny_stage2_w1;3" "gpt2_tiny_stage1_w2;1"
              "gpt2_tiny_stage1_w2;3" "gpt2_tiny_stage3_w1;3" "gpt2_tiny_stage3_w2;1"
              "gpt2_tiny_bf16_stage1_w2;1" "gpt2_tiny_bf16_stage2_w2;2" "gpt2_tiny_bf16_stage3_w1;3"
              "gpt2_tiny_bf16_stage3_w1;1" "gpt2_tiny_fp16_stage2_w1;2" "llama_tiny_stage3_w2;3"
              "llama_tiny_stage3_w2;1" "llama_tiny_bf16_stage2_w1;2")
  list(GET _case 0 _fix)
  list(GET _case 1 _stage)
  add_test(NAME cli.ckpt.deepspeed_import_resume.${_fix}.as_stage${_stage}
           COMMAND sh ${_ds_sh} $<TARGET_FILE:zero> ${_ds_fix}/${_fix}
                   ${CMAKE_CURRENT_BINARY_DIR}/test_out/ds_${_fix}_s${_stage} ${_stage})
  set_tests_properties(cli.ckpt.deepspeed_import_resume.${_fix}.as_stage${_stage} PROPERTIES
    LABELS unit PASS_REGULAR_EXPRESSION "resumed curve matches DeepSpeed's: 10 steps")
endforeach()
add_test(NAME cli.ckpt.deepspeed_import_resume.gpt2_tiny_stage2_w1.as_world2_stage3
         COMMAND sh ${_ds_sh} $<TARGET_FILE:zero> ${_ds_fix}/gpt2_tiny_stage2_w1
                 ${CMAKE_CURRENT_BINARY_DIR}/test_out/ds_stage2_w2s3 3 ${MPIEXEC_EXECUTABLE}
                 --oversubscribe --allow-run-as-root --bind-to none -np 2)
set_tests_properties(cli.ckpt.deepspeed_import_resume.gpt2_tiny_stage2_w1.as_world2_stage3
  PROPERTIES LABELS mpi PASS_REGULAR_EXPRESSION "resumed curve matches DeepSpeed's: 10 steps")
# --resume_from_checkpoint DS_DIR directly (imported into OUT/deepspeed_import by rank 0).
add_test(NAME cli.ckpt.deepspeed_direct_resume.gpt2_tiny_stage3_w2.as_stage2
         COMMAND env ZERO_DS_DIRECT=1 sh ${_ds_sh} $<TARGET_FILE:zero> ${_ds_fix}/gpt2_tiny_stage3_w2
                 ${CMAKE_CURRENT_BINARY_DIR}/test_out/ds_direct_s3w2 2)
set_tests_properties(cli.ckpt.deepspeed_direct_resume.gpt2_tiny_stage3_w2.as_stage2 PROPERTIES
  LABELS unit PASS_REGULAR_EXPRESSION "resumed curve matches DeepSpeed's: 10 steps")
# DeepSpeed's universal checkpoint (ds_to_universal's output of the bf16 stage-2 world-2 run)
# imported, and resumed from directly.
add_test(NAME cli.ckpt.deepspeed_universal_resume.gpt2_tiny_bf16_stage2_w2.as_stage1
         COMMAND env ZERO_DS_SOURCE=universal sh ${_ds_sh} $<TARGET_FILE:zero>
                 ${_ds_fix}/gpt2_tiny_bf16_stage2_w2 ${CMAKE_CURRENT_BINARY_DIR}/test_out/ds_univ_s1 1)
add_test(NAME cli.ckpt.deepspeed_universal_direct_resume.gpt2_tiny_bf16_stage2_w2.as_stage3
         COMMAND env ZERO_DS_SOURCE=universal ZERO_DS_DIRECT=1 sh ${_ds_sh} $<TARGET_FILE:zero>
                 ${_ds_fix}/gpt2_tiny_bf16_stage2_w2 ${CMAKE_CURRENT_BINARY_DIR}/test_out/ds_univ_s3 3)
set_tests_properties(cli.ckpt.deepspeed_universal_resume.gpt2_tiny_bf16_stage2_w2.as_stage1
  cli.ckpt.deepspeed_universal_direct_resume.gpt2_tiny_bf16_stage2_w2.as_stage3 PROPERTIES
  LABELS unit PASS_REGULAR_EXPRESSION "resumed curve matches DeepSpeed's: 10 steps")
# An import refuses a model that is not the one saved, naming the parameter, and leaves nothing:
# no OUT when there was none, and in an OUT that existed (empty) no lock file either.
add_test(NAME cli.ckpt.deepspeed_import_wrong_model
         COMMAND sh -c "d='${CMAKE_CURRENT_BINARY_DIR}/test_out/ds_wrong' && rm -rf $d && '$<TARGET_FILE:zero>' ckpt import '${_ds_fix}/gpt2_tiny_stage2_w1' $d --model '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny' 2>&1; echo rc=$?; test -e $d || echo no-out-dir; mkdir -p $d && '$<TARGET_FILE:zero>' ckpt import '${_ds_fix}/gpt2_tiny_stage2_w1' $d --model '${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny' >/dev/null 2>&1; echo rc=$?; test -z \"$(ls -A $d)\" && echo out-dir-left-empty")
set_tests_properties(cli.ckpt.deepspeed_import_wrong_model PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "DeepSpeed holds shape.*rc=2.*no-out-dir.*rc=2.*out-dir-left-empty")
