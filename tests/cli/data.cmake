# `zero data tokenize` / `detokenize` / `tokenizer` end to end on the HF-generated tokenizer fixtures
# (tools/golden/make_tokenizer_fixtures.py): ids equal HF's, text round-trips byte for byte, and bad
# input (an unsupported tokenizer.json component, invalid UTF-8, unknown ids) exits 2 with the reason.
set(_tok_fix ${PROJECT_SOURCE_DIR}/tests/fixtures/tokenizers)

# HF's ids for "Hello, world! How are you today?" (expected.json), BOS from the post-processor.
add_test(NAME cli.data.tokenize_llama2_ids
         COMMAND zero data tokenize --model ${_tok_fix}/llama2_byte_fallback
                 --text "Hello, world! How are you today?")
set_tests_properties(cli.data.tokenize_llama2_ids PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "^\\[1,326,75,295,302,302,305,268,402,305,308,302,294,36,326,75,305,313,373,308,295,326,315,305,311,378,305,294,481,66\\]\n$")
add_test(NAME cli.data.tokenize_llama3_no_special
         COMMAND zero data tokenize --model ${_tok_fix}/llama3_split/tokenizer.json
                 --no-special-tokens --text "Hello, world! How are you today?")
set_tests_properties(cli.data.tokenize_llama3_no_special PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION
  "^\\[42,71,78,78,81,14,294,81,84,78,70,3,223,42,402,262,84,71,223,416,267,81,70,373,33\\]\n$")

# File -> ids -> text is the identity (English, code, CJK, emoji, combining marks, whitespace runs,
# special and added tokens), through a file, stdin and the three id spellings. (Not for the legacy
# Llama-2 normalizer: there a space after a special token decodes doubled, in HF as here.)
# spm_bpe is a SentencePiece tokenizer.model alone.
foreach(_tok gpt2_bytelevel llama3_split llama2_metaspace spm_bpe)
  set(_ids ${CMAKE_CURRENT_BINARY_DIR}/data_roundtrip_${_tok}.ids)
  add_test(NAME cli.data.roundtrip_${_tok}
           COMMAND sh -c "set -e; z='$<TARGET_FILE:zero>'; m='${_tok_fix}/${_tok}'; \
f='${_tok_fix}/roundtrip.txt'; \
\"$z\" data tokenize --model \"$m\" --no-special-tokens \"$f\" > '${_ids}'; \
\"$z\" data detokenize --model \"$m\" \"$(cat '${_ids}')\" | cmp - \"$f\"; \
\"$z\" data detokenize --model \"$m\" $(tr '[],' '   ' < '${_ids}') | cmp - \"$f\"; \
\"$z\" data tokenize --model \"$m\" --no-special-tokens - < \"$f\" | cmp - '${_ids}'; \
echo ROUNDTRIP_OK")
  set_tests_properties(cli.data.roundtrip_${_tok} PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "ROUNDTRIP_OK\n$")
endforeach()

# BOS added by default and dropped by --skip-special-tokens.
add_test(NAME cli.data.detokenize_skip_special
         COMMAND sh -c "'$<TARGET_FILE:zero>' data detokenize --model '${_tok_fix}/llama3_split' \
--skip-special-tokens \"$('$<TARGET_FILE:zero>' data tokenize --model '${_tok_fix}/llama3_split' \
--text 'Hi there')\"; echo '|'")
set_tests_properties(cli.data.detokenize_skip_special PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "^Hi there\\|\n$")

add_test(NAME cli.data.tokenizer_info COMMAND zero data tokenizer --model ${_tok_fix}/llama3_split)
set_tests_properties(cli.data.tokenizer_info PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "\"bos_id\": 0,.*\"content_hash\": \"xxh3:[0-9a-f]+\",.*\"eos_id\": 2,.*\"pad_id\": 1,.*\"vocab_size\": 451")

