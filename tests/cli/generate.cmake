# Issue 12 item 5: `zero generate --prompt` on a model with a BPE tokenizer (a tiny model made by
# tests/cli/bpe_model.py: golden gpt2_tiny weights, vocabulary 512, the llama2_byte_fallback
# tokenizer fixture), and the tokenizer files travelling with --save_final and `zero ckpt to-fp32`.
set(_zg_out ${CMAKE_BINARY_DIR}/test_out/generate)
set(_zg_model ${_zg_out}/bpe_model)
add_test(NAME cli.generate.make_bpe_model
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/bpe_model.py
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizers/llama2_byte_fallback 512 ${_zg_model})
set_tests_properties(cli.generate.make_bpe_model PROPERTIES LABELS unit FIXTURES_SETUP zg_model)

# The prompt is echoed and the continuation printed as text (no token ids), greedy, exit 0.
add_test(NAME cli.generate.prompt_with_tokenizer
         COMMAND $<TARGET_FILE:zero> generate --model ${_zg_model} --prompt "Hello wörld"
                 --temperature 0 --max_new_tokens 8)
set_tests_properties(cli.generate.prompt_with_tokenizer PROPERTIES LABELS unit
                     FIXTURES_REQUIRED zg_model PASS_REGULAR_EXPRESSION "^Hello wörld[^0-9]")

# The streamed text equals the whole decode of the ids that --prompt_tokens prints for the same
# greedy run (prompt ids from `zero data tokenize`, BOS included as HF's tokenizer(prompt)).
add_test(NAME cli.generate.streamed_text_is_the_decode
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; M=${_zg_model}; \
text=$($Z generate --model $M --prompt 'Hello wörld' --temperature 0 --max_new_tokens 12 2>/dev/null) && \
ids=$($Z data tokenize --model $M --text 'Hello wörld' | tr -d '[] ') && \
out=$($Z generate --model $M --prompt_tokens $ids --temperature 0 --max_new_tokens 12 2>/dev/null) && \
want=$($Z data detokenize --model $M --skip-special-tokens $out) && \
echo \"streamed [$text] decoded [$want]\" && test \"$text\" = \"$want\"")
set_tests_properties(cli.generate.streamed_text_is_the_decode PROPERTIES LABELS unit
                     FIXTURES_REQUIRED zg_model)

# --top_p outside (0, 1] is refused.
add_test(NAME cli.generate.bad_top_p
         COMMAND sh -c "$<TARGET_FILE:zero> generate --model ${_zg_model} --prompt x --top_p 0 2>&1; test $? -eq 2")
set_tests_properties(cli.generate.bad_top_p PROPERTIES LABELS unit FIXTURES_REQUIRED zg_model
                     PASS_REGULAR_EXPRESSION "--top_p")

