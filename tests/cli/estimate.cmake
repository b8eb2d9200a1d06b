# `zero estimate` end to end: DeepSpeed's T0_3B tables (HF DeepSpeed docs, seed 002) reproduced to
# the printed digit, the --json rows, model configs / presets, and bad input exiting 2.
set(_est_fix ${PROJECT_SOURCE_DIR}/tests/fixtures/estimate)
set(_est_t0 --params 2783959040 --largest_layer_params 65798144 --stage 3)
# The seed text lost DeepSpeed's alignment spaces, so squeeze runs of spaces before comparing.
set(_est_squeeze "sed -e 's/^ *//' -e 's/  */ /g'")

foreach(_gpus 1 2)
  list(JOIN _est_t0 " " _est_t0_str)
  add_test(NAME cli.estimate.t0_3b_stage3_${_gpus}gpu
           COMMAND sh -c "'$<TARGET_FILE:zero>' estimate ${_est_t0_str} --num_gpus_per_node \
${_gpus} | ${_est_squeeze} | diff - '${_est_fix}/t0_3b_stage3_${_gpus}gpu.txt' && echo MATCH")
  set_tests_properties(cli.estimate.t0_3b_stage3_${_gpus}gpu PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "^MATCH\n$")
  add_test(NAME cli.estimate.t0_3b_stage3_${_gpus}gpu_json
           COMMAND sh -c "'$<TARGET_FILE:zero>' estimate ${_est_t0_str} --num_gpus_per_node \
${_gpus} --json | diff - '${_est_fix}/t0_3b_stage3_${_gpus}gpu.json' && echo MATCH")
  set_tests_properties(cli.estimate.t0_3b_stage3_${_gpus}gpu_json PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "^MATCH\n$")
endforeach()

# Exact DeepSpeed alignment (f" {cpu:7.2f}GB | {gpu:6.2f}GB | {options}").
add_test(NAME cli.estimate.t0_3b_aligned COMMAND zero estimate ${_est_t0})
set_tests_properties(cli.estimate.t0_3b_aligned PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "\n  per CPU  \\|  per GPU \\|   Options\n.*\n    0\\.37GB \\|  46\\.91GB \\| offload_param=none, ")

# No --stage: both tables, stage 2 first (reference §4.3: 62.23 / 5.19 and 15.56 / 51.86).
add_test(NAME cli.estimate.both_stages
         COMMAND zero estimate --params 2783959040 --largest_layer_params 65798144)
set_tests_properties(cli.estimate.both_stages PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "^ZeRO stage 2.*   62\\.23GB \\|   5\\.19GB \\| offload_optimizer=cpu \n   15\\.56GB \\|  51\\.86GB \\| offload_optimizer=none\n\nZeRO stage 3.*zero_init=0\n$")

# Stage 2 only, 8 GPUs (reference §4.3: 124.45 / 5.19 and 124.45 / 11.02); L is accepted and
# unused; --json rows carry no offload_param / zero_init.
add_test(NAME cli.estimate.stage2_json
         COMMAND zero estimate --params 2783959040 --largest_layer_params 1 --stage 2
                 --num_gpus_per_node 8 --json)
set_tests_properties(cli.estimate.stage2_json PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "^\\[\n  {\"stage\":2,\"offload_optimizer\":\"cpu\",\"cpu_bytes\":133630033920,\"gpu_bytes\":5567918080},\n  {\"stage\":2,\"offload_optimizer\":\"none\",\"cpu_bytes\":133630033920,\"gpu_bytes\":11831825920}\n\\]\n$")

# From a config.json (GPT-2 124M, tied head counted once) and from a preset (Llama-3.2-1B shape).
add_test(NAME cli.estimate.model_gpt2
         COMMAND zero estimate --model ${PROJECT_SOURCE_DIR}/tests/fixtures/models/gpt2 --stage 3)
set_tests_properties(cli.estimate.model_gpt2 PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "124439808 params .*largest layer 38597376 params.*SW: Model with 124M total params, 38M largest")
add_test(NAME cli.estimate.model_preset
         COMMAND zero estimate --model preset:llama-1b --stage 3 --json)
set_tests_properties(cli.estimate.model_preset PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "^\\[\n  {\"stage\":3,\"offload_optimizer\":\"cpu\",\"offload_param\":\"cpu\",\"zero_init\":true,\"cpu_bytes\":33366988800,\"gpu_bytes\":1050673152},")

# Bad input exits 2.
foreach(_bad "--params 100" "--params 10 --largest_layer_params 20 --stage 3"
             "--params abc --stage 2" "--model preset:nope" "--params 1000 --stage 4"
             "--params 1000 --num_gpus_per_node 0 --stage 2" "")
  string(MAKE_C_IDENTIFIER "x${_bad}" _bad_id)
  add_test(NAME cli.estimate.bad_${_bad_id}
           COMMAND sh -c "'$<TARGET_FILE:zero>' estimate ${_bad}; echo rc=$?")
  set_tests_properties(cli.estimate.bad_${_bad_id} PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "rc=2\n$")
endforeach()