# Refusals: exit 2 and say what and where.
add_test(NAME cli.data.unsupported_component
         COMMAND sh -c "'$<TARGET_FILE:zero>' data tokenize --model \
'${_tok_fix}/unsupported_wordpiece' --text hi; echo rc=$?")
set_tests_properties(cli.data.unsupported_component PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "unsupported_wordpiece/tokenizer.json: pre_tokenizer type \"Whitespace\" is not supported.*rc=2\n$")
add_test(NAME cli.data.invalid_utf8
         COMMAND sh -c "printf 'ok \\303\\050' > '${CMAKE_CURRENT_BINARY_DIR}/data_bad.txt'; \
'$<TARGET_FILE:zero>' data tokenize --model '${_tok_fix}/gpt2_bytelevel' \
'${CMAKE_CURRENT_BINARY_DIR}/data_bad.txt'; echo rc=$?")
set_tests_properties(cli.data.invalid_utf8 PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "data_bad.txt: text is not valid UTF-8 at byte 3 \\(0xC3\\).*rc=2\n$")
add_test(NAME cli.data.unknown_id
         COMMAND sh -c "'$<TARGET_FILE:zero>' data detokenize --model '${_tok_fix}/gpt2_bytelevel' \
5 401; echo rc=$?")
set_tests_properties(cli.data.unknown_id PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "token id 401 is not in the vocabulary.*rc=2\n$")
add_test(NAME cli.data.not_an_id
         COMMAND sh -c "'$<TARGET_FILE:zero>' data detokenize --model '${_tok_fix}/gpt2_bytelevel' \
5 x7; echo rc=$?")
set_tests_properties(cli.data.not_an_id PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "x7 is not a token id.*rc=2\n$")
add_test(NAME cli.data.bad_sentencepiece_model
         COMMAND sh -c "d='${CMAKE_CURRENT_BINARY_DIR}/data_spm_bad'; mkdir -p \"$d\"; \
echo nonsense > \"$d/tokenizer.model\"; '$<TARGET_FILE:zero>' data tokenize --model \"$d\" --text hi; \
echo rc=$?")
set_tests_properties(cli.data.bad_sentencepiece_model PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "data_spm_bad/tokenizer.model: not a SentencePiece model.*rc=2\n$")
add_test(NAME cli.data.no_tokenizer
         COMMAND sh -c "'$<TARGET_FILE:zero>' data tokenize --model '${PROJECT_SOURCE_DIR}/tests/fixtures' \
--text hi; echo rc=$?")
set_tests_properties(cli.data.no_tokenizer PROPERTIES LABELS unit PASS_REGULAR_EXPRESSION
  "no tokenizer.json or tokenizer.model in the model directory.*rc=2\n$")

# `zero data prepare` -> `zero train` (issue 12 items 2-3). The model: golden gpt2_tiny resized to
# llama3_split's 451 ids, with that tokenizer (tests/cli/text_model.py, standard library only).
set(_dp ${CMAKE_CURRENT_BINARY_DIR}/data_prepare)
add_test(NAME cli.data.prepare_model_setup
         COMMAND sh -c "set -e; rm -rf '${_dp}'; mkdir -p '${_dp}'; \
/usr/bin/python3 '${PROJECT_SOURCE_DIR}/tests/cli/text_model.py' \
'${PROJECT_SOURCE_DIR}/tests/fixtures/golden/gpt2_tiny' '${_tok_fix}/llama3_split' '${_dp}/model'; \
i=0; while [ $i -lt 20 ]; do i=$((i+1)); \
echo \"{\\\"prompt\\\": \\\"Question $i: how are you?\\\", \\\"completion\\\": \\\" Fine, thanks $i.\\\"}\"; \
done > '${_dp}/pc.jsonl'; \
i=0; while [ $i -lt 30 ]; do i=$((i+1)); echo \"Line $i of plain text, with words.\"; \
done > '${_dp}/plain.txt'; echo SETUP_OK")
set_tests_properties(cli.data.prepare_model_setup PROPERTIES LABELS unit FIXTURES_SETUP data_prepare
                     PASS_REGULAR_EXPRESSION "SETUP_OK\n$")

