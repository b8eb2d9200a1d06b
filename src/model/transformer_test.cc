// Whole-model parity with PyTorch (tests/fixtures/golden, made by tools/golden/make_fixtures.py):
// logits, loss and every parameter gradient of tiny GPT-2 and Llama models from HF checkpoints.
#include "model/transformer.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/safetensors.h"
#include "core/storage.h"
#include "kernels/matmul/bf16_gemm.h"
#include "model/golden_testing.h"
#include "model/hf_checkpoint.h"
#include "model/init.h"

namespace zero::model {
namespace {

using testing::kGolden;
using testing::ResidentParams;

class ResidentGrads : public GradSink {
 public:
  explicit ResidentGrads(const ModelLayout& layout) {
    for (const auto& u : layout.units()) grads_.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  }
  float* grad_buffer(int u) override { return grads_[static_cast<size_t>(u)].data(); }
  void grad_ready(int u) override { ready_order_.push_back(u); }
  std::vector<std::vector<float>> grads_;
  std::vector<int> ready_order_;
};

using Loaded = testing::GoldenModel;
Loaded load(const std::string& name) { return testing::load_golden(name); }

std::vector<float> read_f32(const SafetensorsReader& r, const std::string& name) {
  const SafetensorsEntry* e = r.find(name);
  EXPECT_NE(e, nullptr) << name;
  std::vector<float> v(static_cast<size_t>(e ? e->numel() : 0));
  if (e) {
    EXPECT_TRUE(r.read_f32(name, v.data(), e->numel()).ok());
  }
  return v;
}

std::vector<int32_t> read_i32(const SafetensorsReader& r, const std::string& name) {
  const SafetensorsEntry* e = r.find(name);
  EXPECT_NE(e, nullptr) << name;
  std::vector<int32_t> v(static_cast<size_t>(e ? e->numel() : 0));
  if (e) {
    EXPECT_TRUE(r.read(name, v.data(), v.size() * 4).ok());
  }
  return v;
}

// A parameter's gradient in HF layout (GPT-2 Conv1D weights are stored transposed).
std::vector<float> to_hf_layout(const ParamSpec& p, const float* g) {
  std::vector<float> out(g, g + p.numel());
  if (!p.hf_transposed) return out;
  const int64_t rows = p.shape[0], cols = p.shape[1];
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < cols; ++i) out[static_cast<size_t>(i * rows + o)] = g[o * cols + i];
  return out;
}

class GoldenStep : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenStep, LogitsLossAndGradsMatchPyTorch) {
  Loaded l = load(GetParam());
  auto step =
      SafetensorsReader::open(*default_storage(), kGolden + GetParam() + "/step.safetensors");
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  std::vector<int32_t> tokens = read_i32(*step, "input_ids");
  std::vector<int32_t> labels = read_i32(*step, "labels");
  std::vector<float> ref_logits = read_f32(*step, "logits");
  const float ref_loss = read_f32(*step, "loss")[0];
  const int64_t B = 2, T = 16;

  for (bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "activation checkpointing" : "stored activations");
    Transformer model(l.config, TransformerOptions{checkpointing});
    ResidentParams params(l.units);
    float loss = model.forward(params, tokens.data(), labels.data(), B, T);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss));
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref_logits.size(); ++i) {
      max_err =
          std::max(max_err, static_cast<double>(std::fabs(model.logits()[i] - ref_logits[i])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref_logits[i])));
    }
    EXPECT_LT(max_err, 1e-4 * max_ref) << "logits";
    double worst_grad = 0;  // largest max|error| / ||ref|| over parameters

    ResidentGrads grads(model.layout());
    model.backward(params, grads, 1.0f / static_cast<float>(model.counted_targets()));
    // Every unit reported ready exactly once, last the embedding.
    ASSERT_EQ(static_cast<int>(grads.ready_order_.size()), model.layout().num_units());
    EXPECT_EQ(grads.ready_order_.back(), model.layout().embedding_unit());
    for (int u = 0; u < model.layout().num_units(); ++u) {
      for (const auto& p : model.layout().unit(u).params) {
        std::vector<float> ref = read_f32(*step, "grad." + p.name);
        std::vector<float> got =
            to_hf_layout(p, grads.grads_[static_cast<size_t>(u)].data() + p.offset);
        ASSERT_EQ(ref.size(), got.size()) << p.name;
        double norm = 0, err = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          norm += static_cast<double>(ref[i]) * ref[i];
          err = std::max(err, static_cast<double>(std::fabs(got[i] - ref[i])));
        }
        EXPECT_LT(err, 1e-4 * std::sqrt(norm) + 1e-9) << p.name;
        if (norm > 0) worst_grad = std::max(worst_grad, err / std::sqrt(norm));
      }
    }
    // The measured agreement, for the record.
    std::printf(
        "%s%s: vs PyTorch: loss rel %.2e, logits max err / max %.2e, grads max err / "
        "norm %.2e\n",
        GetParam().c_str(), checkpointing ? " (checkpointed)" : "",
        std::fabs(loss - ref_loss) / std::fabs(ref_loss), max_err / max_ref, worst_grad);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenStep,
                         ::testing::Values("gpt2_tiny", "llama_tiny", "llama_tiny_llama3",
                                           "mistral_tiny_sliding_yarn", "gpt2_tiny_by_layer",
                                           "qwen2_tiny_sliding"));

