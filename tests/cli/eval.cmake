# Issue 12 item 4: evaluation in `zero train` (--validation_file, --eval_steps, --eval_on_start,
# --per_device_eval_batch_size). The eval loss is the mean token cross-entropy over the validation
# samples, the same at every stage and world size, and equal to the training loss on the same
# samples.
set(_ze_data ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin)
set(_ze_out ${CMAKE_BINARY_DIR}/test_out/eval)
set(_ze_common --model ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny --block_size 16
    --quiet --overwrite_output_dir)
list(JOIN _ze_common " " _ze_common)

# The initial model's eval loss (--eval_on_start, a step-0 line) equals step 1's training loss
# when the validation file is the train file and step 1's batch is all of it (4 samples of 16:
# 65 uint16 tokens); eval batches of 3 leave a padded last batch.
add_test(NAME cli.eval.on_start_equals_the_first_training_loss
         COMMAND sh -c "mkdir -p ${_ze_out} && head -c 130 ${_ze_data} > ${_ze_out}/four.bin && \
$<TARGET_FILE:zero> train ${_ze_common} --train_file ${_ze_out}/four.bin \
--validation_file ${_ze_out}/four.bin --per_device_train_batch_size 4 --max_steps 1 \
--eval_on_start --per_device_eval_batch_size 3 --output_dir ${_ze_out}/start >/dev/null && \
/usr/bin/python3 -c \"import json,sys; r=[json.loads(l) for l in open('${_ze_out}/start/metrics.jsonl')]; \
e=r[0]['eval_loss']; t=r[1]['loss']; print('eval', e, 'train', t); \
sys.exit(0 if r[0]['step']==0 and abs(e-t)<=1e-5*abs(t) and 'eval_loss' in r[1] else 1)\"")
set_tests_properties(cli.eval.on_start_equals_the_first_training_loss PROPERTIES LABELS unit)

file(WRITE ${_ze_out}/stage3.json "{\"zero_optimization\": {\"stage\": 3}}")
# ZeRO-3 on 2 ranks (eval batches of 3 per rank: the last round gives rank 1 only padding) equals
# stage 0 on 1 rank (eval batches of 5), eval loss included, within 1e-5.
add_test(NAME cli.eval.stage3_two_ranks_equals_stage0_one_rank
         COMMAND sh -c "${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none -np 2 \
$<TARGET_FILE:zero> train ${_ze_common} --train_file ${_ze_data} --validation_file ${_ze_data} \
--per_device_train_batch_size 2 --max_steps 4 --eval_steps 2 --eval_on_start \
--per_device_eval_batch_size 3 --learning_rate 1e-3 \
--deepspeed ${_ze_out}/stage3.json --output_dir ${_ze_out}/zero3 >/dev/null && \
$<TARGET_FILE:zero> train ${_ze_common} --train_file ${_ze_data} --validation_file ${_ze_data} \
--per_device_train_batch_size 4 --max_steps 4 --eval_steps 2 --eval_on_start \
--per_device_eval_batch_size 5 --learning_rate 1e-3 --output_dir ${_ze_out}/single >/dev/null && \
test $(grep -c eval_loss ${_ze_out}/single/metrics.jsonl) -eq 3 && \
/usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_ze_out}/zero3/metrics.jsonl ${_ze_out}/single/metrics.jsonl 1e-5")
set_tests_properties(cli.eval.stage3_two_ranks_equals_stage0_one_rank PROPERTIES LABELS mpi TIMEOUT 300)

# Eval flags without a validation file, and a validation file that cannot be read: exit 2.
add_test(NAME cli.eval.eval_steps_needs_a_validation_file
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_ze_common} --train_file ${_ze_data} --max_steps 1 --eval_steps 1 --output_dir ${_ze_out}/novalid 2>&1; test $? -eq 2")
set_tests_properties(cli.eval.eval_steps_needs_a_validation_file PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--validation_file")
add_test(NAME cli.eval.missing_validation_file
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_ze_common} --train_file ${_ze_data} --max_steps 1 --validation_file ${_ze_out}/nope.bin --output_dir ${_ze_out}/missing 2>&1; test $? -eq 2")
set_tests_properties(cli.eval.missing_validation_file PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--validation_file.*nope.bin")

# `zero eval` on a saved model equals the training loss computed on the same samples: the
# initial model = step 1's loss, checkpoint global_step1 = step 2's loss (and the eval_loss logged
# after step 1), final/ = the eval_loss logged after step 2.
add_test(NAME cli.eval.saved_model_equals_the_training_loss
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; O=${_ze_out}/saved; mkdir -p ${_ze_out} && \
head -c 130 ${_ze_data} > ${_ze_out}/four_saved.bin && V=${_ze_out}/four_saved.bin && \
$Z train ${_ze_common} --train_file $V --validation_file $V --per_device_train_batch_size 4 \
--max_steps 2 --eval_steps 1 --save_steps 1 --save_final --output_dir $O >/dev/null && \
$Z eval --model ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny --validation_file $V --block_size 16 > $O/eval_initial.json && \
$Z eval --model $O/global_step1 --validation_file $V --block_size 16 --per_device_eval_batch_size 3 > $O/eval_step1.json && \
$Z eval --model $O/final --validation_file $V --block_size 16 > $O/eval_final.json && \
/usr/bin/python3 -c \"import json,sys; m=[json.loads(l) for l in open('$O/metrics.jsonl')]; \
e=lambda n: json.load(open('$O/eval_'+n+'.json'))['eval_loss']; \
pairs=[(e('initial'), m[0]['loss']), (e('step1'), m[1]['loss']), (e('step1'), m[0]['eval_loss']), (e('final'), m[1]['eval_loss'])]; \
print(pairs); sys.exit(0 if all(abs(a-b)<=1e-5*abs(b) for a,b in pairs) else 1)\"")
set_tests_properties(cli.eval.saved_model_equals_the_training_loss PROPERTIES LABELS unit)

# Issue 29 item 5: `zero eval` on 2 and 3 CPU ranks (tests/cli/eval_ranks.sh): the weights sharded
# over the ranks, each evaluating its own samples; one rank's eval loss (1e-6) and token count,
# also with the block shards on NVMe (--offload_param nvme); --max_host_memory refused there.
add_test(NAME cli.eval.stage3_ranks_equal_one_rank
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/eval_ranks.sh $<TARGET_FILE:zero>
                 ${MPIEXEC_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny
                 ${_ze_data} ${_ze_out}/ranks)
set_tests_properties(cli.eval.stage3_ranks_equal_one_rank PROPERTIES LABELS mpi TIMEOUT 300
                     PASS_REGULAR_EXPRESSION "PASS")
