// Tests for recognising DeepSpeed checkpoint directories (layout from DeepSpeed's
// engine.save_checkpoint: `latest`, zero_to_fp32.py, <tag>/*_model_states.pt, *_optim_states.pt).
#include "checkpoint/deepspeed_dir.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;

void touch(const fs::path& p, const std::string& text = "x") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string make_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(DeepSpeedDir, Stage2SaveDirectoryIsNamedWithTheConversionCommand) {
  const std::string dir = make_dir("ds_stage2");
  touch(fs::path(dir) / "latest", "global_step10\n");
  touch(fs::path(dir) / "zero_to_fp32.py");
  touch(fs::path(dir) / "global_step10" / "mp_rank_00_model_states.pt");
  touch(fs::path(dir) / "global_step10" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt");
  touch(fs::path(dir) / "global_step10" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  auto ds = find_deepspeed_checkpoint(*default_storage(), dir);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_TRUE(ds->found);
  EXPECT_EQ(ds->tag, "global_step10");
  EXPECT_EQ(ds->model_files.size(), 1u);
  EXPECT_EQ(ds->optim_files.size(), 2u);
  EXPECT_TRUE(ds->has_zero_to_fp32);

  // What --resume_from_checkpoint / `zero ckpt` get: open_checkpoint refuses with the command.
  auto opened = open_checkpoint(*default_storage(), dir);
  ASSERT_FALSE(opened.ok());
  const std::string msg = opened.status().message();
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  for (const char* needle :
       {"DeepSpeed checkpoint", "tag global_step10", "mp_rank_00_model_states.pt",
        "2 ZeRO optimizer-state files", "zero_to_fp32.py", "--tag global_step10",
        "--safe_serialization", "--model OUT_DIR"}) {
    EXPECT_NE(msg.find(needle), std::string::npos) << needle << " in: " << msg;
  }
  EXPECT_EQ(msg.find("manifest.json"), std::string::npos) << msg;
}

TEST(DeepSpeedDir, TagDirectoryAndStage3Files) {
  const std::string dir = make_dir("ds_stage3");
  touch(fs::path(dir) / "zero_pp_rank_0_mp_rank_00_model_states.pt");
  touch(fs::path(dir) / "zero_pp_rank_1_mp_rank_00_model_states.pt");
  touch(fs::path(dir) / "zero_pp_rank_0_mp_rank_00_optim_states.pt");
  auto ds = find_deepspeed_checkpoint(*default_storage(), dir);
  ASSERT_TRUE(ds.ok());
  EXPECT_TRUE(ds->found);
  EXPECT_EQ(ds->tag, "");
  EXPECT_EQ(ds->model_files.size(), 2u);
  Status s = refuse_deepspeed_checkpoint(*default_storage(), dir);
  EXPECT_NE(s.message().find("2 model-state files"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("zero_to_fp32.py (from DeepSpeed)"), std::string::npos) << s.message();
}

TEST(DeepSpeedDir, OtherDirectoriesAreNotDeepSpeed) {
  // Ours: `latest` naming a tag directory with manifest.json.
  const std::string ours = make_dir("zero_ckpt");
  touch(fs::path(ours) / "latest", "step_5");
  touch(fs::path(ours) / "step_5" / "manifest.json", "{}");
  auto ds = find_deepspeed_checkpoint(*default_storage(), ours);
  ASSERT_TRUE(ds.ok());
  EXPECT_FALSE(ds->found);
  EXPECT_TRUE(refuse_deepspeed_checkpoint(*default_storage(), ours).ok());
  // An empty directory: not DeepSpeed, and open_checkpoint's own message stays.
  const std::string empty = make_dir("empty_ckpt");
  EXPECT_FALSE(find_deepspeed_checkpoint(*default_storage(), empty)->found);
  auto opened = open_checkpoint(*default_storage(), empty);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("no checkpoint here"), std::string::npos);
}

}  // namespace
}  // namespace zero::checkpoint
