// The prepared-data manifest round trip and checks, prefix resolution, and the text detector that
// keeps plain text from being read as uint16 ids.
#include "data/prepared_data.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace zero {
namespace {

class PreparedDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_prepared_test_" + std::to_string(::getpid()) + "_" +
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

PreparedManifest sample_manifest() {
  PreparedManifest m;
  m.tokenizer_hash = "xxh3:0123456789abcdef";
  m.vocab_size = 451;
  m.eos_id = 2;
  m.dtype = TokenDType::kUint16;
  m.num_tokens = 3;
  m.num_trained_tokens = 2;
  m.num_documents = 1;
  m.sources = {{"a.jsonl", 42, 1}};
  return m;
}

TEST_F(PreparedDataTest, ManifestRoundTripAndSizes) {
  const PreparedManifest m = sample_manifest();
  const std::string prefix = (dir_ / "p").string();
  write("p.manifest.json", manifest_to_json(m));
  write("p.tokens", std::string(6, '\x01'));
  write("p.mask", std::string(3, '\x01'));
  auto got = read_prepared_manifest(*storage_, prefix);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->tokenizer_hash, m.tokenizer_hash);
  EXPECT_EQ(got->num_tokens, 3);
  EXPECT_EQ(got->num_trained_tokens, 2);
  ASSERT_EQ(got->sources.size(), 1u);
  EXPECT_EQ(got->sources[0].bytes, 42u);

  EXPECT_EQ(find_prepared_prefix(*storage_, prefix), prefix);
  EXPECT_EQ(find_prepared_prefix(*storage_, prefix + ".tokens"), prefix);
  EXPECT_EQ(find_prepared_prefix(*storage_, prefix + ".mask"), std::nullopt);

  write("p.mask", std::string(4, '\x01'));
  auto bad = read_prepared_manifest(*storage_, prefix);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("p.mask: 4 bytes"), std::string::npos);
}

TEST_F(PreparedDataTest, ManifestErrorsNameTheFile) {
  EXPECT_FALSE(manifest_from_json("[]", "m.json").ok());
  std::string j = manifest_to_json(sample_manifest());
  j.replace(j.find("\"version\": 1"), 12, "\"version\": 9");
  auto s = manifest_from_json(j, "m.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("m.json: \"version\" 9"), std::string::npos)
      << s.status().message();
}

TEST_F(PreparedDataTest, TextIsRecognised) {
  EXPECT_TRUE(looks_like_text(*storage_, write("a.txt", "Hello, world!\nCafé 日本語 🙂\n")));
  // Small ids as uint16: NUL bytes.
  EXPECT_FALSE(looks_like_text(*storage_, write("b.bin", std::string("\x05\x00\x07\x00", 4))));
  // Invalid UTF-8.
  EXPECT_FALSE(looks_like_text(*storage_, write("c.bin", "ab\xC3\x28 cd")));
  // Mostly control bytes.
  EXPECT_FALSE(looks_like_text(*storage_, write("d.bin", std::string(50, '\x01') + "ab")));
  EXPECT_FALSE(looks_like_text(*storage_, (dir_ / "missing").string()));
}

}  // namespace
}  // namespace zero
