// `zero data prepare`'s logic on the HF-made tokenizer fixtures: the packed stream (BOS, text ids
// equal to HF's, EOS between documents), the mask of a prompt/completion pair, errors with
// file:line, and the files written (or not written, on error).
#include "text/data_preparer.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zero::text {
namespace {

Tokenizer load_fixture(const std::string& name) {
  auto tok = Tokenizer::load(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + name);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return std::move(tok).value();
}

// HF tokenizers' ids of "Hello, world! How are you today?" for llama3_split without special
// tokens (tests/cli/data.cmake checks the same ids through the CLI); BOS 0, EOS 2.
const std::vector<int32_t> kHfHello = {42, 71,  78,  78, 81, 14,  294, 81,  84, 78, 70,  3, 223,
                                       42, 402, 262, 84, 71, 223, 416, 267, 81, 70, 373, 33};

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(DataPreparer, TextDocumentsAreBosTextEos) {
  const Tokenizer tok = load_fixture("llama3_split");
  ASSERT_EQ(tok.bos_id(), 0);
  ASSERT_EQ(tok.eos_id(), 2);
  PreparedTokens out;
  const std::string jsonl =
      "{\"text\": \"Hello, world! How are you today?\"}\n\n"
      "{\"text\": \"Hello, world! How are you today?\"}\n";
  ASSERT_TRUE(prepare_file_content(tok, jsonl, "a.jsonl", true, &out).ok());
  EXPECT_EQ(out.documents, 2);
  const std::vector<int32_t> doc = concat({{0}, kHfHello, {2}});
  EXPECT_EQ(out.ids, concat({doc, doc}));
  // BOS is never a target (it follows the previous document's EOS); text and EOS are.
  std::vector<uint8_t> doc_mask(doc.size(), 1);
  doc_mask[0] = 0;
  std::vector<uint8_t> want_mask = doc_mask;
  want_mask.insert(want_mask.end(), doc_mask.begin(), doc_mask.end());
  EXPECT_EQ(out.mask, want_mask);

  // A plain text file is one document.
  PreparedTokens plain;
  ASSERT_TRUE(
      prepare_file_content(tok, "Hello, world! How are you today?", "a.txt", false, &plain).ok());
  EXPECT_EQ(plain.ids, doc);
  EXPECT_EQ(plain.mask, doc_mask);
}

TEST(DataPreparer, PromptTokensAreMasked) {
  const Tokenizer tok = load_fixture("gpt2_bytelevel");
  ASSERT_TRUE(tok.eos_id().has_value());
  const std::string prompt = "Question: what is 2+2?\n", completion = "Answer: 4";
  auto prompt_ids = tok.encode(prompt, false), completion_ids = tok.encode(completion, false);
  ASSERT_TRUE(prompt_ids.ok() && completion_ids.ok());
  PreparedTokens out;
  const std::string line =
      "{\"prompt\": \"Question: what is 2+2?\\n\", \"completion\": \"Answer: 4\"}";
  ASSERT_TRUE(prepare_file_content(tok, line, "pc.jsonl", true, &out).ok());
  const std::vector<int32_t>& pre = tok.special_prefix_ids();
  EXPECT_EQ(out.ids, concat({pre, *prompt_ids, *completion_ids, {*tok.eos_id()}}));
  std::vector<uint8_t> want(pre.size() + prompt_ids->size(), 0);
  want.insert(want.end(), completion_ids->size() + 1, 1);
  EXPECT_EQ(out.mask, want);
  // The completion decodes back to itself: the mask boundary is a token boundary.
  auto text = tok.decode(
      std::vector<int32_t>(out.ids.end() - 1 - completion_ids->size(), out.ids.end() - 1));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, completion);
}