// Memory planning (runtime/memory_plan) relies on activation_bytes being exactly what a forward
// allocates.
TEST(Transformer, ActivationBytesPredictsTheAllocatedBuffers) {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "qwen3-tiny", "gemma3-tiny"}) {
    for (bool ckpt : {false, true}) {
      auto config = preset_model_config(name);
      ASSERT_TRUE(config.ok());
      TransformerOptions options;
      options.activation_checkpointing = ckpt;
      // The bf16 GEMM's operand scratch is counted too (on CPUs that have it).
      options.bf16_gemm = ckpt && kernels::cpu::Bf16Gemm::cpu_supported();
      Transformer model(*config, options);
      EXPECT_EQ(model.buffer_bytes(), 0);
      const int64_t B = 3, T = 5;
      std::vector<std::vector<float>> units;
      for (const auto& u : model.layout().units()) {
        units.emplace_back(static_cast<size_t>(u.numel), 0.01f);
      }
      ResidentParams params(std::move(units));
      std::vector<int32_t> tokens(static_cast<size_t>(B * T), 1);
      model.forward(params, tokens.data(), tokens.data(), B, T);
      EXPECT_EQ(model.buffer_bytes(), Transformer::activation_bytes(*config, options, B, T))
          << name << (ckpt ? " checkpointed" : "");
    }
  }
}

// The engine drives models through the Model interface; logits_at is the host copy of one row.
TEST(Transformer, ModelInterfaceLogitsAtCopiesOneRow) {
  auto config = preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  Transformer transformer(*config);
  Model& model = transformer;
  EXPECT_EQ(model.device(), Device::kCpu);
  std::vector<std::vector<float>> units;
  for (const auto& u : model.layout().units()) {
    std::vector<float> w(static_cast<size_t>(u.numel));
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * static_cast<float>((i * 7919) % 13) - 0.1f;
    units.push_back(std::move(w));
  }
  ResidentParams params(std::move(units));
  const int64_t B = 2, T = 3, V = config->vocab_size;
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  model.forward(params, tokens.data(), nullptr, B, T);
  std::vector<float> row(static_cast<size_t>(V));
  model.logits_at(1, 2, row.data());
  const float* all = transformer.logits() + (1 * T + 2) * V;
  EXPECT_EQ(row, std::vector<float>(all, all + V));
}

TEST(Transformer, CheckpointingIsBitwiseIdentical) {
  Loaded l = load("llama_tiny");
  auto step = SafetensorsReader::open(*default_storage(), kGolden + "llama_tiny/step.safetensors");
  ASSERT_TRUE(step.ok());
  std::vector<int32_t> tokens = read_i32(*step, "input_ids");
  std::vector<int32_t> labels = read_i32(*step, "labels");
  std::vector<std::vector<float>> results[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    Transformer model(l.config, TransformerOptions{ckpt == 1});
    ResidentParams params(l.units);
    model.forward(params, tokens.data(), labels.data(), 2, 16);
    ResidentGrads grads(model.layout());
    model.backward(params, grads, 1.0f / 32);
    results[ckpt] = grads.grads_;
  }
  EXPECT_EQ(results[0], results[1]);
}

