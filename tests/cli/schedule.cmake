# `zero train` schedules and step counts as an HF Trainer user writes them: --lr_scheduler_type
# (no scheduler block) follows HF's formulas, --num_train_epochs counts steps as the HF Trainer
# does, --warmup_ratio; a scheduler block keeps DeepSpeed's formulas. The lr column is checked by
# tests/cli/check_hf_lr.py against formulas transcribed from transformers.
set(_zs_data ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin)
set(_zs_out ${CMAKE_BINARY_DIR}/test_out/schedule)
set(_zs_check "/usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/check_hf_lr.py")
set(_zs_common --model preset:gpt2-tiny --train_file ${_zs_data} --block_size 16
    --per_device_train_batch_size 4 --learning_rate 1e-3 --quiet --overwrite_output_dir)
list(JOIN _zs_common " " _zs_common)

# HF cosine, warmup ceil(0.25 * 8) = 2 of 8 steps.
add_test(NAME cli.train.hf_cosine_lr
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zs_common} --max_steps 8 --lr_scheduler_type cosine --warmup_ratio 0.25 --output_dir ${_zs_out}/cosine >/dev/null && ${_zs_check} ${_zs_out}/cosine/metrics.jsonl cosine 1e-3 2 8 8")
set_tests_properties(cli.train.hf_cosine_lr PROPERTIES LABELS unit)

# transformers 5 spells the same warmup --warmup_steps 0.25 (a fraction of the steps).
add_test(NAME cli.train.hf_warmup_steps_fraction
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zs_common} --max_steps 8 --lr_scheduler_type cosine --warmup_steps 0.25 --output_dir ${_zs_out}/cosine5 >/dev/null && ${_zs_check} ${_zs_out}/cosine5/metrics.jsonl cosine 1e-3 2 8 8")
set_tests_properties(cli.train.hf_warmup_steps_fraction PROPERTIES LABELS unit)

# --num_train_epochs without --max_steps (HF linear by default, warmup 0: update 1 at the full lr).
# tokens.bin: 3210 tokens -> 200 samples of 16; micro 4 -> 50 batches; accumulation 4 -> 13 updates
# an epoch (ceil(50 / 4)); 0.5 epoch -> ceil(6.5) = 7 steps.
add_test(NAME cli.train.epochs_hf_linear
         COMMAND sh -c "mkdir -p ${_zs_out} && $<TARGET_FILE:zero> train ${_zs_common} --gradient_accumulation_steps 4 --num_train_epochs 0.5 --output_dir ${_zs_out}/epochs > ${_zs_out}/epochs.log && grep -q '7 steps for --num_train_epochs 0.5' ${_zs_out}/epochs.log && ${_zs_check} ${_zs_out}/epochs/metrics.jsonl linear 1e-3 0 7 7")
set_tests_properties(cli.train.epochs_hf_linear PROPERTIES LABELS unit)

# The same epochs with a DeepSpeed scheduler block whose total_num_steps is "auto": resolved to 7,
# and DeepSpeed's WarmupDecayLR formula kept (warmup clamped to 2: updates 1 and 2 at lr 0).
add_test(NAME cli.train.epochs_deepspeed_schedule
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zs_common} --gradient_accumulation_steps 4 --num_train_epochs 0.5 --deepspeed ${PROJECT_SOURCE_DIR}/examples/ds_config_zero3.json --output_dir ${_zs_out}/epochs_ds >/dev/null && ${_zs_check} ${_zs_out}/epochs_ds/metrics.jsonl deepspeed_warmup_decay 1e-3 0 7 7")
set_tests_properties(cli.train.epochs_deepspeed_schedule PROPERTIES LABELS unit)

# warmup_stable_decay needs num_decay_steps (HF: a missing argument); named before training.
add_test(NAME cli.train.wsd_needs_decay_steps
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zs_common} --max_steps 8 --lr_scheduler_type warmup_stable_decay --output_dir ${_zs_out}/wsd 2>&1; test $? -eq 2")
set_tests_properties(cli.train.wsd_needs_decay_steps PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "warmup_stable_decay needs --lr_scheduler_kwargs")

# HF's kwargs reach the schedule: 2 hard restarts over 8 steps -> update 5 back at the full lr.
add_test(NAME cli.train.hf_restarts_kwargs
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zs_common} --lr_scheduler_type cosine_with_restarts --lr_scheduler_kwargs '{\"num_cycles\": 2}' --max_steps 8 --output_dir ${_zs_out}/restarts >/dev/null && grep -q '\"step\": 5, [^}]*\"lr\": 0.001,' ${_zs_out}/restarts/metrics.jsonl")
set_tests_properties(cli.train.hf_restarts_kwargs PROPERTIES LABELS unit)

# Resuming an HF schedule: steps 5..8 of a run resumed from global_step4 are bit-identical to the
# uninterrupted run (the schedule state restores LambdaLR's position); another type is refused.
add_test(NAME cli.train.hf_schedule_resume
         COMMAND sh -c "$<TARGET_FILE:zero> train ${_zs_common} --max_steps 8 --lr_scheduler_type cosine_with_restarts --lr_scheduler_kwargs '{\"num_cycles\": 2}' --warmup_ratio 0.2 --save_steps 4 --output_dir ${_zs_out}/resume_a >/dev/null && rm -rf ${_zs_out}/resume_b && $<TARGET_FILE:zero> train ${_zs_common} --max_steps 8 --lr_scheduler_type cosine_with_restarts --lr_scheduler_kwargs '{\"num_cycles\": 2}' --warmup_ratio 0.2 --resume_from_checkpoint ${_zs_out}/resume_a/global_step4 --output_dir ${_zs_out}/resume_b >/dev/null && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/compare_metrics.py ${_zs_out}/resume_b/metrics.jsonl ${_zs_out}/resume_a/metrics.jsonl 0 && rm -rf ${_zs_out}/resume_c && $<TARGET_FILE:zero> train ${_zs_common} --max_steps 8 --lr_scheduler_type linear --resume_from_checkpoint ${_zs_out}/resume_a/global_step4 --output_dir ${_zs_out}/resume_c 2>&1; test $? -eq 2")
set_tests_properties(cli.train.hf_schedule_resume PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "state is for cosine_with_restarts, but this run uses linear \\(--lr_scheduler_type\\)")
