// Checkpoints across real ranks (run under mpirun -np N):
//   Resume.*   for every stage at this world size: save at step 20 of the 60-step curve, restore a
//              fresh engine from it and continue: steps 21–60 equal the uninterrupted run's losses
//              exactly. The checkpoint read back equals the engine's partitions bitwise, and its
//              consolidated HF fp32 weights equal them too.
//   Reshard.*  two mpirun invocations chained by ctest fixtures: Save writes a checkpoint at step
//              20 (world = -np, stage = ZERO_CKPT_STAGE) into ZERO_CKPT_DIR; Resume loads it at
//              another world size / stage and continues within 1e-5 relative of the single-rank
//              uninterrupted curve.
#include <gtest/gtest.h>

#include <unistd.h>
#include "mpi_test_main.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/storage.h"
#include "data/batch_sampler.h"
#include "data/token_dataset.h"
#include "model/hf_checkpoint.h"
#include "runtime/engine.h"

namespace zero {
namespace {

Communicator* g_world = nullptr;
const std::string kGolden = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/";
constexpr int kSaveStep = 20;
constexpr int kSteps = 60;

struct RunConfig {
  int stage = 0;
  int64_t tbs = 4;
  int64_t micro_batch = 4;
};

std::unique_ptr<runtime::Engine> make_engine(const RunConfig& c, Communicator* comm,
                                             std::unique_ptr<model::HfWeightReader>& reader) {
  auto config = model::load_model_config(kGolden + "gpt2_tiny");
  ZERO_CHECK(config.ok(), config.status().to_string());
  std::ifstream f(kGolden + "gpt2_tiny/curve60.json");
  nlohmann::json ref = nlohmann::json::parse(f);
  const nlohmann::json& sched = ref["lr_scheduler"];
  runtime::EngineOptions o;
  o.model_config = *config;
  auto spec = optim::optimizer_spec_from_json("AdamW", {{"lr", sched["warmup_max_lr"]},
                                                        {"betas", ref["betas"]},
                                                        {"eps", ref["eps"]},
                                                        {"weight_decay", ref["weight_decay"]}});
  ZERO_CHECK(spec.ok(), spec.status().to_string());
  o.optimizer = *spec;
  auto schedule = optim::LrSchedule::from_json("WarmupDecayLR",
                                               {{"warmup_min_lr", sched["warmup_min_lr"]},
                                                {"warmup_max_lr", sched["warmup_max_lr"]},
                                                {"warmup_num_steps", sched["warmup_num_steps"]},
                                                {"total_num_steps", sched["total_num_steps"]},
                                                {"warmup_type", sched["warmup_type"]}},
                                               spec->lr);
  ZERO_CHECK(schedule.ok(), schedule.status().to_string());
  o.schedule = *schedule;
  o.gradient_clipping = ref["gradient_clipping"].get<double>();
  o.zero.stage = c.stage;
  model::ModelLayout layout(o.model_config);
  auto r = model::HfWeightReader::open(*default_storage(), kGolden + "gpt2_tiny", layout);
  ZERO_CHECK(r.ok(), r.status().to_string());
  reader = std::move(*r);
  model::HfWeightReader* rp = reader.get();
  auto engine = runtime::Engine::create(
      std::move(o),
      [rp](int u, int64_t b, int64_t e, float* dst) { return rp->read_unit_range(u, b, e, dst); },
      comm);
  ZERO_CHECK(engine.ok(), engine.status().to_string());
  return std::move(*engine);
}

// Steps [from, to) of the curve on `engine`; `on_step(s)` runs after step s (0-based).
std::vector<double> run_steps(runtime::Engine& engine, const RunConfig& c, Communicator* comm,
                              int from, int to, const std::function<void(int)>& on_step = {}) {
  const int world = comm ? comm->world_size() : 1;
  const int rank = comm ? comm->rank() : 0;
  const int64_t T = 16;
  TokenDatasetOptions dopts;
  dopts.block_size = T;
  dopts.vocab_size = 67;
  auto data = TokenDataset::open(*default_storage(), kGolden + "tokens.bin", dopts);
  ZERO_CHECK(data.ok(), data.status().to_string());
  BatchSamplerConfig sc;
  sc.num_samples = data->num_samples();
  sc.train_batch_size = c.tbs;
  sc.micro_batch_size = c.micro_batch;
  sc.world_size = world;
  auto sampler = GlobalBatchSampler::create(sc);
  ZERO_CHECK(sampler.ok(), sampler.status().to_string());
  std::vector<double> losses;
  for (int s = from; s < to; ++s) {
    std::vector<runtime::MicroBatch> mbs;
    for (int64_t m = 0; m < sampler->grad_accum_steps(); ++m) {
      runtime::MicroBatch mb;
      mb.batch = c.micro_batch;
      mb.seq = T;
      mb.tokens.resize(static_cast<size_t>(c.micro_batch * T));
      mb.targets.resize(mb.tokens.size());
      std::vector<int64_t> samples = sampler->micro_batch(s, m, rank);
      for (size_t i = 0; i < samples.size(); ++i) {
        ZERO_CHECK(
            data->get_sample(samples[i], mb.tokens.data() + i * T, mb.targets.data() + i * T).ok());
      }
      mbs.push_back(std::move(mb));
    }
    auto r = engine.train_step(mbs);
    ZERO_CHECK(r.ok(), r.status().to_string());
    losses.push_back(r->loss);
    if (on_step) on_step(s);
  }
  return losses;
}

std::vector<checkpoint::UnitPartition> partitions(const runtime::Engine& e) {
  std::vector<checkpoint::UnitPartition> p;
  for (int u = 0; u < e.layout().num_units(); ++u) {
    p.push_back({e.partition_begin(u),
                 e.partition_numel(u),
                 e.master(u),
                 e.exp_avg(u),
                 e.exp_avg_sq(u),
                 {}});
  }
  return p;
}

// What the trainer would do at a save step (the sampler position is the step number here).
Status save(runtime::Engine& e, Communicator& comm, const std::string& out, int stage) {
  checkpoint::SaveRequest r;
  r.out_dir = out;
  r.tag = checkpoint::default_tag(e.global_step());
  r.layout = &e.layout();
  r.shard_layout = &e.shard_layout();
  r.stage = stage;
  r.partitions = partitions(e);
  r.state = {{"global_step", e.global_step()},
             {"optimizer_updates", e.optimizer_updates()},
             {"schedule", e.schedule().state()},
             {"loss_scaler", e.loss_scaler().state()},
             {"sampler", {{"next_step", e.global_step()}}}};
  r.tag_validation = checkpoint::TagValidation::kFail;
  return save_checkpoint(*default_storage(), comm, r).status();
}

// ... and at resume.
Status restore(runtime::Engine& e, const checkpoint::LoadedCheckpoint& ck) {
  ZERO_RETURN_IF_ERROR(ck.check_compatible(e.layout()));
  runtime::Engine::RestoreState st;
  st.global_step = ck.state()["global_step"].get<int64_t>();
  st.optimizer_updates = ck.state()["optimizer_updates"].get<int64_t>();
  st.schedule_state = ck.state()["schedule"];
  st.loss_scaler_state = ck.state()["loss_scaler"];
  st.read_partition = [&ck](int u, int64_t b, int64_t end, float* m, float* v1, float* v2) {
    return ck.read_partition(u, b, end, m, v1, v2);
  };
  return e.restore(st);
}

// A directory every rank agrees on: rank 0 creates it and broadcasts its name.
std::string shared_temp_dir(Communicator& comm) {
  char name[256] = {};
  if (comm.rank() == 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zero_ckpt_mpi_XXXXXX").string();
    ZERO_CHECK(tmpl.size() < sizeof name, tmpl);
    std::strcpy(name, tmpl.c_str());
    ZERO_CHECK(::mkdtemp(name) != nullptr, name);
  }
  ZERO_CHECK(comm.broadcast(name, sizeof name / 4, DType::kF32, 0).ok(), "broadcast");
  return name;
}

int64_t tbs_for(int world) { return 4 % world == 0 ? 4 : 2 * world; }

class Resume : public ::testing::TestWithParam<int> {};

TEST_P(Resume, ContinuesBitIdentically) {
  Communicator& comm = *g_world;
  const int world = comm.world_size();
  RunConfig c;
  c.stage = GetParam();
  c.tbs = tbs_for(world);
  c.micro_batch = c.tbs / world;
  const std::string out = shared_temp_dir(comm);

  std::unique_ptr<model::HfWeightReader> reader;
  auto first = make_engine(c, &comm, reader);
  std::vector<double> want = run_steps(*first, c, &comm, 0, kSteps, [&](int s) {
    if (s + 1 != kSaveStep) return;
    Status st = save(*first, comm, out, c.stage);
    ZERO_CHECK(st.ok(), st.to_string());
    // The checkpoint holds this rank's partition bit for bit (real elements; padding reads 0).
    auto ck = checkpoint::open_checkpoint(*default_storage(), out);
    ZERO_CHECK(ck.ok(), ck.status().to_string());
    for (int u = 0; u < first->layout().num_units(); ++u) {
      const int64_t b = first->partition_begin(u), n = first->partition_numel(u);
      const int64_t real = std::clamp<int64_t>(first->layout().unit(u).numel - b, 0, n);
      std::vector<float> m(n), v1(n), v2(n);
      ZERO_CHECK((*ck)->read_partition(u, b, b + n, m.data(), v1.data(), v2.data()).ok(), "read");
      EXPECT_EQ(0, std::memcmp(m.data(), first->master(u), real * 4)) << "unit " << u;
      EXPECT_EQ(0, std::memcmp(v1.data(), first->exp_avg(u), real * 4)) << "unit " << u;
      EXPECT_EQ(0, std::memcmp(v2.data(), first->exp_avg_sq(u), real * 4)) << "unit " << u;
    }
  });

  auto ck = checkpoint::open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->world_size(), world);
  EXPECT_EQ((*ck)->stage(), c.stage);
  std::unique_ptr<model::HfWeightReader> reader2;
  auto second = make_engine(c, &comm, reader2);
  Status st = restore(*second, **ck);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(second->global_step(), kSaveStep);
  std::vector<double> got = run_steps(*second, c, &comm, kSaveStep, kSteps);
  ASSERT_EQ(got.size() + kSaveStep, want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i + kSaveStep])
        << "stage " << c.stage << " world " << world << ": step " << i + kSaveStep + 1;
  }

  // Consolidated fp32 (rank 0) equals what the checkpoint holds (= the engine's partitions above).
  if (comm.rank() == 0) {
    const std::string hf = out + "/fp32";
    ASSERT_TRUE(checkpoint::consolidate_to_hf(*default_storage(), **ck, hf, 20000).ok());
    auto hr = model::HfWeightReader::open(*default_storage(), hf, second->layout());
    ASSERT_TRUE(hr.ok()) << hr.status().to_string();
    for (int u = 0; u < second->layout().num_units(); ++u) {
      const int64_t n = second->layout().unit(u).numel;
      std::vector<float> a(n), b(n);
      ASSERT_TRUE((*hr)->read_unit_range(u, 0, n, a.data()).ok());
      ASSERT_TRUE((*ck)->read_partition(u, 0, n, b.data(), nullptr, nullptr).ok());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * 4)) << "unit " << u;
    }
  }
  // The 16-bit model save gathers unit by unit on every rank; rank 0 writes.
  st = checkpoint::save_model_weights(*default_storage(), comm, out + "/bf16", second->layout(),
                                      second->shard_layout(), partitions(*second), DType::kBF16);
  ASSERT_TRUE(st.ok()) << st.to_string();
  if (comm.rank() == 0) {
    EXPECT_TRUE(std::filesystem::exists(out + "/bf16/config.json"));
  }
  ASSERT_TRUE(comm.barrier().ok());  // nobody reads `out` any more
  if (comm.rank() == 0) std::filesystem::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(EveryStage, Resume, ::testing::Values(0, 1, 2, 3));

