// Tokenizer against HF `tokenizers` (and `sentencepiece` for spm_bpe): fixtures from
// tools/golden/make_tokenizer_fixtures.py hold tiny tokenizers trained on the fly in each supported
// form and the ids / text the reference gives for a corpus (English, code, CJK, emoji, combining
// marks, whitespace runs, added tokens, invalid UTF-8).
#include "text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace zero::text {
namespace {

std::string fixture_dir(const std::string& name) {
  return std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + name;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, EncodeEqualsHf) {
  auto tok = Tokenizer::load(fixture_dir(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const nlohmann::json expected = read_json(fixture_dir(GetParam()) + "/expected.json");
  int checked = 0;
  for (const auto& c : expected["encode"]) {
    const auto text = c["text"].get<std::string>();
    const bool special = c["add_special_tokens"].get<bool>();
    auto ids = tok->encode(text, special);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>())
        << "text " << nlohmann::json(text).dump() << " add_special_tokens " << special;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST_P(HfParity, DecodeEqualsHf) {
  auto tok = Tokenizer::load(fixture_dir(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const nlohmann::json expected = read_json(fixture_dir(GetParam()) + "/expected.json");
  int checked = 0;
  for (const auto& c : expected["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const bool skip = c["skip_special_tokens"].get<bool>();
    auto text = tok->decode(ids, skip);
    ASSERT_TRUE(text.ok()) << text.status().message();
    EXPECT_EQ(*text, c["text"].get<std::string>())
        << "ids " << c["ids"].dump() << " skip_special_tokens " << skip;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity,
                         ::testing::Values("gpt2_bytelevel", "gpt2_prefix_space", "llama3_split",
                                           "llama2_byte_fallback", "llama2_metaspace", "qwen2_nfc",
                                           "gemma_byte_fallback", "spm_bpe"));

TEST(Tokenizer, SpecialIdsFromTokenizerConfig) {
  auto l3 = Tokenizer::load(fixture_dir("llama3_split"));
  ASSERT_TRUE(l3.ok()) << l3.status().message();
  EXPECT_EQ(l3->bos_id(), l3->token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(l3->eos_id(), l3->token_to_id("<|eot_id|>"));
  EXPECT_EQ(l3->pad_id(), l3->token_to_id("<|end_of_text|>"));  // {"content": ...} form
  EXPECT_EQ(l3->special_prefix_ids(), std::vector<int32_t>{*l3->bos_id()});
  EXPECT_TRUE(l3->special_suffix_ids().empty());
  EXPECT_TRUE(l3->is_special(*l3->eos_id()));
  EXPECT_FALSE(l3->is_special(*l3->token_to_id("foo_bar")));  // added, not special

  auto l2 = Tokenizer::load(fixture_dir("llama2_byte_fallback"));
  ASSERT_TRUE(l2.ok()) << l2.status().message();
  EXPECT_EQ(l2->bos_id(), 1);
  EXPECT_EQ(l2->eos_id(), 2);
  EXPECT_EQ(l2->unk_id(), 0);
  EXPECT_FALSE(l2->pad_id().has_value());  // null in tokenizer_config.json
  EXPECT_EQ(l2->vocab_size(), 501);
  EXPECT_EQ(l2->id_to_token(3), "<0x00>");
}

TEST(Tokenizer, SentencePieceModelAlone) {
  auto sp = Tokenizer::load(fixture_dir("spm_bpe"));
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ(sp->source(), fixture_dir("spm_bpe") + "/tokenizer.model");
  EXPECT_EQ(sp->vocab_size(), 420);
  EXPECT_EQ(sp->bos_id(), 1);
  EXPECT_EQ(sp->eos_id(), 2);
  EXPECT_EQ(sp->unk_id(), 0);
  EXPECT_FALSE(sp->pad_id().has_value());
  EXPECT_EQ(sp->special_prefix_ids(), std::vector<int32_t>{1});
  EXPECT_TRUE(sp->is_special(2));
  EXPECT_EQ(sp->token_to_id("</s>"), 2);
  EXPECT_FALSE(sp->token_to_id("no such piece").has_value());
  // Control pieces kept in decode read as their text between the decoded runs.
  auto hello = sp->encode("Hello world", false);
  ASSERT_TRUE(hello.ok());
  std::vector<int32_t> ids{1};
  ids.insert(ids.end(), hello->begin(), hello->end());
  ids.push_back(2);
  auto text = sp->decode(ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<s>Hello world</s>");
  EXPECT_EQ(sp->content_hash().rfind("xxh3:", 0), 0u);
}

TEST(Tokenizer, ContentHashIgnoresFormattingButNotContent) {
  const std::string dir = fixture_dir("gpt2_bytelevel");
  const std::string json = read_text(dir + "/tokenizer.json");
  const std::string config = read_text(dir + "/tokenizer_config.json");
  auto a = Tokenizer::from_strings(json, config, dir + "/tokenizer.json");
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = Tokenizer::from_strings(nlohmann::json::parse(json).dump(), config, "compact");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->content_hash(), b->content_hash());
  EXPECT_EQ(a->content_hash().rfind("xxh3:", 0), 0u);
  nlohmann::json changed = nlohmann::json::parse(json);
  changed["model"]["merges"].erase(changed["model"]["merges"].size() - 1);
  auto c = Tokenizer::from_strings(changed.dump(), config, "changed");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NE(a->content_hash(), c->content_hash());
  auto d = Tokenizer::from_strings(json, "", "no config");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_NE(a->content_hash(), d->content_hash());  // bos/eos ids are part of it
}

TEST(Tokenizer, InvalidUtf8InputIsAnError) {
  auto tok = Tokenizer::load(fixture_dir("gpt2_bytelevel"));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto ids = tok->encode(std::string("ok \xC3\x28 bad"));
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("byte 3"), std::string::npos) << ids.status().message();
}

TEST(Tokenizer, DecodeOutOfVocabularyIdIsAnError) {
  auto tok = Tokenizer::load(fixture_dir("gpt2_bytelevel"));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  std::vector<int32_t> ids{1, 99999};
  auto text = tok->decode(ids);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("99999"), std::string::npos);
}

// Every unsupported component is a load error that names it and the file.
TEST(Tokenizer, UnsupportedComponentsAreRefused) {
  const std::string dir = fixture_dir("llama2_byte_fallback");
  const nlohmann::json base = nlohmann::json::parse(read_text(dir + "/tokenizer.json"));
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* names;
  };
  const Case cases[] = {
      {"/normalizer", {{"type", "BertNormalizer"}}, "normalizer type \"BertNormalizer\""},
      {"/normalizer",
       {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}},
       "normalizer type \"Lowercase\""},
      {"/pre_tokenizer", {{"type", "Whitespace"}}, "pre_tokenizer type \"Whitespace\""},
      {"/model/type", "WordPiece", "model type \"WordPiece\""},
      {"/model/dropout", 0.1, "dropout 0.1"},
      {"/model/continuing_subword_prefix", "##", "continuing_subword_prefix"},
      {"/decoder", {{"type", "WordPiece"}}, "decoder type \"WordPiece\""},
      {"/post_processor", {{"type", "Weird"}}, "post_processor type \"Weird\""},
      {"/added_tokens/0/single_word", true, "single_word"},
      {"/pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
       "does not compile"},
      {"/pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Glob", "*"}}}}, "pattern must be"},
      {"/unknown_section", {{"type", "X"}}, "unknown top-level key \"unknown_section\""},
      {"/model/merges/0", {"zz", "qq"}, "merge 0 (\"zz\" \"qq\") names a token that is not"},
      {"/model/merges/1", "a b c", "merge 1 \"a b c\" is not two tokens"},
      {"/added_tokens/0/content", "", "empty or invalid UTF-8"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = base;
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    auto tok = Tokenizer::from_strings(j.dump(), "", "/m/tokenizer.json");
    ASSERT_FALSE(tok.ok()) << c.pointer;
    EXPECT_NE(tok.status().message().find(c.names), std::string::npos) << tok.status().message();
    EXPECT_NE(tok.status().message().find("/m/tokenizer.json"), std::string::npos)
        << tok.status().message();
  }
}

TEST(Tokenizer, LlamaTokenizerClassRebuildsBosEosFromConfig) {
  // As transformers' LlamaTokenizerFast.update_post_processor: add_bos_token / add_eos_token
  // decide, not tokenizer.json's template. Other classes keep the template.
  const std::string dir = fixture_dir("llama2_byte_fallback");
  const std::string json = read_text(dir + "/tokenizer.json");
  auto eos = Tokenizer::from_strings(
      json,
      R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
          "add_bos_token": true, "add_eos_token": true})",
      dir + "/tokenizer.json");
  ASSERT_TRUE(eos.ok()) << eos.status().message();
  EXPECT_EQ(eos->special_prefix_ids(), std::vector<int32_t>{1});
  EXPECT_EQ(eos->special_suffix_ids(), std::vector<int32_t>{2});
  auto ids = eos->encode("x");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 1);
  EXPECT_EQ(ids->back(), 2);
  auto none = Tokenizer::from_strings(
      json, R"({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "add_bos_token": false})",
      dir + "/tokenizer.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->special_prefix_ids().empty());
  auto other = Tokenizer::from_strings(
      json, R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_eos_token": true})",
      dir + "/tokenizer.json");
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(other->special_prefix_ids(), std::vector<int32_t>{1});
  EXPECT_TRUE(other->special_suffix_ids().empty());
  EXPECT_NE(eos->content_hash(), other->content_hash());
}