# A model config whose parameter count overflows int64, or with 1e9 layers: refused while reading
# config.json, naming the file and the key (before: a negative --params / std::bad_alloc).
add_test(NAME cli.estimate.model_param_count_overflows
         COMMAND sh -c "'$<TARGET_FILE:zero>' estimate --model ${PROJECT_SOURCE_DIR}/tests/fixtures/models/absurd/overflow 2>&1; echo rc=$?")
set_tests_properties(cli.estimate.model_param_count_overflows PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "absurd/overflow/config.json: the parameter count of this model overflows a 64-bit integer.*\nrc=2\n$"
  FAIL_REGULAR_EXPRESSION "-[0-9]+ params|--params: must be")
add_test(NAME cli.estimate.model_too_many_layers
         COMMAND sh -c "'$<TARGET_FILE:zero>' estimate --model ${PROJECT_SOURCE_DIR}/tests/fixtures/models/absurd/deep 2>&1; echo rc=$?")
set_tests_properties(cli.estimate.model_too_many_layers PROPERTIES LABELS unit TIMEOUT 30
  PASS_REGULAR_EXPRESSION "absurd/deep/config.json: n_layer: 1000000000 is larger than the limit 65536\nrc=2\n$")

# --throughput (docs/scaling.md): hand-computed. Stage 0, 8 GPUs on NVLink, Ψ = 1e9 bf16, one
# collective per pass: 2·7/8·2e9 B / 450 GB/s + 14 × 2 µs = 7.81 ms on a 1000 ms step.
add_test(NAME cli.estimate.throughput_stage0_nvlink
         COMMAND zero estimate --params 1e9 --throughput --step_ms 1000 --num_gpus_per_node 8
                 --stage 0)
set_tests_properties(cli.estimate.throughput_stage0_nvlink PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "\n0 +off +1000\\.00 +7\\.81 +7\\.81 +1007\\.81 +8129 +1016 +0\\.992 +1907\\.35 +14\\.90\n")
# Two nodes: the reduce-scatter's in-node ring (7/8·2e9/450e9 + 7·2 µs) plus the 1/8 piece over
# InfiniBand (1/2·2.5e8/50e9 + 5 µs) = 6.4079 ms; the all-gather the same; JSON rows.
add_test(NAME cli.estimate.throughput_two_nodes_json
         COMMAND zero estimate --params 1e9 --throughput --step_ms 1000 --num_gpus_per_node 8
                 --num_nodes 2 --stage 2 --json)
set_tests_properties(cli.estimate.throughput_two_nodes_json PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "^{\"model\":\"--params\",\"params\":1000000000,.*\"rows\":\\[{\"stage\":2,\"overlap_comm\":false,\"world_size\":16,\"compute_ms\":1000\\.0,\"comm_ms\":12\\.8157777.*\"name\":\"gradient reduce-scatter\",\"collective\":\"reduce_scatter\",\"calls\":1,\"payload_bytes\":2000000000\\.0,\"ms\":6\\.4078888")
# FLOPs-based compute from a preset: 6N + 12LCT per token at the H100's dense bf16 peak × MFU;
# every stage by default, overlap_comm on at stage 3 only (DeepSpeed's default); one collective per
# unit (12 layers + 2) unless --collectives_per_pass.
add_test(NAME cli.estimate.throughput_flops_all_stages
         COMMAND zero estimate --model preset:gpt2-124m --throughput --gpu h100 --mfu 0.4
                 --micro_batch 8 --num_gpus_per_node 8)
set_tests_properties(cli.estimate.throughput_flops_all_stages PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "GFLOP/token \\(6N \\+ 12LCT\\) x 8192 tokens / \\(H100 989\\.0 TFLOP/s dense bf16 x MFU 0\\.40\\).*\nlinks: in node nvlink 450 GB/s 2 us ring; across nodes \\(unused\\); 14 collectives per pass.*\n0 +off .*\n1 +off .*\n2 +off .*\n3 +on ")

# A measured sweep per collective kind (tests/fixtures/estimate/sweep_ring_world4.txt: all_reduce
# 1 GB/s, reduce_scatter 2, all_gather 4 on a custom ring) and the sharded compute: Ψ = 1e9 bf16 at
# 4 GPUs. Stage 0: all-reduce 2·3/4·2e9 B / 1 GB/s = 3000 ms on the whole 1000 ms step; stage 1:
# reduce-scatter 3/4·2e9 / 2 GB/s + all-gather 3/4·2e9 / 4 GB/s = 1125 ms, compute 400 + 400/4
# (update) + 200 (accumulators, kept whole) = 700 ms; stage 2: the accumulators shard too, 550 ms.
add_test(NAME cli.estimate.throughput_sweep_per_collective
         COMMAND zero estimate --params 1e9 --throughput --step_ms 1000 --optimizer_ms 400
                 --gradient_ms 200 --interconnect custom --interconnect_sweep
                 ${_est_fix}/sweep_ring_world4.txt --num_gpus_per_node 4)
