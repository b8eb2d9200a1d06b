// read_prompts_file: good lines become sequences with the line's settings over the defaults and a
// seed per index; every kind of bad line is refused naming the file, the line and what is wrong.
#include "runtime/prompts_file.h"

#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace zero::runtime {
namespace {

// A file holding `content`, under the test's temporary directory.
std::string write_file(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// A small model: vocabulary 50, 16 positions.
model::ModelConfig small_config() {
  StatusOr<model::ModelConfig> c = model::preset_model_config("gpt2-tiny");
  EXPECT_TRUE(c.ok());
  c->vocab_size = 50;
  c->max_position_embeddings = 16;
  return *c;
}

// Text as bytes + 1 (a stand-in tokenizer), refusing "bad".
StatusOr<std::vector<int32_t>> encode(const std::string& text) {
  if (text == "bad") return invalid_argument("cannot encode {}", text);
  std::vector<int32_t> ids;
  for (char ch : text) ids.push_back((static_cast<unsigned char>(ch) % 49) + 1);
  return ids;
}

TEST(PromptsFile, ReadsPromptsWithTheirOwnSettings) {
  const std::string path = write_file(
      "good.jsonl",
      "{\"prompt\": \"hi\"}\n"
      "\n"
      "{\"prompt_tokens\": [1, 2, 3], \"max_new_tokens\": 5, \"temperature\": 0, \"top_k\": 4, "
      "\"top_p\": 0.5, \"repetition_penalty\": 1.2, \"seed\": 9, \"stop\": \"x\", \"id\": "
      "{\"q\": 7}}\n"
      "  {\"prompt\": \"abc\", \"stop\": [\"a\", \"bc\"]}  \r\n");
  SamplingOptions defaults;
  defaults.max_new_tokens = 20;
  defaults.temperature = 0.7;
  defaults.seed = 100;
  defaults.stop_tokens = {0};
  auto batch = read_prompts_file(path, small_config(), defaults, encode);
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  ASSERT_EQ(batch->sequences.size(), 3u);
  const BatchSequence& a = batch->sequences[0];
  EXPECT_EQ(a.tokens, std::vector<int32_t>({('h' % 49) + 1, ('i' % 49) + 1}));
  EXPECT_EQ(a.options.max_new_tokens, 20);
  EXPECT_EQ(a.options.temperature, 0.7);
  EXPECT_EQ(a.options.seed, sequence_seed(100, 0));
  EXPECT_EQ(a.options.stop_tokens, std::vector<int32_t>({0}));
  EXPECT_EQ(batch->lines[0].line, 1);
  EXPECT_TRUE(batch->lines[0].prompt_is_text);

  const BatchSequence& b = batch->sequences[1];
  EXPECT_EQ(b.tokens, std::vector<int32_t>({1, 2, 3}));
  EXPECT_EQ(b.options.max_new_tokens, 5);
  EXPECT_EQ(b.options.temperature, 0.0);
  EXPECT_EQ(b.options.top_k, 4);
  EXPECT_EQ(b.options.top_p, 0.5);
  EXPECT_EQ(b.options.repetition_penalty, 1.2);
  EXPECT_EQ(b.options.seed, 9u);
  EXPECT_EQ(batch->lines[1].line, 3);  // the blank line counts as a line, not as a prompt
  EXPECT_FALSE(batch->lines[1].prompt_is_text);
  EXPECT_EQ(batch->lines[1].prompt, nlohmann::json::parse("[1, 2, 3]"));
  EXPECT_EQ(batch->lines[1].stop, std::vector<std::string>({"x"}));
  ASSERT_TRUE(batch->lines[1].id.has_value());
  EXPECT_EQ(*batch->lines[1].id, nlohmann::json::parse("{\"q\": 7}"));

  EXPECT_EQ(batch->sequences[2].options.seed, sequence_seed(100, 2));
  EXPECT_EQ(batch->lines[2].stop, std::vector<std::string>({"a", "bc"}));
  EXPECT_EQ(batch->lines[2].prompt_tokens, 3);
}

struct BadLine {
  const char* name;
  std::string content;
  std::string message;  // expected in the error, after "PATH:"
};

void PrintTo(const BadLine& bad, std::ostream* os) { *os << bad.name; }

class PromptsFileBadLine : public ::testing::TestWithParam<BadLine> {};

TEST_P(PromptsFileBadLine, IsRefusedNamingTheLine) {
  const BadLine& bad = GetParam();
  const std::string path = write_file(std::string(bad.name) + ".jsonl", bad.content);
  SamplingOptions defaults;
  auto batch = read_prompts_file(path, small_config(), defaults, encode);
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(batch.status().message().find(path + ":" + bad.message), std::string::npos)
      << batch.status().message();
}

const std::string kGood = "{\"prompt\": \"ok\"}\n";

INSTANTIATE_TEST_SUITE_P(
    Lines, PromptsFileBadLine,
    ::testing::Values(
        BadLine{"not_json", kGood + "{\"prompt\": \"a\"\n", "2: not valid JSON"},
        BadLine{"not_object", kGood + kGood + "[1, 2]\n", "3: not a JSON object"},
        BadLine{"typo", "{\"prompt\": \"a\", \"max_tokens\": 3}\n",
                "1: unknown key \"max_tokens\" (did you mean \"max_new_tokens\"?)"},
        BadLine{"no_prompt", "{\"max_new_tokens\": 3}\n",
                "1: no prompt: give \"prompt\" (text) or \"prompt_tokens\" (ids)"},
        BadLine{"both", "{\"prompt\": \"a\", \"prompt_tokens\": [1]}\n",
                "1: give one of \"prompt\" (text) or \"prompt_tokens\" (ids)"},
        BadLine{"prompt_type", "{\"prompt\": 5}\n", "1: \"prompt\" must be a string, got 5"},
        BadLine{"id_range", kGood + "{\"prompt_tokens\": [1, 50]}\n",
                "2: \"prompt_tokens\" must be a non-empty array of token ids in [0, 50), got "
                "[1,50]"},
        BadLine{"ids_empty", "{\"prompt_tokens\": []}\n",
                "1: \"prompt_tokens\" must be a non-empty array"},
        BadLine{"negative", "{\"prompt\": \"a\", \"max_new_tokens\": -1}\n",
                "1: \"max_new_tokens\" must be an integer >= 0, got -1"},
        BadLine{"float_int", "{\"prompt\": \"a\", \"top_k\": 2.5}\n",
                "1: \"top_k\" must be an integer >= 0, got 2.5"},
        BadLine{"top_p", "{\"prompt\": \"a\", \"top_p\": 0}\n",
                "1: \"top_p\" must be a number > 0 and <= 1, got 0"},
        BadLine{"penalty", "{\"prompt\": \"a\", \"repetition_penalty\": \"x\"}\n",
                "1: \"repetition_penalty\" must be a number > 0, got \"x\""},
        BadLine{"seed", "{\"prompt\": \"a\", \"seed\": -3}\n",
                "1: \"seed\" must be an integer >= 0, got -3"},
        BadLine{"stop", "{\"prompt\": \"a\", \"stop\": [\"\"]}\n",
                "1: \"stop\" must be a non-empty string or an array of them"},
        BadLine{"encode", "{\"prompt\": \"bad\"}\n", "1: \"prompt\": cannot encode bad"},
        BadLine{"too_long", kGood + "{\"prompt_tokens\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}\n",
                "2: the prompt is 17 tokens, more than the context of 16 positions"}),
    [](const ::testing::TestParamInfo<BadLine>& info) { return std::string(info.param.name); });

TEST(PromptsFile, RefusesAnEmptyOrMissingFile) {
  SamplingOptions defaults;
  const std::string empty = write_file("empty.jsonl", "\n  \n");
  auto batch = read_prompts_file(empty, small_config(), defaults, encode);
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find(empty + ": no prompts"), std::string::npos);
  const std::string missing = ::testing::TempDir() + "/no_such_prompts.jsonl";
  batch = read_prompts_file(missing, small_config(), defaults, encode);
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find(missing + ": cannot read"), std::string::npos);
}

// A model without text (no tokenizer, not byte-level) takes ids only.
TEST(PromptsFile, TextNeedsAModelWithText) {
  SamplingOptions defaults;
  const std::string path =
      write_file("ids_only.jsonl", "{\"prompt_tokens\": [1], \"stop\": \"x\"}\n");
  auto batch = read_prompts_file(path, small_config(), defaults, nullptr);
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find(":1: \"stop\" strings need a model with text"),
            std::string::npos);
  const std::string text = write_file("ids_only_text.jsonl", "{\"prompt\": \"x\"}\n");
  batch = read_prompts_file(text, small_config(), defaults, nullptr);
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find(":1: \"prompt\" needs a tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace zero::runtime