// The single-rank uninterrupted curve for a global batch.
std::vector<double> oracle(int64_t tbs) {
  RunConfig c;
  c.tbs = tbs;
  c.micro_batch = tbs;
  std::unique_ptr<model::HfWeightReader> reader;
  auto e = make_engine(c, nullptr, reader);
  return run_steps(*e, c, nullptr, 0, kSteps);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

RunConfig reshard_config() {
  RunConfig c;
  c.stage = std::atoi(env("ZERO_CKPT_STAGE").c_str());
  c.tbs = std::atoi(env("ZERO_CKPT_TBS").c_str());
  if (c.tbs <= 0) c.tbs = 4;
  c.micro_batch = c.tbs / g_world->world_size();
  return c;
}

TEST(Reshard, Save) {
  const std::string out = env("ZERO_CKPT_DIR");
  if (out.empty()) GTEST_SKIP() << "ZERO_CKPT_DIR not set (run by the ctest fixture)";
  Communicator& comm = *g_world;
  RunConfig c = reshard_config();
  if (comm.rank() == 0) std::filesystem::remove_all(out);
  ASSERT_TRUE(comm.barrier().ok());
  std::unique_ptr<model::HfWeightReader> reader;
  auto e = make_engine(c, &comm, reader);
  run_steps(*e, c, &comm, 0, kSaveStep);
  Status st = save(*e, comm, out, c.stage);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

TEST(Reshard, Resume) {
  const std::string out = env("ZERO_CKPT_DIR");
  if (out.empty()) GTEST_SKIP() << "ZERO_CKPT_DIR not set (run by the ctest fixture)";
  Communicator& comm = *g_world;
  RunConfig c = reshard_config();
  auto ck = checkpoint::open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  std::unique_ptr<model::HfWeightReader> reader;
  auto e = make_engine(c, &comm, reader);
  Status st = restore(*e, **ck);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<double> got = run_steps(*e, c, &comm, kSaveStep, kSteps);
  const std::vector<double> want = oracle(c.tbs);
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i + kSaveStep];
    ASSERT_NEAR(got[i], w, 1e-5 * std::fabs(w))
        << "saved at world " << (*ck)->world_size() << " stage " << (*ck)->stage()
        << ", resumed at world " << comm.world_size() << " stage " << c.stage << ": step "
        << i + kSaveStep + 1;
  }
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  return zero::testing::run_mpi_tests(
      argc, argv, 120'000,
      [](zero::MpiRuntime& /*runtime*/, zero::MpiCommunicator& world) { zero::g_world = &world; });
}