TEST(Tokenizer, ChatTemplateFromConfig) {
  const std::string dir = fixture_dir("llama3_split");
  const std::string json = read_text(dir + "/tokenizer.json");
  auto plain = Tokenizer::from_strings(json, R"({"chat_template": "{{ messages }}"})", "t");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->chat_template(), "{{ messages }}");
  auto named =
      Tokenizer::from_strings(json, R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                  {"name": "default", "template": "D"}]})",
                              "t");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->chat_template(), "D");
  auto none = Tokenizer::load(dir);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->chat_template().has_value());
}

TEST(Tokenizer, ConfigTokenMissingFromVocabIsAnError) {
  const std::string dir = fixture_dir("llama2_byte_fallback");
  auto tok = Tokenizer::from_strings(read_text(dir + "/tokenizer.json"),
                                     R"({"eos_token": "<|nope|>"})", dir + "/tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("eos_token \"<|nope|>\""), std::string::npos)
      << tok.status().message();
}

TEST(Tokenizer, LstripRstripAbsorbWhitespace) {
  // gpt2_bytelevel with <|endoftext|> lstrip and foo_bar rstrip; ids from HF tokenizers 0.23 on
  // the same edited file. Unicode whitespace (U+3000) is absorbed too.
  const std::string dir = fixture_dir("gpt2_bytelevel");
  nlohmann::json j = nlohmann::json::parse(read_text(dir + "/tokenizer.json"));
  for (auto& t : j["added_tokens"]) {
    if (t["content"] == "<|endoftext|>") t["lstrip"] = true;
    if (t["content"] == "foo_bar") t["rstrip"] = true;
  }
  auto tok = Tokenizer::from_strings(j.dump(), "", "t");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  using V = std::vector<int32_t>;
  EXPECT_EQ(*tok->encode("a  <|endoftext|>  b", false), (V{65, 0, 221, 221, 66}));
  EXPECT_EQ(*tok->encode("x foo_bar   y", false), (V{88, 221, 400, 89}));
  EXPECT_EQ(*tok->encode("a\u3000<|endoftext|>\u00a0b", false), (V{65, 0, 127, 255, 66}));
}