// A 16-bit model's units arrive in its dtype and are widened where the model reads them: loss,
// logits and every gradient are bitwise those of the same values handed over as fp32.
TEST(Transformer, SixteenBitUnitsGiveTheResultsOfTheirFp32Values) {
  for (const char* name : {"gpt2_tiny", "llama_tiny"}) {
    Loaded l = load(name);
    auto step = SafetensorsReader::open(*default_storage(), kGolden + name + "/step.safetensors");
    ASSERT_TRUE(step.ok());
    std::vector<int32_t> tokens = read_i32(*step, "input_ids");
    std::vector<int32_t> labels = read_i32(*step, "labels");
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      testing::TypedResidentParams typed(l.units, dtype);
      ResidentParams wide(typed.widened());
      for (int variant = 0; variant < 3; ++variant) {
        const bool ckpt = variant == 1;
        // bf16 GEMMs read a bf16 unit's own values (Bf16Gemm sources) instead of rounding the
        // widened ones: the same bits.
        const bool gemm = variant == 2;
        if (gemm && !kernels::cpu::Bf16Gemm::cpu_supported()) continue;
        SCOPED_TRACE(std::string(name) + " " + std::string(dtype_name(dtype)) +
                     (ckpt ? " checkpointing" : "") + (gemm ? " bf16 gemm" : ""));
        float loss[2];
        std::vector<float> logits[2];
        std::vector<std::vector<float>> grads[2];
        for (int run = 0; run < 2; ++run) {
          ParamAccess& params = run == 0 ? static_cast<ParamAccess&>(typed) : wide;
          TransformerOptions options;
          options.activation_checkpointing = ckpt;
          options.bf16_gemm = gemm;
          Transformer model(l.config, options);
          loss[run] = model.forward(params, tokens.data(), labels.data(), 2, 16);
          const int64_t n = 2 * 16 * l.config.vocab_size;
          logits[run].assign(model.logits(), model.logits() + n);
          ResidentGrads g(model.layout());
          model.backward(params, g, 1.0f / 32);
          grads[run] = g.grads_;
          if (run == 0) {
            EXPECT_GT(model.buffer_bytes(), 0);
          }
        }
        EXPECT_EQ(loss[0], loss[1]);
        EXPECT_EQ(logits[0], logits[1]);
        EXPECT_EQ(grads[0], grads[1]);
      }
    }
  }
}

TEST(Init, ShardedInitEqualsFullInit) {
  auto config = preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  ModelLayout layout(*config);
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t n = layout.unit(u).numel;
    std::vector<float> full(static_cast<size_t>(n));
    init_unit_range(layout, u, 42, 0, n, full.data());
    // Three uneven shards, the last one padded past the unit's end.
    const int64_t cut1 = n / 3, cut2 = n / 3 * 2 + 1, end = n + 5;
    std::vector<float> shard(static_cast<size_t>(end));
    init_unit_range(layout, u, 42, 0, cut1, shard.data());
    init_unit_range(layout, u, 42, cut1, cut2, shard.data() + cut1);
    init_unit_range(layout, u, 42, cut2, end, shard.data() + cut2);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(shard[static_cast<size_t>(i)], full[static_cast<size_t>(i)]);
    for (int64_t i = n; i < end; ++i) ASSERT_EQ(shard[static_cast<size_t>(i)], 0.0f);
  }
}

TEST(Init, Gpt2Statistics) {
  auto config = preset_model_config("gpt2-124m");
  ASSERT_TRUE(config.ok());
  ModelLayout layout(*config);
  const UnitSpec& block = layout.unit(layout.block_unit(0));
  std::vector<float> w(static_cast<size_t>(block.numel));
  init_unit_range(layout, layout.block_unit(0), 7, 0, block.numel, w.data());
  auto stddev = [&](const ParamSpec& p) {
    double s = 0;
    for (int64_t i = 0; i < p.numel(); ++i)
      s += static_cast<double>(w[p.offset + i]) * w[p.offset + i];
    return std::sqrt(s / static_cast<double>(p.numel()));
  };
  EXPECT_NEAR(stddev(block.param(ParamKind::kQkvWeight)), 0.02, 0.0005);
  EXPECT_NEAR(stddev(block.param(ParamKind::kAttnOutWeight)), 0.02 / std::sqrt(24.0), 0.0005);
  EXPECT_EQ(w[block.param(ParamKind::kAttnNormWeight).offset], 1.0f);
  EXPECT_EQ(w[block.param(ParamKind::kQkvBias).offset], 0.0f);
}