# Text and prompt/completion JSONL -> tokens + mask + manifest -> 2 training steps.
add_test(NAME cli.data.prepare_then_train
         COMMAND sh -c "set -e; z='$<TARGET_FILE:zero>'; d='${_dp}'; \
\"$z\" data prepare --model \"$d/model\" --output \"$d/pt\" \"$d/pc.jsonl\" \"$d/plain.txt\"; \
grep -q '\"tokenizer_hash\": \"xxh3:' \"$d/pt.manifest.json\"; \
\"$z\" train --model \"$d/model\" --train_file \"$d/pt\" --block_size 16 --max_steps 2 --quiet \
--overwrite_output_dir --output_dir \"$d/run_pt\"; \
test $(wc -l < \"$d/run_pt/metrics.jsonl\") -eq 2; \
\"$z\" train --model \"$d/model\" --train_file \"$d/pt.tokens\" --block_size 16 --max_steps 1 --quiet \
--overwrite_output_dir --output_dir \"$d/run_pt_tokens\"; echo TRAIN_OK")
set_tests_properties(cli.data.prepare_then_train PROPERTIES LABELS unit FIXTURES_REQUIRED data_prepare
  PASS_REGULAR_EXPRESSION "21 documents, [0-9]+ tokens \\([0-9]+ trained on\\), uint16 ids.*TRAIN_OK\n$")

# Masked tokens carry no gradient: the same tokens with an all-zero mask give loss 0 and a zero
# gradient (every target is -100), where the prepared mask trains.
add_test(NAME cli.data.masked_tokens_carry_no_gradient
         COMMAND sh -c "set -e; z='$<TARGET_FILE:zero>'; d='${_dp}'; \
\"$z\" data prepare --model \"$d/model\" --output \"$d/m\" \"$d/pc.jsonl\" > /dev/null; \
head -c $(stat -c %s \"$d/m.mask\") /dev/zero > \"$d/m.mask.zero\"; mv \"$d/m.mask.zero\" \"$d/m.mask\"; \
\"$z\" train --model \"$d/model\" --train_file \"$d/m\" --block_size 16 --max_steps 1 --quiet \
--overwrite_output_dir --output_dir \"$d/run_m\"; cat \"$d/run_m/metrics.jsonl\"")
set_tests_properties(cli.data.masked_tokens_carry_no_gradient PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare
  PASS_REGULAR_EXPRESSION "\"loss\": 0.0, \"lr\": [^,]+, \"grad_norm\": 0.0,")

# Masked tokens carry no gradient in a batch that also trains: a masked target (token 32 of a
# 2 x 16 step, a target only) replaced by another id leaves loss and grad norm bitwise unchanged;
# with mask 1 the same replacement changes both (tests/cli/masked_target_no_gradient.py).
add_test(NAME cli.data.masked_target_carries_no_gradient_in_a_mixed_batch
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/masked_target_no_gradient.py
                 $<TARGET_FILE:zero> ${_dp}/model ${_dp}/pc.jsonl ${_dp}/masked_target)
set_tests_properties(cli.data.masked_target_carries_no_gradient_in_a_mixed_batch PROPERTIES
  LABELS unit FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION "NO_GRADIENT_OK\n$")

# Errors: file:line, exit 2, nothing written.
add_test(NAME cli.data.prepare_error_writes_nothing
         COMMAND sh -c "z='$<TARGET_FILE:zero>'; d='${_dp}'; \
printf '{\"text\": \"ok\"}\\n{\"prompt\": \"p\"}\\n' > \"$d/bad.jsonl\"; \
\"$z\" data prepare --model \"$d/model\" --output \"$d/bad\" \"$d/bad.jsonl\"; echo rc=$?; \
ls \"$d\" | grep -c '^bad\\.' ")
set_tests_properties(cli.data.prepare_error_writes_nothing PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare
  PASS_REGULAR_EXPRESSION "bad.jsonl:2: no \"completion\" field \\(nothing written\\)\nrc=2\n1\n$")

# Invalid UTF-8 (plain text and JSONL), a missing field and an unknown chat role: exit 2 with
# FILE:LINE, nothing written under a fresh PREFIX, an earlier PREFIX's files unchanged.
add_test(NAME cli.data.prepare_errors_name_the_line_and_write_nothing
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/prepare_errors.py
                 $<TARGET_FILE:zero> ${_dp}/model
                 ${PROJECT_SOURCE_DIR}/tests/fixtures/chat_templates/expected.json ${_dp}/errors)
set_tests_properties(cli.data.prepare_errors_name_the_line_and_write_nothing PROPERTIES
  LABELS unit FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION "PREPARE_ERRORS_OK\n$")

