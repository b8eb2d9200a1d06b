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
