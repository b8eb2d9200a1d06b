// copy_tokenizer_files: copies whichever tokenizer files exist, byte for byte; a new tokenizer
// replaces an earlier one's files instead of mixing with them; no tokenizer changes nothing.
#include "checkpoint/tokenizer_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TokenizerFiles, CopiesWhatExistsAndReplacesAnEarlierTokenizer) {
  const fs::path root =
      fs::temp_directory_path() / ("zero_tok_files_" + std::to_string(::getpid()));
  fs::remove_all(root);
  write(root / "bpe/tokenizer.json", "{\"model\": 1}");
  write(root / "bpe/tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
  write(root / "bpe/config.json", "{}");  // not a tokenizer file
  write(root / "spm/tokenizer.model", "spm bytes");

  std::vector<std::string> copied;
  ASSERT_TRUE(copy_tokenizer_files(*default_storage(), (root / "bpe").string(),
                                   (root / "out").string(), &copied)
                  .ok());
  EXPECT_EQ(copied, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ(read(root / "out/tokenizer.json"), "{\"model\": 1}");
  EXPECT_FALSE(fs::exists(root / "out/config.json"));
  EXPECT_FALSE(fs::exists(root / "out/tokenizer.json.tmp"));

  // Another model's tokenizer replaces the first one's files.
  ASSERT_TRUE(
      copy_tokenizer_files(*default_storage(), (root / "spm").string(), (root / "out").string())
          .ok());
  EXPECT_EQ(read(root / "out/tokenizer.model"), "spm bytes");
  EXPECT_FALSE(fs::exists(root / "out/tokenizer.json"));
  EXPECT_FALSE(fs::exists(root / "out/tokenizer_config.json"));

  // No tokenizer (a preset, a missing directory): nothing is created or removed.
  ASSERT_TRUE(
      copy_tokenizer_files(*default_storage(), "preset:gpt2-tiny", (root / "none").string()).ok());
  EXPECT_FALSE(fs::exists(root / "none"));
  ASSERT_TRUE(
      copy_tokenizer_files(*default_storage(), (root / "nope").string(), (root / "out").string())
          .ok());
  EXPECT_TRUE(fs::exists(root / "out/tokenizer.model"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace zero::checkpoint