set_tests_properties(cli.estimate.throughput_sweep_per_collective PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "optimizer 400\\.00 ms and gradient accumulators 200\\.00 ms of it.*\nlinks: in node custom ring \\(measured: all_reduce 1 GB/s [^,]*, reduce_scatter 2 GB/s [^,]*, all_gather 4 GB/s [^)]*\\).*\n0 +off +1000\\.00 +3000\\.00 +3000\\.00 +4000\\.00 .*\n1 +off +700\\.00 +1125\\.00 +1125\\.00 +1825\\.00 .*\n2 +off +550\\.00 +1125\\.00 +1125\\.00 +1675\\.00 ")
# A preset keeps its own pair for the kinds a sweep lacks; --network_sweep fits the network alike.
add_test(NAME cli.estimate.throughput_network_sweep_one_kind
         COMMAND zero estimate --params 1e9 --throughput --step_ms 1000 --num_nodes 2 --stage 1
                 --network_sweep ${_est_fix}/sweep_all_gather_world2.txt)
set_tests_properties(cli.estimate.throughput_network_sweep_one_kind PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "across nodes infiniband 50 GB/s 5 us ring \\(measured: all_gather 2 GB/s [^)]*\\);")

# Throughput flags: each error names its flag and exits 2 (range errors at parse time, the rest
# when the flags are combined).
foreach(_case
    "--params 1e9 --step_ms 5|error: zero estimate: --step_ms: only with --throughput"
    "--params 1e9 --throughput|error: zero estimate: --throughput: needs one GPU's compute time"
    "--params 1e9 --throughput --step_ms 5 --interconnect foo|error: zero estimate: --interconnect: unknown link"
    "--params 1e9 --throughput --step_ms 5 --network custom|error: zero estimate: --network custom: give its bandwidth with --network_gbs .GB/s per GPU. or measure it with --network_sweep"
    "--params 1e9 --throughput --gpu h100|error: zero estimate: --mfu: required with --gpu"
    "--params 1e9 --throughput --gpu h100 --mfu 2|--mfu: must be a finite number > 0 and <= 1, got 2"
    "--params 1e9 --throughput --gpu b200 --mfu 0.4|error: zero estimate: --gpu: unknown GPU"
    "--params 1e9 --throughput --step_ms 5 --gpu h100|error: zero estimate: --step_ms: give either"
    "--params 1e9 --throughput --step_ms 0|--step_ms: must be a finite number > 0, got 0"
    "--params 1e9 --throughput --step_ms 5 --optimizer_ms 6|error: zero estimate: --optimizer_ms \\+ --gradient_ms: 6\\.00 ms, more than the step's 5\\.00 ms"
    "--params 1e9 --throughput --step_ms 5 --optimizer_ms 3 --gradient_ms 3|error: zero estimate: --optimizer_ms \\+ --gradient_ms: 6\\.00 ms"
    "--params 1e9 --throughput --step_ms 5 --gradient_ms -1|--gradient_ms: must be a finite number >= 0"
    "--params 1e9 --gradient_ms 1|error: zero estimate: --gradient_ms: only with --throughput"
    "--params 1e9 --throughput --step_ms 5 --interconnect_sweep /nonexistent/sweep.txt|error: zero estimate: --interconnect_sweep: /nonexistent/sweep.txt"
    "--params 1e9 --throughput --step_ms 5 --interconnect_sweep ${_est_fix}/t0_3b_stage3_1gpu.txt|error: zero estimate: --interconnect_sweep: [^ ]*t0_3b_stage3_1gpu.txt:1: expected \"sweep KIND WORLD PAYLOAD_BYTES MEDIAN_MS\""
    "--params 1e9 --throughput --step_ms 5 --interconnect custom --interconnect_sweep ${_est_fix}/sweep_all_gather_world2.txt|error: zero estimate: --interconnect_sweep: [^ ]*sweep_all_gather_world2.txt has no all_reduce lines; give --interconnect_gbs"
    "--params 1e9 --throughput --step_ms 5 --overlap_comm yes|--overlap_comm: yes not in"
    "--params 1e9 --throughput --step_ms 5 --collective mesh|--collective: mesh not in"
    "--params 1e9 --throughput --step_ms 5 --oversubscription 0.5|--oversubscription: must be a finite number >= 1"
    "--params 1e9 --throughput --step_ms 5 --interconnect_gbs 0|--interconnect_gbs: must be a finite number > 0"
    "--params 1e9 --throughput --step_ms 5 --micro_batch 0|--micro_batch: must be an integer in .1, 1048576., got 0"
    "--params 1e9 --throughput --step_ms 5 --largest_layer_params 5|error: zero estimate: --largest_layer_params: only for the memory tables"
    "--params 1e9 --stage 1|error: zero estimate: --stage: the memory tables are for stage 2 or 3")
  string(REPLACE "|" ";" _parts "${_case}")
  list(GET _parts 0 _args)
  list(GET _parts 1 _want)
  string(MAKE_C_IDENTIFIER "x${_args}" _id)
  add_test(NAME cli.estimate.throughput_bad_${_id}
           COMMAND sh -c "'$<TARGET_FILE:zero>' estimate ${_args} 2>&1; echo rc=$?")
  set_tests_properties(cli.estimate.throughput_bad_${_id} PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "${_want}.*\nrc=2\n$")
endforeach()
