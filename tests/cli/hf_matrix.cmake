# Round trip of the transformers-made fixtures (tests/fixtures/hf_matrix, README there): each case is
# trained one step on 2 ranks under ZeRO-3 with learning rate 0, saved with --save_final (in the
# case's weight dtype), and the saved directory must be the fixture again: the same tensors bitwise
# and the same config.json keys and values in the same layout (tools/golden/check_hf_roundtrip.py,
# json only: no numpy, torch or transformers). So transformers computes from the saved model the very loss that the
# fixture's expected.json records. The config's weight_decay 0.1 stays: with lr 0 the AdamW update
# lr * (adam + wd * p) is exactly 0.
set(_hfm_dir ${PROJECT_SOURCE_DIR}/tests/fixtures/hf_matrix)
set(_hfm_out ${CMAKE_BINARY_DIR}/test_out/hf_matrix)
file(GLOB _hfm_cases LIST_DIRECTORIES true RELATIVE ${_hfm_dir} CONFIGURE_DEPENDS ${_hfm_dir}/*)
foreach(_case ${_hfm_cases})
  if(NOT EXISTS ${_hfm_dir}/${_case}/expected.json)
    continue()
  endif()
  set(_save_dtype fp32)
  if(_case MATCHES "_bf16_")
    set(_save_dtype bf16)
  endif()
  add_test(NAME cli.hf_matrix.np2_zero3_save_roundtrip.${_case}
           COMMAND sh -c "rm -rf ${_hfm_out}/${_case} && mkdir -p ${_hfm_out} && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np 2 $<TARGET_FILE:zero> train --deepspeed ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json --model ${_hfm_dir}/${_case} --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin --block_size 16 --per_device_train_batch_size 2 --learning_rate 0 --max_steps 1 --save_final --save_dtype ${_save_dtype} --quiet --output_dir ${_hfm_out}/${_case} >${_hfm_out}/${_case}.log 2>&1 || { cat ${_hfm_out}/${_case}.log; exit 1; }; /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/golden/check_hf_roundtrip.py ${_hfm_out}/${_case}/final ${_hfm_dir}/${_case}")
  set_tests_properties(cli.hf_matrix.np2_zero3_save_roundtrip.${_case} PROPERTIES LABELS mpi
                       TIMEOUT 120)
endforeach()

# Issue 31 item 3: a config naming something no model computes (here a mixture of experts:
# num_experts in a Qwen3 config) is refused before training starts, naming the file and the key;
# nothing is trained (no metrics.jsonl).
set(_hfm_moe ${_hfm_out}/moe)
add_test(NAME cli.hf_matrix.moe_key_refused_before_training
         COMMAND sh -c "rm -rf ${_hfm_moe} ${_hfm_moe}_run && mkdir -p ${_hfm_moe} && cp ${_hfm_dir}/qwen3_headdim12_untied_fp32_single_hf5/* ${_hfm_moe}/ && sed -i 's/\"model_type\"/\"num_experts\": 8, \"model_type\"/' ${_hfm_moe}/config.json && $<TARGET_FILE:zero> train --model ${_hfm_moe} --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin --block_size 16 --per_device_train_batch_size 2 --max_steps 1 --quiet --output_dir ${_hfm_moe}_run >${_hfm_moe}.log 2>&1; rc=$?; cat ${_hfm_moe}.log; test $rc -ne 0 && test ! -e ${_hfm_moe}_run/metrics.jsonl && grep -q 'moe/config.json: num_experts: 8 asks for a mixture-of-experts model' ${_hfm_moe}.log")
set_tests_properties(cli.hf_matrix.moe_key_refused_before_training PROPERTIES LABELS unit)

# A multimodal Gemma 3 checkpoint (Gemma3ForConditionalGeneration): its language model trained,
# saved in a ZeRO checkpoint, consolidated by `zero ckpt to-fp32`: the output holds the vision tower
# and projector copied from the model's directory (recorded in the manifest) and reads back.
set(_hfm_mm ${_hfm_out}/gemma3mm_ckpt)
add_test(NAME cli.hf_matrix.gemma3_multimodal_checkpoint_consolidates
         COMMAND sh -c "rm -rf ${_hfm_mm} && $<TARGET_FILE:zero> train --model ${_hfm_dir}/gemma3mm_tied_bf16_sharded_hf5 --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin --block_size 16 --per_device_train_batch_size 2 --max_steps 1 --save_steps 1 --quiet --output_dir ${_hfm_mm}/run >${_hfm_mm}.log 2>&1 && grep -q model_source_dir ${_hfm_mm}/run/global_step1/manifest.json && $<TARGET_FILE:zero> ckpt to-fp32 ${_hfm_mm}/run/global_step1 ${_hfm_mm}/hf >>${_hfm_mm}.log 2>&1 && grep -q '\"vision_tower.post_layernorm.weight\"' ${_hfm_mm}/hf/model.safetensors && grep -q '\"model_type\": \"gemma3\"' ${_hfm_mm}/hf/config.json && $<TARGET_FILE:zero> train --model ${_hfm_mm}/hf --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin --block_size 16 --per_device_train_batch_size 2 --max_steps 1 --quiet --output_dir ${_hfm_mm}/again >>${_hfm_mm}.log 2>&1 || { cat ${_hfm_mm}.log; exit 1; }")
set_tests_properties(cli.hf_matrix.gemma3_multimodal_checkpoint_consolidates PROPERTIES LABELS unit
                     TIMEOUT 120)