# Training from the model directory: --save_final and `zero ckpt to-fp32` output hold the
# tokenizer files, and generate reads them back.
add_test(NAME cli.generate.tokenizer_travels_with_saved_models
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; O=${_zg_out}/run; rm -rf $O ${_zg_out}/fp32; \
$Z train --model ${_zg_model} --train_file ${PROJECT_SOURCE_DIR}/tests/fixtures/golden/tokens.bin \
--block_size 16 --per_device_train_batch_size 2 --max_steps 2 --save_steps 2 --save_final --quiet \
--output_dir $O >/dev/null && \
cmp $O/final/tokenizer.json ${_zg_model}/tokenizer.json && \
cmp $O/final/tokenizer_config.json ${_zg_model}/tokenizer_config.json && \
$Z ckpt to-fp32 $O ${_zg_out}/fp32 >/dev/null && \
cmp ${_zg_out}/fp32/tokenizer.json ${_zg_model}/tokenizer.json && \
cmp ${_zg_out}/fp32/tokenizer_config.json ${_zg_model}/tokenizer_config.json && \
$Z generate --model ${_zg_out}/fp32 --prompt Hi --max_new_tokens 3 --temperature 0")
set_tests_properties(cli.generate.tokenizer_travels_with_saved_models PROPERTIES LABELS unit
                     FIXTURES_REQUIRED zg_model PASS_REGULAR_EXPRESSION "^Hi")

# Without an eos_token_id in the model's config, the tokenizer's EOS stops generation: a copy of
# the model whose tokenizer_config.json names the first greedily generated token as eos_token
# prints the prompt alone and says it stopped.
add_test(NAME cli.generate.stops_at_the_tokenizer_eos
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; M=${_zg_model}; E=${_zg_out}/eos_model; \
ids=$($Z data tokenize --model $M --text 'Hello wörld' | tr -d '[] ') && \
n=$(echo $ids | tr ',' ' ' | wc -w) && \
first=$($Z generate --model $M --prompt_tokens $ids --temperature 0 --max_new_tokens 1 2>/dev/null | tr ' ' '\\n' | grep -v '^$' | tail -n 1) && \
/usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/eos_variant.py $M $E $first && \
out=$($Z generate --model $E --prompt 'Hello wörld' --temperature 0 --max_new_tokens 8 2>${_zg_out}/eos_stderr.txt) && \
echo \"[$out] $(cat ${_zg_out}/eos_stderr.txt)\" && test \"$out\" = 'Hello wörld' && \
grep -q 'stopped at the end-of-sequence token' ${_zg_out}/eos_stderr.txt")
set_tests_properties(cli.generate.stops_at_the_tokenizer_eos PROPERTIES LABELS unit
                     FIXTURES_REQUIRED zg_model)

# --chat: one user turn through the ChatML / Llama-3 template with the generation prompt encodes to
# the ids of transformers' apply_chat_template(add_generation_prompt=True) and replies with their
# greedy continuation, stopping at EOS (and <|im_end|> for ChatML); refusals (with --prompt, no or
# an unknown template).
add_test(NAME cli.generate.chat_turn
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/generate_chat.py
                 $<TARGET_FILE:zero> ${_zg_model}
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/chat_templates/expected.json ${_zg_out})
set_tests_properties(cli.generate.chat_turn PROPERTIES LABELS unit FIXTURES_REQUIRED zg_model)

# --device: cpu or cuda; anything else is exit 2 naming the flag. `--device cuda` generates on the
# GPU (greedy: the CPU's tokens, up to float ties) or, without one, is exit 2 before any output.
add_test(NAME cli.generate.unknown_device
         COMMAND sh -c "$<TARGET_FILE:zero> generate --model preset:gpt2-tiny --prompt_tokens 1,2 --device tpu 2>&1; test $? -eq 2")
set_tests_properties(cli.generate.unknown_device PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--device tpu: expected cpu or cuda")
add_test(NAME cli.generate.device_cuda
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; args='generate --model preset:gpt2-tiny --prompt_tokens 1,2,3 --temperature 0 --max_new_tokens 8'; \
out=$($Z $args --device cuda 2>&1); rc=$?; echo \"$out\"; \
if test $rc -eq 0 && test \"$(echo \"$out\" | grep -v '^zero generate:' | tail -n 1)\" = \"$($Z $args --device cpu 2>/dev/null)\"; then echo same-tokens-on-gpu; \
elif test $rc -eq 2 && test $(echo \"$out\" | wc -l) -eq 1 && echo \"$out\" | grep -q '^error: --device cuda: .*\\(no usable GPU\\|no CUDA backend\\)'; then echo refused-first; fi")
set_tests_properties(cli.generate.device_cuda PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "same-tokens-on-gpu|refused-first")

# The speed goes to stderr after the output (new tokens per second, the first token's latency
# apart); stdout keeps only the tokens. --no_kv_cache (whole forwards per token) is for --device
# cuda only: exit 2 on the CPU.
add_test(NAME cli.generate.speed_on_stderr
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; args='generate --model preset:gpt2-tiny --prompt_tokens 1,2,3 --temperature 0 --max_new_tokens 5'; \
err=$($Z $args 2>&1 >/dev/null); out=$($Z $args 2>/dev/null); echo \"[$out] [$err]\"; \
test $(echo \"$out\" | wc -w) -eq 8 && echo \"$err\" | grep -q '^zero generate: 5 new tokens in .* tokens/s (the first after .* with the 3-token prompt, then .* tokens/s)$' && echo speed-reported")
set_tests_properties(cli.generate.speed_on_stderr PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "speed-reported")
add_test(NAME cli.generate.no_kv_cache_needs_cuda
         COMMAND sh -c "$<TARGET_FILE:zero> generate --model preset:gpt2-tiny --prompt_tokens 1,2 --no_kv_cache 2>&1; test $? -eq 2")
set_tests_properties(cli.generate.no_kv_cache_needs_cuda PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "--no_kv_cache is for --device cuda")

# --context_limit: a context of 4 positions fills and is re-read, on the CPU (the GPU's own check is
# cuda_generate_emu_test and tools/gpu/train_check.sh): 12 new tokens, greedy, deterministic, and
# not those of the whole context (0: the default).
add_test(NAME cli.generate.context_limit
         COMMAND sh -c "Z=$<TARGET_FILE:zero>; args='generate --model preset:llama-tiny --prompt_tokens 1,2,3 --temperature 0 --max_new_tokens 12 --context_limit 4'; \
a=$($Z $args 2>/dev/null); b=$($Z $args 2>/dev/null); c=$($Z $args --context_limit 0 2>/dev/null); \
echo \"[$a] [$c]\"; test \"$a\" = \"$b\" && test \"$a\" != \"$c\" && test $(echo \"$a\" | wc -w) -eq 15 && echo limited-ok")
set_tests_properties(cli.generate.context_limit PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "limited-ok")

# Issue 29 item 3: --prompts_file (JSONL in, JSONL out line by line): batched greedy lines equal
# single --prompt runs for every --batch_size, per-line max_new_tokens / stop strings / id, sampled
# lines independent of the batch size, bad lines refused naming FILE:LINE before any output.
add_test(NAME cli.generate.prompts_file
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/generate_batch.py
                 $<TARGET_FILE:zero> ${_zg_model} ${_zg_out}/batch)
# One OpenMP thread: ~20 runs of a tiny model, each otherwise spinning threads on the shared cores
# (22 s -> 4 s on the 2-core machine).
set_tests_properties(cli.generate.prompts_file PROPERTIES LABELS unit FIXTURES_REQUIRED zg_model
                     ENVIRONMENT OMP_NUM_THREADS=1)

# Issue 29 items 2 and 5: ZeRO-Inference's weight stream (--offload_param nvme on the CPU; the
# GPU's is emu/cuda_generate_emu_test.cc). `zero generate` (one prompt, a --prompts_file batch) and
# `zero eval` give the resident output; the per-run directory under --nvme_path is gone after a
# run and after a failed one; bad flags and budgets too small for two block slots are exit 2 with
# one line naming the bytes needed and given (before the GPU is probed).
add_test(NAME cli.generate.offload_param_streams_the_resident_output
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/generate_stream.py
                 $<TARGET_FILE:zero> ${_zg_out}/stream equal)
set_tests_properties(cli.generate.offload_param_streams_the_resident_output PROPERTIES
                     LABELS unit ENVIRONMENT OMP_NUM_THREADS=1
                     PASS_REGULAR_EXPRESSION "streamed-equals-resident")
# --max_host_memory with NVMe: gpt2-124m's 497 MB of fp32 weights stream under a 320 MB budget, the
# process's peak RSS growing by less than it over a tiny model's run (~10 s).
# A peak-RSS measurement: not under a sanitizer, whose shadow memory and quarantine are most of
# the RSS (+411 MB measured under ASan against the release build's +296 MB).
if(NOT ZERO_SANITIZE)
  add_test(NAME cli.generate.offload_nvme_stays_within_the_host_budget
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/generate_stream.py
                   $<TARGET_FILE:zero> ${_zg_out}/stream_budget host_budget)
  set_tests_properties(cli.generate.offload_nvme_stays_within_the_host_budget PROPERTIES
                       LABELS unit ENVIRONMENT OMP_NUM_THREADS=1
                       PASS_REGULAR_EXPRESSION "within-host-budget")
endif()

# Issue 29 item 4: stage-3 inference on 2-4 CPU ranks (tests/cli/generate_ranks.sh): the tokens
# and the --prompts_file output of one rank with the whole model, also with the block shards on
# NVMe (--offload_param nvme); --max_host_memory on CPU ranks and too small GPU budgets refused;
# --device cuda on 2 ranks one GPU rank's tokens (without a GPU, refused as on one rank).
add_test(NAME cli.generate.stage3_ranks_equal_one_rank
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/generate_ranks.sh $<TARGET_FILE:zero>
                 ${MPIEXEC_EXECUTABLE}
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/hf_matrix/gemma2_softcap_tied_fp32_single_hf5
                 ${_zg_model} ${_zg_out}/ranks)
set_tests_properties(cli.generate.stage3_ranks_equal_one_rank PROPERTIES LABELS mpi TIMEOUT 300
                     FIXTURES_REQUIRED zg_model PASS_REGULAR_EXPRESSION "PASS")

# Issue 31: Phi-3's longrope past its original context while decoding (tests/cli/
# generate_longrope.py): a greedy run from a prompt under original_max_position_embeddings prints
# transformers' own generate tokens (hf_matrix fixture), and a --prompts_file batch whose sequences
# cross it at different steps gives each line its single run's tokens.
add_test(NAME cli.generate.longrope_crossing_gives_transformers_tokens
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/generate_longrope.py
                 $<TARGET_FILE:zero>
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/hf_matrix/phi3_longrope_untied_fp32_single_hf5
                 ${_zg_out}/longrope)
set_tests_properties(cli.generate.longrope_crossing_gives_transformers_tokens PROPERTIES
                     LABELS unit ENVIRONMENT OMP_NUM_THREADS=1
                     PASS_REGULAR_EXPRESSION "(^|\n)PASS")