// Each thread keeps its own word cache: concurrent encodes give the single-threaded ids.
TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  for (const char* name : {"llama3_split", "llama2_byte_fallback", "spm_bpe"}) {
    auto tok = Tokenizer::load(fixture_dir(name));
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    const nlohmann::json expected = read_json(fixture_dir(name) + "/expected.json");
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> serial;
    for (const auto& c : expected["encode"]) {
      texts.push_back(c["text"].get<std::string>());
      serial.push_back(*tok->encode(texts.back()));
    }
    std::vector<std::vector<std::vector<int32_t>>> got(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 20; ++round) {
          got[t].clear();
          for (const std::string& text : texts) got[t].push_back(*tok->encode(text));
        }
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& g : got) EXPECT_EQ(g, serial) << name;
  }
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  // Unicode §3.9 U+FFFD substitution examples (as Rust's from_utf8_lossy).
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("a\x80"
                       "b"),
            "a" + r + "b");
  EXPECT_EQ(utf8_lossy("\xE6\x9D"), r);  // truncated 3-byte: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"
                       "x"),
            r + "x");                                     // truncated 4-byte
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);               // overlong lead: each byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);       // surrogate
  EXPECT_EQ(utf8_lossy("\xE6\x9D\xB1"), "\xE6\x9D\xB1");  // valid
}

}  // namespace
}  // namespace zero::text
