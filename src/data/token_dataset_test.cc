// TokenDataset: raw uint16/uint32 and llm.c headered files written here, the sample/target
// contract, and errors for bad files and out-of-vocabulary ids.
#include "data/token_dataset.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace zero {
namespace {

class TokenDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_tokens_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(storage_->make_dirs(dir_.string()).ok());
  }
  void TearDown() override { ASSERT_TRUE(storage_->remove_dir(dir_.string()).ok()); }

  template <typename Tok>
  std::string write_tokens(const std::string& name, const std::vector<Tok>& tokens,
                           int32_t llmc_version = 0, int64_t llmc_count = -1) {
    std::string bytes;
    if (llmc_version != 0) {
      std::vector<int32_t> header(256, 0);
      header[0] = kLlmcMagic;
      header[1] = llmc_version;
      header[2] = static_cast<int32_t>(llmc_count >= 0 ? llmc_count : tokens.size());
      bytes.append(reinterpret_cast<const char*>(header.data()), 1024);
    }
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(Tok));
    const std::string p = (dir_ / name).string();
    EXPECT_TRUE(write_file_atomically(*storage_, p, bytes).ok());
    return p;
  }

  Storage* storage_ = default_storage();
  std::filesystem::path dir_;
};

TokenDatasetOptions opts(int64_t block_size, int64_t vocab_size,
                         std::optional<TokenDType> dtype = std::nullopt, bool upfront = false) {
  TokenDatasetOptions o;
  o.block_size = block_size;
  o.vocab_size = vocab_size;
  o.dtype = dtype;
  o.validate_upfront = upfront;
  return o;
}

template <typename Tok>
std::vector<Tok> iota_tokens(size_t n) {
  std::vector<Tok> t(n);
  std::iota(t.begin(), t.end(), Tok{0});
  return t;
}

void expect_samples(const TokenDataset& ds, int64_t T) {
  std::vector<int32_t> in(static_cast<size_t>(T)), tgt(static_cast<size_t>(T));
  for (int64_t g = 0; g < ds.num_samples(); ++g) {
    ASSERT_TRUE(ds.get_sample(g, in.data(), tgt.data()).ok());
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(in[static_cast<size_t>(t)], g * T + t);
      EXPECT_EQ(tgt[static_cast<size_t>(t)], g * T + t + 1);
    }
  }
}

TEST_F(TokenDatasetTest, Uint8TextIsAByteLevelStream) {
  std::vector<uint8_t> bytes = iota_tokens<uint8_t>(200);
  const std::string p = write_tokens("text.txt", bytes);
  auto ds = TokenDataset::open(*storage_, p, opts(9, 256, TokenDType::kUint8));
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->num_tokens(), 200);
  EXPECT_EQ(ds->num_samples(), 199 / 9);
  expect_samples(*ds, 9);
  auto small_vocab = TokenDataset::open(*storage_, p, opts(9, 100, TokenDType::kUint8, true));
  EXPECT_FALSE(small_vocab.ok());
}

TEST_F(TokenDatasetTest, RawUint16) {
  // N = 23, T = 4: S = floor(22 / 4) = 5; the last sample's target is token 20.
  auto ds =
      TokenDataset::open(*storage_, write_tokens("a.bin", iota_tokens<uint16_t>(23)), opts(4, 100));
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->format(), TokenFileFormat::kRaw);
  EXPECT_EQ(ds->num_tokens(), 23);
  EXPECT_EQ(ds->num_samples(), 5);
  expect_samples(*ds, 4);
}

TEST_F(TokenDatasetTest, ExactlyOneSample) {
  auto ds =
      TokenDataset::open(*storage_, write_tokens("a.bin", iota_tokens<uint16_t>(5)), opts(4, 100));
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->num_samples(), 1);
  expect_samples(*ds, 4);
}

TEST_F(TokenDatasetTest, RawUint32LargeIds) {
  std::vector<uint32_t> tokens = iota_tokens<uint32_t>(17);
  tokens[3] = 150000;
  auto ds = TokenDataset::open(*storage_, write_tokens("a.bin", tokens),
                               opts(8, 200000, TokenDType::kUint32));
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->num_samples(), 2);
  std::vector<int32_t> in(8), tgt(8);
  ASSERT_TRUE(ds->get_sample(0, in.data(), tgt.data()).ok());
  EXPECT_EQ(in[3], 150000);
  EXPECT_EQ(tgt[2], 150000);
}

TEST_F(TokenDatasetTest, LlmcV1AndV2) {
  auto v1 = TokenDataset::open(*storage_, write_tokens("v1.bin", iota_tokens<uint16_t>(33), 1),
                               opts(8, 50257));
  ASSERT_TRUE(v1.ok()) << v1.status().to_string();
  EXPECT_EQ(v1->format(), TokenFileFormat::kLlmc);
  EXPECT_EQ(v1->dtype(), TokenDType::kUint16);
  EXPECT_EQ(v1->num_samples(), 4);
  expect_samples(*v1, 8);
  auto v2 = TokenDataset::open(*storage_, write_tokens("v2.bin", iota_tokens<uint32_t>(33), 2),
                               opts(8, 50257));
  ASSERT_TRUE(v2.ok()) << v2.status().to_string();
  EXPECT_EQ(v2->dtype(), TokenDType::kUint32);
  expect_samples(*v2, 8);
  // An explicit --data_dtype that contradicts the header is an error naming both.
  auto clash = TokenDataset::open(*storage_, (dir_ / "v1.bin").string(),
                                  opts(8, 50257, TokenDType::kUint32));
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("contradicts"), std::string::npos);
}

