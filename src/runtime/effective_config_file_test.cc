// OUTPUT_DIR/ds_config.effective.json: the resolved batch triad (not "auto"), an atomic write
// that parses back, and the one-line summary (issue 13 item 18).
#include "runtime/effective_config_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace zero::runtime {
namespace {

namespace fs = std::filesystem;
using config::Json;
using config::Origin;

config::EffectiveConfig hf_style_config() {
  // What the HF integration's templates hold: the batch left to the flags.
  Json doc = {{"train_batch_size", "auto"},
              {"train_micro_batch_size_per_gpu", "auto"},
              {"gradient_accumulation_steps", 4},
              {"bf16", {{"enabled", true}}},
              {"zero_optimization", {{"stage", 3}}},
              {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
              {"scheduler", {{"type", "WarmupDecayLR"}}}};
  auto eff = config::build_effective_config(doc);
  EXPECT_TRUE(eff.ok()) << eff.status().to_string();
  return *eff;
}

TEST(EffectiveConfigFile, BatchTriadIsResolved) {
  config::EffectiveConfig eff = hf_style_config();
  record_batch_triad(eff, 32, 4, 4);
  EXPECT_EQ(eff.json["train_batch_size"], 32);
  EXPECT_EQ(eff.json["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(eff.json["gradient_accumulation_steps"], 4);
  EXPECT_EQ(eff.origin("train_batch_size"), Origin::kDerived);
  EXPECT_EQ(eff.origin("train_micro_batch_size_per_gpu"), Origin::kDerived);
  EXPECT_EQ(eff.origin("gradient_accumulation_steps"), Origin::kFile);  // written in the file
}

TEST(EffectiveConfigFile, WrittenAtomicallyAndParses) {
  const fs::path dir =
      fs::temp_directory_path() / ("zero_effective_config_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  config::EffectiveConfig eff = hf_style_config();
  record_batch_triad(eff, 32, 4, 4);
  for (int i = 0; i < 2; ++i) {  // the second write replaces the first
    Status s = write_effective_config(*default_storage(), dir.string(), eff);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::ifstream in(dir / "ds_config.effective.json");
  std::stringstream text;
  text << in.rdbuf();
  Json back = Json::parse(text.str());
  EXPECT_EQ(back["train_batch_size"], 32);
  EXPECT_EQ(back["zero_optimization"]["stage"], 3);
  EXPECT_FALSE(fs::exists(dir / "ds_config.effective.json.tmp"));
  fs::remove_all(dir);
}

TEST(EffectiveConfigFile, SummaryNamesWhatAReaderChecksFirst) {
  config::EffectiveConfig eff = hf_style_config();
  record_batch_triad(eff, 32, 4, 4);
  const std::string line = effective_config_summary(eff, 2);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find("ZeRO stage 3"), std::string::npos) << line;
  EXPECT_NE(line.find("bf16"), std::string::npos) << line;
  EXPECT_NE(line.find("AdamW lr 0.001"), std::string::npos) << line;
  EXPECT_NE(line.find("WarmupDecayLR"), std::string::npos) << line;
  EXPECT_NE(line.find("train_batch_size 32 (micro 4 x accumulation 4 x world 2)"),
            std::string::npos)
      << line;
}

}  // namespace
}  // namespace zero::runtime
