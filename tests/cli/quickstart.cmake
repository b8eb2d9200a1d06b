# tools/corpus_words.py, the quick start's check that its sample reads as words (issue 14): the
# share of the sample's words (punctuation stripped, any case) found in the corpus, the echoed
# prompt not counted. Here 6 of 8: "lihgt" and "xyzzy" are not in examples/data/kjv.txt.
set(_qs_words "/usr/bin/python3 ${PROJECT_SOURCE_DIR}/tools/corpus_words.py \
${PROJECT_SOURCE_DIR}/examples/data/kjv.txt")
add_test(NAME cli.quickstart.corpus_words_share
         COMMAND sh -c "printf 'And God said, Let there be lihgt: and XYZZY was light.\\n' | \
${_qs_words} --prompt 'And God said'")
set_tests_properties(cli.quickstart.corpus_words_share PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "words found in the corpus: 75% \\(6/8\\)")

# --min_share: exit 1 below the share asked for, 0 at or above it; a last word cut off by
# --max_new_tokens (no whitespace after it) is not counted.
add_test(NAME cli.quickstart.corpus_words_min_share
         COMMAND sh -c "printf 'Let there be lihgt\\n' | ${_qs_words} --min_share 0.8; test $? -eq 1 && \
printf 'Let there be lig' | ${_qs_words} --min_share 1.0")
set_tests_properties(cli.quickstart.corpus_words_min_share PROPERTIES LABELS unit
                     PASS_REGULAR_EXPRESSION "100% \\(3/3\\)")
