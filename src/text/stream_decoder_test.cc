// StreamDecoder against the whole-sequence decode (itself checked against HF in tokenizer_test):
// streamed pieces concatenate to decode(ids, skip_special_tokens) for every corpus text of every
// tokenizer fixture, and no piece ends inside a character.
#include "text/stream_decoder.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace zero::text {
namespace {

std::string fixture_dir(const std::string& name) {
  return std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + name;
}

class StreamParity : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamParity, PiecesConcatenateToTheWholeDecodeAndAreWholeCharacters) {
  auto tok = Tokenizer::load(fixture_dir(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  std::ifstream in(fixture_dir(GetParam()) + "/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json expected = nlohmann::json::parse(ss.str());
  int checked = 0;
  for (const auto& c : expected["encode"]) {
    if (!c["add_special_tokens"].get<bool>()) continue;
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    // The first tokens (at most 3, ending on a whole character, as a prompt's do) are the
    // context; the rest arrive one by one.
    size_t split = std::min<size_t>(3, ids.size());
    std::vector<int32_t> context;
    for (;; --split) {
      context.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split));
      auto text = tok->decode(context, true);
      ASSERT_TRUE(text.ok());
      if (split == 0 || text->find("\xEF\xBF\xBD") == std::string::npos) break;
    }
    StreamDecoder stream(*tok, context);
    std::string streamed;
    for (size_t i = split; i < ids.size(); ++i) {
      auto piece = stream.push(ids[i]);
      ASSERT_TRUE(piece.ok()) << piece.status().message();
      EXPECT_EQ(first_invalid_utf8(*piece), piece->size()) << "piece splits a character";
      streamed += *piece;
    }
    auto rest = stream.flush();
    ASSERT_TRUE(rest.ok());
    streamed += *rest;
    auto whole = tok->decode(ids, true);
    auto head = tok->decode(context, true);
    ASSERT_TRUE(whole.ok() && head.ok());
    EXPECT_EQ(*head + streamed, *whole) << "text " << nlohmann::json(c["text"]).dump();
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

// A model's embedding may be padded past the tokenizer's vocabulary: such ids print nothing and
// do not disturb the text around them.
TEST(StreamDecoder, SkipsIdsOutsideTheVocabulary) {
  auto tok = Tokenizer::load(fixture_dir("gpt2_bytelevel"));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto ids = tok->encode("Hello world", false);
  ASSERT_TRUE(ids.ok());
  StreamDecoder stream(*tok, {});
  std::string streamed;
  for (int32_t id : *ids) {
    auto padded = stream.push(static_cast<int32_t>(tok->vocab_size()));
    ASSERT_TRUE(padded.ok()) << padded.status().message();
    EXPECT_EQ(*padded, "");
    auto piece = stream.push(id);
    ASSERT_TRUE(piece.ok()) << piece.status().message();
    streamed += *piece;
  }
  auto rest = stream.flush();
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(streamed + *rest, "Hello world");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamParity,
                         ::testing::Values("gpt2_bytelevel", "gpt2_prefix_space",
                                           "llama2_byte_fallback", "llama2_metaspace",
                                           "llama3_split", "qwen2_nfc", "spm_bpe"));

}  // namespace
}  // namespace zero::text
