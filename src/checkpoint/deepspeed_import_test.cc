// DeepSpeed checkpoints made by DeepSpeed itself (tests/fixtures/checkpoint/deepspeed/, written by
// tools/golden/make_deepspeed_ckpt.py with DeepSpeed 0.14.4 and 0.19.8): read without pickle and
// imported as our checkpoint; the master weights and Adam moments must equal DeepSpeed's own
// per-parameter view of the same checkpoint (its universal-checkpoint conversion, in
// expected.safetensors), bit for bit. "NAME/universal" reads ds_to_universal's output of NAME.
#include "checkpoint/deepspeed_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/deepspeed_state.h"
#include "core/safetensors.h"
#include "model/param_layout.h"

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fixture(const std::string& name) {
  return std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/checkpoint/deepspeed/" + name;
}

// The fixture directory holding expected.json etc. (the parent of a universal/ source).
std::string fixture_home(const std::string& param) {
  return fixture(param.substr(0, param.find('/')));
}

std::string fresh_dir(std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  const fs::path dir = fs::path(::testing::TempDir()) / ("ds_import_" + name);
  fs::remove_all(dir);
  return dir.string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

class DeepSpeedFixture : public ::testing::TestWithParam<std::string> {};

DType fixture_dtype(const json& expected) {
  const std::string dtype = expected.value("dtype", "fp32");
  return dtype == "bf16" ? DType::kBF16 : dtype == "fp16" ? DType::kF16 : DType::kF32;
}

TEST_P(DeepSpeedFixture, StateEqualsDeepSpeedsUniversalCheckpoint) {
  const std::string dir = fixture(GetParam());
  const std::string home = fixture_home(GetParam());
  const json expected = read_json(home + "/expected.json");
  auto st = read_deepspeed_state(*default_storage(), dir);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  if (GetParam().ends_with("/universal"))
    EXPECT_EQ(st->layout, "universal");
  else if (GetParam() == "gpt2_tiny_bf16_stage1_w2")
    EXPECT_EQ(st->layout, "bf16_optimizer");  // bf16 at stage 1 with fp32 gradient accumulation
  else
    EXPECT_EQ(st->layout, "zero");
  EXPECT_EQ(st->stage, expected["stage"].get<int>());
  EXPECT_EQ(st->world_size, expected["world_size"].get<int>());
  EXPECT_EQ(st->global_steps, expected["global_steps"].get<int64_t>());
  const int64_t skipped = expected.value("skipped_steps", int64_t{0});
  EXPECT_EQ(st->optimizer_step, expected["global_steps"].get<int64_t>() - skipped);
  EXPECT_EQ(st->optimizer_type, "adamw");
  EXPECT_DOUBLE_EQ(st->beta1, 0.9);
  EXPECT_DOUBLE_EQ(st->beta2, 0.95);
  EXPECT_EQ(st->lr_scheduler.value("last_batch_iteration", -1), st->global_steps - 1);
  auto ref = SafetensorsReader::open(*default_storage(), home + "/expected.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  ASSERT_EQ(st->params.size() * 3, ref->tensors().size());
  for (const auto& [name, p] : st->params) {
    const std::pair<const char*, const std::vector<float>*> kinds[] = {
        {"master", &p.master}, {"exp_avg", &p.exp_avg}, {"exp_avg_sq", &p.exp_avg_sq}};
    for (const auto& [kind, got] : kinds) {
      const std::string key = name + "." + kind;
      const SafetensorsEntry* e = ref->find(key);
      ASSERT_NE(e, nullptr) << key;
      std::vector<float> want(static_cast<size_t>(e->numel()));
      ASSERT_TRUE(ref->read_f32(key, want.data(), e->numel()).ok());
      ASSERT_EQ(*got, want) << key;  // bitwise: both are DeepSpeed's fp32 values
    }
  }
}

TEST_P(DeepSpeedFixture, ImportWritesOurCheckpointWithTheMoments) {
  const std::string dir = fixture(GetParam());
  const std::string home = fixture_home(GetParam());
  const json expected = read_json(home + "/expected.json");
  auto config = model::load_model_config(home + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const std::string out = fresh_dir(GetParam());
  auto r = import_deepspeed_checkpoint(*default_storage(), {dir, "", out}, *config);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ASSERT_TRUE((*ck)->verify().ok());
  EXPECT_EQ((*ck)->state()["global_step"], 3);
  EXPECT_EQ((*ck)->state()["optimizer_updates"], 3 - expected.value("skipped_steps", 0));
  EXPECT_EQ((*ck)->state()["schedule"]["type"], "WarmupLR");
  EXPECT_EQ((*ck)->state()["schedule"]["last_batch_iteration"], 2);
  if (expected.contains("loss_scaler")) {  // fp16: DeepSpeed's dynamic loss scaler, as it was
    const json& want = expected["loss_scaler"];
    const json& got = (*ck)->state()["loss_scaler"];
    EXPECT_EQ(got["cur_scale"].get<double>(), want["cur_scale"].get<double>());
    EXPECT_EQ(got["cur_iter"], want["cur_iter"]);
    EXPECT_EQ(got["last_overflow_iter"], want["last_overflow_iter"]);
    EXPECT_EQ(got["cur_hysteresis"], want["cur_hysteresis"]);
  }
  const RunIdentity run{"adamw", 0.9, 0.95, fixture_dtype(expected)};
  EXPECT_TRUE((*ck)->check_run(run).ok()) << (*ck)->check_run(run).to_string();
  // Every parameter, in our (out, in) layout, against DeepSpeed's HF-layout reference.
  auto ref = SafetensorsReader::open(*default_storage(), home + "/expected.safetensors");
  ASSERT_TRUE(ref.ok());
  const model::ModelLayout layout(*config);
  ASSERT_TRUE((*ck)->check_compatible(layout).ok());
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t n = layout.unit(u).numel;
    std::vector<float> m(n), v1(n), v2(n);
    ASSERT_TRUE((*ck)->read_partition(u, 0, n, m.data(), v1.data(), v2.data()).ok());
    for (const model::ParamSpec& spec : layout.unit(u).params) {
      std::vector<float> want(static_cast<size_t>(spec.numel()));
      ASSERT_TRUE(ref->read_f32(spec.name + ".exp_avg_sq", want.data(), spec.numel()).ok());
      const int64_t rows = spec.shape[0], cols = spec.shape.rank() == 2 ? spec.shape[1] : 1;
      for (int64_t i = 0; i < spec.numel(); ++i) {
        // HF Conv1D [in, out] -> ours (out, in).
        const int64_t hf = spec.hf_transposed ? (i % cols) * rows + i / cols : i;
        ASSERT_EQ(v2[static_cast<size_t>(spec.offset + i)], want[static_cast<size_t>(hf)])
            << spec.name << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RealDeepSpeed, DeepSpeedFixture,
                         ::testing::Values("gpt2_tiny_stage2_w1", "gpt2_tiny_stage3_w1",
                                           "gpt2_tiny_stage1_w2", "gpt2_tiny_stage3_w2",
                                           "gpt2_tiny_bf16_stage1_w2", "gpt2_tiny_bf16_stage2_w2",
                                           "gpt2_tiny_bf16_stage3_w1", "gpt2_tiny_fp16_stage2_w1",
                                           "llama_tiny_stage3_w2", "llama_tiny_bf16_stage2_w1",
                                           "gpt2_tiny_bf16_stage2_w2/universal"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           return name;
                         });

TEST(DeepSpeedImport, AnotherModelIsRefusedNamingTheParameterAndWritesNothing) {
  const std::string dir = fixture("gpt2_tiny_stage2_w1");
  auto config = model::load_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok());
  json j = read_json(dir + "/config.json");
  j["n_layer"] = 3;
  auto bigger = model::model_config_from_json(j, "test");
  ASSERT_TRUE(bigger.ok());
  const std::string out = fresh_dir("another_model");
  auto r = import_deepspeed_checkpoint(*default_storage(), {dir, "", out}, *bigger);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("transformer.h.2."), std::string::npos)
      << r.status().to_string();
  EXPECT_FALSE(fs::exists(out));
}

TEST(DeepSpeedImport, ADirectoryThatIsNotDeepSpeedsIsNotFound) {
  auto st = read_deepspeed_state(*default_storage(), fresh_dir("empty"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound);
}

// A write that fails (disk full at the first byte of the rank file) leaves no OUT behind: the
// import made it, so it removes it.
TEST(DeepSpeedImport, AFailedWriteLeavesNoOutputDirectory) {
  const std::string dir = fixture("gpt2_tiny_stage2_w1");
  auto config = model::load_model_config(dir + "/config.json");
  ASSERT_TRUE(config.ok());
  const std::string out = fresh_dir("failed_write");
  FaultInjectingStorage storage(default_storage());
  storage.disk_full_after(0);
  auto r = import_deepspeed_checkpoint(storage, {dir, "", out}, *config);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(out)) << r.status().to_string();
}

// A universal checkpoint copied with one parameter's file missing, then with one of another size:
// refused naming the file.
TEST(DeepSpeedImport, UniversalCheckpointWithAMissingOrWrongSizedFileIsRefused) {
  const fs::path copy = fs::path(fresh_dir("universal_broken"));
  fs::copy(fixture("gpt2_tiny_bf16_stage2_w2/universal"), copy, fs::copy_options::recursive);
  const fs::path param = copy / "zero" / "transformer.h.1.mlp.c_fc.bias";
  fs::remove(param / "exp_avg_sq.pt");
  auto st = read_deepspeed_state(*default_storage(), copy.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("transformer.h.1.mlp.c_fc.bias/exp_avg_sq.pt: missing"),
            std::string::npos)
      << st.status().to_string();
  fs::copy_file(copy / "zero" / "transformer.ln_f.bias" / "exp_avg_sq.pt", param / "exp_avg_sq.pt");
  st = read_deepspeed_state(*default_storage(), copy.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("exp_avg_sq.pt: 6 elements, but the model states give "
                                         "the parameter 24"),
            std::string::npos)
      << st.status().to_string();
}

}  // namespace
}  // namespace zero::checkpoint