# Raw text with a non-byte model is refused with the command to run, never read as uint16 ids.
add_test(NAME cli.data.train_refuses_raw_text
         COMMAND sh -c "'$<TARGET_FILE:zero>' train --model '${_dp}/model' \
--train_file '${_dp}/plain.txt' --block_size 16 --max_steps 1 --quiet \
--output_dir '${_dp}/run_raw'; echo rc=$?")
set_tests_properties(cli.data.train_refuses_raw_text PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION
  "plain.txt looks like text, not token ids.*zero data prepare --model [^ ]+/model --output [^ ]+/plain [^ ]+/plain.txt.*rc=2\n$")

# Data prepared with another tokenizer is refused, naming both hashes.
add_test(NAME cli.data.train_refuses_other_tokenizer
         COMMAND sh -c "z='$<TARGET_FILE:zero>'; d='${_dp}'; \
\"$z\" data prepare --model '${_tok_fix}/qwen2_nfc' --output \"$d/other\" \"$d/pc.jsonl\" > /dev/null; \
\"$z\" train --model \"$d/model\" --train_file \"$d/other\" --block_size 16 --max_steps 1 --quiet \
--output_dir \"$d/run_other\"; echo rc=$?")
set_tests_properties(cli.data.train_refuses_other_tokenizer PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION
  "other.manifest.json was prepared with tokenizer xxh3:[0-9a-f]+, but --model [^ ]+ has tokenizer xxh3:[0-9a-f]+.*rc=2\n$")

# Prompt/completion fine-tune: ZeRO-3 on 2 ranks x 2 micro-steps gives the 1-rank losses and grad
# norms within 1e-5 (the loss is the mean over the global batch's unmasked targets on both).
add_test(NAME cli.data.masked_loss_2rank_stage3_equals_1rank
         COMMAND sh -c "set -e; z='$<TARGET_FILE:zero>'; d='${_dp}'; \
\"$z\" data prepare --model \"$d/model\" --output \"$d/mr\" \"$d/pc.jsonl\" > /dev/null; \
printf '{\"zero_optimization\": {\"stage\": 3}}' > \"$d/z3.json\"; \
\"$z\" train --model \"$d/model\" --train_file \"$d/mr\" --block_size 16 \
--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --max_steps 3 --quiet \
--overwrite_output_dir --output_dir \"$d/mr1\"; \
\"$z\" launch --num_gpus 2 -- \"$z\" train --deepspeed \"$d/z3.json\" --model \"$d/model\" \
--train_file \"$d/mr\" --block_size 16 --per_device_train_batch_size 2 \
--gradient_accumulation_steps 2 --max_steps 3 --quiet --overwrite_output_dir --output_dir \"$d/mr2\"; \
/usr/bin/python3 -c \"import json,sys; r=[[json.loads(l) for l in open(sys.argv[i])] for i in (1,2)]; \
assert len(r[0]) == len(r[1]) == 3; \
assert all(abs(a[k]-b[k]) <= 1e-5*abs(a[k]) for a,b in zip(*r) for k in ('loss','grad_norm')), r; \
print('PARITY_OK')\" \"$d/mr1/metrics.jsonl\" \"$d/mr2/metrics.jsonl\"")
set_tests_properties(cli.data.masked_loss_2rank_stage3_equals_1rank PROPERTIES LABELS mpi TIMEOUT 120
  FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION "PARITY_OK\n$")