TEST(HfCheckpoint, SaveThenLoadRoundTrips) {
  Loaded l = load("gpt2_tiny");
  ModelLayout layout(l.config);
  const std::string dir = ::testing::TempDir() + "/hf_roundtrip";
  Storage& storage = *default_storage();
  ASSERT_TRUE(save_hf_model(
                  storage, dir, layout,
                  [&](int u) { return l.units[static_cast<size_t>(u)].data(); }, HfSaveOptions{})
                  .ok());
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ModelLayout layout2(*config);
  auto reader = HfWeightReader::open(storage, dir, layout2);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  for (int u = 0; u < layout2.num_units(); ++u) {
    std::vector<float> buf(static_cast<size_t>(layout2.unit(u).numel));
    ASSERT_TRUE((*reader)->read_unit_range(u, 0, layout2.unit(u).numel, buf.data()).ok());
    EXPECT_EQ(buf, l.units[static_cast<size_t>(u)]);
  }
  // Sharded form: tiny shards force several files and an index.
  const std::string dir2 = ::testing::TempDir() + "/hf_sharded";
  HfSaveOptions small;
  small.max_shard_bytes = 8000;
  small.dtype = DType::kBF16;
  ASSERT_TRUE(save_hf_model(
                  storage, dir2, layout,
                  [&](int u) { return l.units[static_cast<size_t>(u)].data(); }, small)
                  .ok());
  EXPECT_TRUE(storage.file_exists(dir2 + "/model.safetensors.index.json"));
  // config.json names the saved dtype; generation_config.json is written beside it, and the saved
  // directory loads as the same model (save -> load -> save gives the same config.json).
  auto saved = load_model_config(dir2);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(saved->original["torch_dtype"], "bfloat16");
  EXPECT_TRUE(storage.file_exists(dir2 + "/generation_config.json"));
  EXPECT_EQ(model_config_to_json(*saved, "bfloat16"), saved->original);
  auto reader2 = HfWeightReader::open(storage, dir2, layout);
  ASSERT_TRUE(reader2.ok()) << reader2.status().to_string();
  std::vector<float> buf(static_cast<size_t>(layout.unit(1).numel));
  ASSERT_TRUE((*reader2)->read_unit_range(1, 0, layout.unit(1).numel, buf.data()).ok());
  for (size_t i = 0; i < buf.size(); ++i) EXPECT_EQ(buf[i], round_to_bf16(l.units[1][i]));
}

// A transformers-5 config (rope_parameters, dtype) saved in bf16: the saved config.json keeps that
// layout, says bfloat16 in `dtype` (no torch_dtype added), carries the same RoPE, and loads back as
// the same model (same logits).
TEST(HfCheckpoint, SaveKeepsTheTransformers5Layout) {
  Loaded l = load("mistral_tiny_sliding_yarn");
  ModelLayout layout(l.config);
  const std::string dir = ::testing::TempDir() + "/hf_v5_roundtrip";
  HfSaveOptions options;
  options.dtype = DType::kBF16;
  Storage& storage = *default_storage();
  ASSERT_TRUE(save_hf_model(
                  storage, dir, layout,
                  [&](int u) { return l.units[static_cast<size_t>(u)].data(); }, options)
                  .ok());
  auto saved = load_model_config(dir);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  const nlohmann::json& j = saved->original;
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_FALSE(j.contains("torch_dtype"));
  EXPECT_FALSE(j.contains("rope_theta"));
  EXPECT_FALSE(j.contains("rope_scaling"));
  EXPECT_EQ(j["rope_parameters"]["rope_type"], "yarn");
  EXPECT_EQ(j["rope_parameters"]["rope_theta"], 1000000.0);
  EXPECT_EQ(j["sliding_window"], 5);
  EXPECT_EQ(saved->sliding_window, 5);
  EXPECT_EQ(saved->rope_scaling.attention_factor, l.config.rope_scaling.attention_factor);
  EXPECT_TRUE(storage.file_exists(dir + "/generation_config.json"));
}

TEST(HfCheckpoint, MissingAndWrongShapedTensorsAreNamed) {
  Loaded l = load("gpt2_tiny");
  ModelConfig other = l.config;
  other.num_layers = 3;  // the file has two blocks
  ModelLayout layout(other);
  auto reader = HfWeightReader::open(*default_storage(), kGolden + "gpt2_tiny", layout);
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("transformer.h.2."), std::string::npos)
      << reader.status().message();
  ModelConfig wide = l.config;
  wide.hidden_size = 48;
  ModelLayout layout2(wide);
  auto reader2 = HfWeightReader::open(*default_storage(), kGolden + "gpt2_tiny", layout2);
  ASSERT_FALSE(reader2.ok());
  EXPECT_NE(reader2.status().message().find("shape"), std::string::npos);
}

}  // namespace
}  // namespace zero::model
