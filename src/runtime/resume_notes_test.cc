// Resume notes (issue 13 item 19): the banner of a resumed run names the checkpoint, not "random
// init"; a changed --max_steps is reported with the schedule it changes; the summary counts the
// steps this run did.
#include "runtime/resume_notes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "comm/self_communicator.h"
#include "model/hf_checkpoint.h"

namespace zero::runtime {
namespace {

namespace fs = std::filesystem;

TEST(ResumeNotes, SummaryCountsTheStepsThisRunDid) {
  EXPECT_EQ(steps_summary(0, 8), "8 steps");
  EXPECT_EQ(steps_summary(4, 8), "4 steps (5..8, resumed at step 4)");
}

TEST(ResumeNotes, BannerAndScheduleChangeOfAResumedRun) {
  auto config =
      model::load_model_config(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/gpt2_tiny");
  ASSERT_TRUE(config.ok());
  model::ModelLayout layout(*config);
  sharding::ShardLayout shards(layout, 1, 0);
  std::vector<std::vector<float>> buf;
  checkpoint::SaveRequest r;
  const fs::path out =
      fs::temp_directory_path() / ("zero_resume_notes_" + std::to_string(::getpid()));
  fs::remove_all(out);
  r.out_dir = out.string();
  r.tag = "global_step4";
  r.layout = &layout;
  r.shard_layout = &shards;
  for (int u = 0; u < layout.num_units(); ++u) {
    buf.emplace_back(static_cast<size_t>(shards.unit(u).padded_numel), 0.0f);
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    r.partitions.push_back(
        {0, shards.unit(u).padded_numel, buf[u].data(), buf[u].data(), buf[u].data(), {}});
  }
  r.state = {{"global_step", 4}, {"max_steps", 8}};
  r.effective_config = {
      {"scheduler", {{"type", "WarmupDecayLR"}, {"params", {{"total_num_steps", 8}}}}}};
  SelfCommunicator comm;
  ASSERT_TRUE(checkpoint::save_checkpoint(*default_storage(), comm, r).ok());
  auto ck = checkpoint::open_checkpoint(*default_storage(), out.string());
  ASSERT_TRUE(ck.ok());

  const std::string banner = model_banner("preset:gpt2-tiny (random init, seed 42)", ck->get());
  EXPECT_EQ(banner.find("random init"), std::string::npos) << banner;
  EXPECT_NE(banner.find("global_step4"), std::string::npos) << banner;
  EXPECT_EQ(model_banner("preset:x (random init, seed 1)", nullptr),
            "preset:x (random init, seed 1)");

  EXPECT_TRUE(schedule_change_notes(**ck, r.effective_config, 8).empty());
  nlohmann::json longer = r.effective_config;
  longer["scheduler"]["params"]["total_num_steps"] = 12;
  auto notes = schedule_change_notes(**ck, longer, 12);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], "--max_steps is 12, the checkpoint was saved by a run of 8");
  EXPECT_NE(notes[1].find("total_num_steps changes from 8 to 12"), std::string::npos) << notes[1];
  EXPECT_NE(notes[1].find("from step 5"), std::string::npos) << notes[1];
  fs::remove_all(out);

  // An HF schedule (no scheduler block): its total is the run's steps.
  r.state["schedule"] = {{"type", "cosine"}, {"last_batch_iteration", 3}};
  r.effective_config = {{"scheduler", {{"type", nullptr}, {"params", nlohmann::json::object()}}}};
  ASSERT_TRUE(checkpoint::save_checkpoint(*default_storage(), comm, r).ok());
  auto hf = checkpoint::open_checkpoint(*default_storage(), out.string());
  ASSERT_TRUE(hf.ok());
  notes = schedule_change_notes(**hf, r.effective_config, 12);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("HF cosine schedule's total_num_steps changes from 8 to 12"),
            std::string::npos)
      << notes[1];
  r.state["schedule"]["type"] = "constant_with_warmup";  // does not depend on the total
  ASSERT_TRUE(checkpoint::save_checkpoint(*default_storage(), comm, r).ok());
  auto cww = checkpoint::open_checkpoint(*default_storage(), out.string());
  ASSERT_TRUE(cww.ok());
  EXPECT_EQ(schedule_change_notes(**cww, r.effective_config, 12).size(), 1u);
  fs::remove_all(out);
}

}  // namespace
}  // namespace zero::runtime