TEST_F(TokenDatasetTest, BadFiles) {
  const TokenDatasetOptions options = opts(4, 100);
  auto expect_error = [&](const std::string& p, const char* substr) {
    auto ds = TokenDataset::open(*storage_, p, options);
    ASSERT_FALSE(ds.ok()) << p;
    EXPECT_NE(ds.status().message().find(p), std::string::npos) << ds.status().message();
    EXPECT_NE(ds.status().message().find(substr), std::string::npos) << ds.status().message();
  };
  expect_error(write_tokens("short.bin", iota_tokens<uint16_t>(4)), "too few");
  expect_error(write_tokens("empty.bin", std::vector<uint16_t>{}), "too few");
  expect_error((dir_ / "missing.bin").string(), "no such file");
  // Odd byte count for uint16.
  std::string odd = (dir_ / "odd.bin").string();
  ASSERT_TRUE(write_file_atomically(*storage_, odd, std::string(11, '\1')).ok());
  expect_error(odd, "whole number");
  // llm.c header count disagreeing with the file size (truncated file).
  expect_error(write_tokens("trunc.bin", iota_tokens<uint16_t>(20), 1, 30), "llm.c header says 30");
  expect_error(write_tokens("v7.bin", iota_tokens<uint16_t>(20), 7), "version 7");
  EXPECT_FALSE(TokenDataset::open(*storage_, odd, opts(0, 100)).ok());
  EXPECT_FALSE(TokenDataset::open(*storage_, odd, opts(4, 0)).ok());
}

TEST_F(TokenDatasetTest, OutOfVocabularyNeverReachesTheModel) {
  std::vector<uint16_t> tokens = iota_tokens<uint16_t>(21);
  tokens[13] = 100;  // == vocab_size
  const std::string p = write_tokens("oov.bin", tokens);
  auto ds = TokenDataset::open(*storage_, p, opts(4, 100));
  ASSERT_TRUE(ds.ok());
  std::vector<int32_t> in(4), tgt(4);
  EXPECT_TRUE(ds->get_sample(0, in.data(), tgt.data()).ok());
  Status s = ds->get_sample(3, in.data(), tgt.data());  // tokens 12..16
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id 100 at position 13"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(p), std::string::npos);
  // Sample 2 (tokens 8..12) has target token 12 only, so it is fine; the upfront scan is not.
  EXPECT_TRUE(ds->get_sample(2, in.data(), tgt.data()).ok());
  auto strict = TokenDataset::open(*storage_, p, opts(4, 100, std::nullopt, true));
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("position 13"), std::string::npos);
}

// A target whose token has mask 0 is kIgnoreTarget (-100, HF's ignored label); inputs are not
// masked. The mask is indexed by token position, so sample g's targets use mask[g*T+1 .. g*T+T].
TEST_F(TokenDatasetTest, MaskTurnsTargetsIntoTheIgnoreIndex) {
  EXPECT_EQ(kIgnoreTarget, -100);
  const std::string p = write_tokens("a.tokens", iota_tokens<uint16_t>(9));
  const std::vector<uint8_t> mask = {1, 0, 0, 1, 1, 0, 1, 1, 1};
  const std::string mp = write_tokens("a.mask", mask);
  TokenDatasetOptions o = opts(4, 100);
  o.mask_path = mp;
  auto ds = TokenDataset::open(*storage_, p, o);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_TRUE(ds->has_mask());
  std::vector<int32_t> in(4), tgt(4);
  ASSERT_TRUE(ds->get_sample(0, in.data(), tgt.data()).ok());
  EXPECT_EQ(in, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(tgt, (std::vector<int32_t>{-100, -100, 3, 4}));
  ASSERT_TRUE(ds->get_sample(1, in.data(), tgt.data()).ok());
  EXPECT_EQ(in, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(tgt, (std::vector<int32_t>{-100, 6, 7, 8}));

  // One mask byte per token, exactly.
  o.mask_path = write_tokens("short.mask", std::vector<uint8_t>(8, 1));
  auto bad = TokenDataset::open(*storage_, p, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("short.mask: 8 bytes"), std::string::npos)
      << bad.status().message();
}

TEST_F(TokenDatasetTest, ReadFaultSurfaces) {
  const std::string p = write_tokens("a.bin", iota_tokens<uint16_t>(23));
  FaultInjectingStorage faulty(storage_);
  auto ds = TokenDataset::open(faulty, p, opts(4, 100));
  ASSERT_TRUE(ds.ok());
  faulty.fail_nth(FaultOp::kRead, 1);
  std::vector<int32_t> in(4), tgt(4);
  EXPECT_EQ(ds->get_sample(0, in.data(), tgt.data()).code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace zero
