# Issue 32 item 4: `tensorboard` and `csv_monitor` write the same scalars (train loss, lr, grad norm,
# tokens/s, memory, eval loss) at DeepSpeed's tags; an independent reader (CRC-32C and protobuf
# decoded in Python, no tensorboard package) checks the event file against metrics.jsonl.
set(_zm_data ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin)
set(_zm_out ${CMAKE_BINARY_DIR}/test_out/monitor)
file(WRITE ${CMAKE_BINARY_DIR}/test_out/monitor.json
     "{\"tensorboard\": {\"enabled\": true, \"output_path\": \"${_zm_out}/tb\", \"job_name\": \"job\"}, \"csv_monitor\": {\"enabled\": true, \"output_path\": \"${_zm_out}/csv\", \"job_name\": \"job\"}, \"wandb\": {\"enabled\": true}}")
add_test(NAME cli.monitor.tensorboard_and_csv
         COMMAND sh -c "rm -rf ${_zm_out} && $<TARGET_FILE:zero> train --model preset:gpt2-tiny --train_file ${_zm_data} --validation_file ${_zm_data} --eval_steps 2 --block_size 16 --per_device_train_batch_size 4 --max_steps 4 --quiet --overwrite_output_dir --deepspeed ${CMAKE_BINARY_DIR}/test_out/monitor.json --output_dir ${_zm_out}/run 2>&1 && /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/check_tfevents.py ${_zm_out}/tb/job ${_zm_out}/csv/job ${_zm_out}/run/metrics.jsonl 4")
set_tests_properties(cli.monitor.tensorboard_and_csv PROPERTIES LABELS unit TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "wandb.enabled: .*use tensorboard or csv_monitor.*PASS: ")