# Chat "messages" through the model's chat template (ChatML injected into the test model's
# tokenizer_config.json) -> prepare -> train; an unknown role is an error with file:line.
add_test(NAME cli.data.chat_messages_prepare_then_train
         COMMAND sh -c "set -e; z='$<TARGET_FILE:zero>'; d='${_dp}'; rm -rf \"$d/chat_model\"; \
cp -r \"$d/model\" \"$d/chat_model\"; \
/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; c=json.load(open(p)); \
c['chat_template']=json.load(open(sys.argv[2]))['templates']['chatml']; json.dump(c, open(p,'w'))\" \
\"$d/chat_model/tokenizer_config.json\" '${PROJECT_SOURCE_DIR}/tests/fixtures/chat_templates/expected.json'; \
i=0; while [ $i -lt 10 ]; do i=$((i+1)); \
echo \"{\\\"messages\\\": [{\\\"role\\\": \\\"user\\\", \\\"content\\\": \\\"Hi $i\\\"}, \
{\\\"role\\\": \\\"assistant\\\", \\\"content\\\": \\\"Hello $i, how are you?\\\"}]}\"; \
done > \"$d/chat.jsonl\"; \
\"$z\" data prepare --model \"$d/chat_model\" --output \"$d/chat\" \"$d/chat.jsonl\"; \
\"$z\" train --model \"$d/chat_model\" --train_file \"$d/chat\" --block_size 16 --max_steps 2 --quiet \
--overwrite_output_dir --output_dir \"$d/run_chat\"; test $(wc -l < \"$d/run_chat/metrics.jsonl\") -eq 2; \
printf '{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\\n{\"messages\": [{\"role\": \"robot\", \"content\": \"b\"}]}\\n' > \"$d/chat_bad.jsonl\"; \
if \"$z\" data prepare --model \"$d/chat_model\" --output \"$d/chat_bad\" \"$d/chat_bad.jsonl\"; then exit 1; fi; \
test ! -e \"$d/chat_bad.tokens\"; echo CHAT_OK")
set_tests_properties(cli.data.chat_messages_prepare_then_train PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION
  "10 documents.*chat_bad.jsonl:2: message 0: unknown role \"robot\".*CHAT_OK\n$")

# Issue 12, end to end: text -> `zero data prepare` -> `zero train` with evaluation and
# --save_final -> `zero generate --prompt` on the saved directory prints text (its tokenizer files
# travelled with it).
add_test(NAME cli.data.text_to_fine_tuned_model_end_to_end
         COMMAND sh -c "set -e; z='$<TARGET_FILE:zero>'; d='${_dp}'; \
\"$z\" data prepare --model \"$d/model\" --output \"$d/e2e_train\" \"$d/pc.jsonl\" \"$d/plain.txt\"; \
\"$z\" data prepare --model \"$d/model\" --output \"$d/e2e_valid\" \"$d/plain.txt\"; \
\"$z\" train --model \"$d/model\" --train_file \"$d/e2e_train\" --validation_file \"$d/e2e_valid\" \
--eval_steps 2 --block_size 16 --max_steps 4 --learning_rate 1e-3 --quiet --save_final \
--overwrite_output_dir --output_dir \"$d/e2e_run\"; \
grep -q '\"eval_loss\"' \"$d/e2e_run/metrics.jsonl\"; \
test -f \"$d/e2e_run/final/tokenizer.json\"; \
\"$z\" generate --model \"$d/e2e_run/final\" --prompt 'Question 1:' --temperature 0 \
--max_new_tokens 6; echo E2E_OK")
set_tests_properties(cli.data.text_to_fine_tuned_model_end_to_end PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION "Question 1:.*E2E_OK\n$")

# Evaluation honours the loss mask: on prepared prompt/completion data, the initial model's eval
# loss (--eval_on_start, and `zero eval`) equals step 1's training loss when step 1's batch is every
# sample, both the mean over the unmasked targets only (tests/cli/masked_eval.py).
add_test(NAME cli.data.masked_eval_loss_equals_the_training_loss
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cli/masked_eval.py
                 $<TARGET_FILE:zero> ${_dp}/model ${_dp}/pc.jsonl ${_dp}/masked_eval)
set_tests_properties(cli.data.masked_eval_loss_equals_the_training_loss PROPERTIES LABELS unit
  FIXTURES_REQUIRED data_prepare PASS_REGULAR_EXPRESSION "MASKED_EVAL_OK\n$")

# `zero eval` opens its --validation_file as `zero train` does: text is refused, not read as ids.
add_test(NAME cli.data.eval_refuses_raw_text
         COMMAND sh -c "'$<TARGET_FILE:zero>' eval --model '${_dp}/model' --validation_file '${_dp}/plain.txt' 2>&1; echo rc=$?")
set_tests_properties(cli.data.eval_refuses_raw_text PROPERTIES LABELS unit FIXTURES_REQUIRED data_prepare
  PASS_REGULAR_EXPRESSION "--validation_file .*plain.txt looks like text, not token ids.*zero data prepare.*rc=2")