TEST(DataPreparer, ErrorsNameFileAndLine) {
  const Tokenizer tok = load_fixture("llama3_split");
  auto error_of = [&](const std::string& content, bool jsonl) {
    PreparedTokens out;
    Status s = prepare_file_content(tok, content, "d.jsonl", jsonl, &out);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  EXPECT_EQ(error_of("{\"text\": \"a\"}\n{\"text\": \"b\"\n", true), "d.jsonl:2: not valid JSON");
  EXPECT_EQ(error_of("{\"text\": \"a\"}\n\n{\"prompt\": \"p\"}\n", true),
            "d.jsonl:3: no \"completion\" field");
  EXPECT_EQ(error_of("{\"txt\": \"a\"}\n", true),
            "d.jsonl:1: no \"text\" field, nor \"prompt\" + \"completion\"");
  EXPECT_EQ(error_of("{\"text\": 3}\n", true), "d.jsonl:1: \"text\" is not a string");
  EXPECT_EQ(error_of("[1]\n", true), "d.jsonl:1: not a JSON object");
  EXPECT_EQ(error_of("ok\nok \xC3\x28\n", false),
            "d.jsonl:2: not valid UTF-8 (byte 0xC3 at column 4)");
}

// Chat "messages" through the tokenizer's chat template (Llama-3 here): the conversation's ids are
// the segments' ids, only the reply and its <|eot_id|> (the EOS) are trained on, and the
// template's final EOS is not doubled.
TEST(DataPreparer, ChatMessagesUseTheChatTemplate) {
  const std::string dir = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/tokenizers/llama3_split";
  std::ifstream tj(dir + "/tokenizer.json"), cj(dir + "/tokenizer_config.json");
  std::stringstream ts, cs;
  ts << tj.rdbuf();
  cs << cj.rdbuf();
  nlohmann::json config = nlohmann::json::parse(cs.str());
  std::ifstream fx(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/chat_templates/expected.json");
  config["chat_template"] = nlohmann::json::parse(fx)["templates"]["llama3"];
  auto tok = Tokenizer::from_strings(ts.str(), config.dump(), dir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  ASSERT_EQ(tok->id_to_token(*tok->eos_id()), "<|eot_id|>");
  PreparedTokens out;
  const std::string line =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
      "{\"role\": \"assistant\", \"content\": \"Hello\"}]}";
  ASSERT_TRUE(prepare_file_content(*tok, line, "chat.jsonl", true, &out).ok());
  auto head = tok->encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n", false);
  auto user = tok->encode("Hi<|eot_id|>", false);
  auto header = tok->encode("<|start_header_id|>assistant<|end_header_id|>\n\n", false);
  auto reply = tok->encode("Hello<|eot_id|>", false);
  ASSERT_TRUE(head.ok() && user.ok() && header.ok() && reply.ok());
  EXPECT_EQ(out.ids, concat({*head, *user, *header, *reply}));
  std::vector<uint8_t> want(head->size() + user->size() + header->size(), 0);
  want.insert(want.end(), reply->size(), 1);
  EXPECT_EQ(out.mask, want);
  EXPECT_EQ(out.ids.back(), *tok->eos_id());
  EXPECT_EQ(out.ids.front(), *tok->bos_id());

  PreparedTokens bad;
  Status s =
      prepare_file_content(*tok, "\n{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}",
                           "chat.jsonl", true, &bad);
  EXPECT_EQ(s.message(),
            "chat.jsonl:2: message 0: unknown role \"robot\" (system, user or assistant)");
  // The fixture tokenizer itself has no chat_template.
  const Tokenizer plain = load_fixture("llama3_split");
  s = prepare_file_content(plain, line, "chat.jsonl", true, &bad);
  EXPECT_NE(s.message().find("chat.jsonl:1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no chat_template"), std::string::npos) << s.message();
}

class PrepareFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_prepare_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(storage_->make_dirs(dir_.string()).ok());
  }
  void TearDown() override { ASSERT_TRUE(storage_->remove_dir(dir_.string()).ok()); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    EXPECT_TRUE(write_file_atomically(*storage_, p, bytes).ok());
    return p;
  }
  Storage* storage_ = default_storage();
  std::filesystem::path dir_;
};

TEST_F(PrepareFiles, WritesTokensMaskManifestOrNothing) {
  const Tokenizer tok = load_fixture("llama3_split");
  const std::string a = write("a.txt", "Hello, world! How are you today?");
  const std::string b = write("b.jsonl", "{\"prompt\": \"Hi\", \"completion\": \" there\"}\n");
  const std::string prefix = (dir_ / "out").string();
  auto m = prepare_files(*storage_, tok, {a, b}, prefix);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->dtype, TokenDType::kUint16);  // 451 ids
  EXPECT_EQ(m->num_documents, 2);
  EXPECT_EQ(m->tokenizer_hash, tok.content_hash());
  ASSERT_EQ(m->sources.size(), 2u);
  EXPECT_EQ(m->sources[0].bytes, 32u);
  auto back = read_prepared_manifest(*storage_, prefix);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->num_tokens, m->num_tokens);
  EXPECT_EQ(back->num_trained_tokens, m->num_trained_tokens);
  auto tokens = read_file(*storage_, prepared_tokens_path(prefix));
  ASSERT_TRUE(tokens.ok());
  uint16_t first_doc[3];
  std::memcpy(first_doc, tokens->data(), sizeof(first_doc));
  EXPECT_EQ(first_doc[0], 0);   // BOS
  EXPECT_EQ(first_doc[1], 42);  // "H"
  EXPECT_EQ(first_doc[2], 71);

  // The thread count does not change the output.
  const std::string threaded = (dir_ / "threaded").string();
  ASSERT_TRUE(prepare_files(*storage_, tok, {a, b, a, b, a}, threaded, 3).ok());
  const std::string serial = (dir_ / "serial").string();
  ASSERT_TRUE(prepare_files(*storage_, tok, {a, b, a, b, a}, serial, 1).ok());
  EXPECT_EQ(*read_file(*storage_, prepared_tokens_path(threaded)),
            *read_file(*storage_, prepared_tokens_path(serial)));
  EXPECT_EQ(*read_file(*storage_, prepared_mask_path(threaded)),
            *read_file(*storage_, prepared_mask_path(serial)));

  // An error in the second file: nothing new is written, the earlier output stays as it was.
  const std::string bad = write("bad.jsonl", "{\"text\": \"x\"}\n{oops}\n");
  auto failed = prepare_files(*storage_, tok, {a, bad}, prefix);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("bad.jsonl:2: not valid JSON"), std::string::npos);
  auto still = read_prepared_manifest(*storage_, prefix);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->num_documents, 2);
  const std::string fresh = (dir_ / "fresh").string();
  EXPECT_FALSE(prepare_files(*storage_, tok, {bad}, fresh).ok());
  EXPECT_FALSE(storage_->file_exists(prepared_tokens_path(fresh)));
  EXPECT_FALSE(storage_->file_exists(prepared_manifest_path(fresh)));
}

}  // namespace
}  // namespace zero::text
