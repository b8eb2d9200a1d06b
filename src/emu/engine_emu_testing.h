// The engine tests on the CPU emulator (docs/emu.md): a small CUDA engine for tests that need one,
// not a curve (the tiny GPT-2 of the golden fixtures with every weight 0.01, and a micro-batch for
// it), and the models and initial weights of the offload curve tests (case_config, case_init).
// Include after emu/cuda_emu.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "core/storage.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"
#include "runtime/batch.h"
#include "runtime/engine.h"
#include "runtime/unit_init.h"

namespace zero::runtime::testing {

// EngineOptions for tests/fixtures/golden/gpt2_tiny on the CUDA device, the memory check off (the
// emulated devices report whatever their budget says).
inline EngineOptions tiny_cuda_options() {
  auto config =
      model::load_model_config(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/gpt2_tiny");
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  EngineOptions o;
  if (config.ok()) o.model_config = *config;
  o.device = Device::kCuda;
  o.check_memory = false;
  return o;
}

// The engine for `o` (from tiny_cuda_options), every weight 0.01; on `comm`'s ranks if given.
inline StatusOr<std::unique_ptr<Engine>> make_tiny_cuda_engine(EngineOptions o,
                                                               Communicator* comm = nullptr) {
  return Engine::create(
      std::move(o),
      [](int, int64_t b, int64_t e, float* dst) {
        std::fill(dst, dst + (e - b), 0.01f);
        return ok_status();
      },
      comm);
}

// `batch` sequences of `seq` tokens counting up (mod 60), each target the next token.
inline MicroBatch tiny_micro_batch(int64_t batch = 2, int64_t seq = 16) {
  MicroBatch mb;
  mb.batch = batch;
  mb.seq = seq;
  for (int64_t i = 0; i < batch * seq; ++i) {
    mb.tokens.push_back(static_cast<int32_t>(i % 60));
    mb.targets.push_back(static_cast<int32_t>((i + 1) % 60));
  }
  return mb;
}

inline const std::string kGoldenDir = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/";

// "gpt2_deep": gpt2_tiny's vocabulary and positions with 8 blocks of width 64 (about 0.4M
// parameters, the blocks most of them, as in a real model), its weights a fixed pseudo-random
// pattern; "gpt2_deeper" the same with 24 blocks; any other name a golden fixture's config.
inline constexpr const char* kDeep = "gpt2_deep";
inline constexpr const char* kDeeper = "gpt2_deeper";

inline StatusOr<model::ModelConfig> case_config(const std::string& name) {
  if (name != kDeep && name != kDeeper) return model::load_model_config(kGoldenDir + name);
  ZERO_ASSIGN_OR_RETURN(model::ModelConfig config,
                        model::load_model_config(kGoldenDir + "gpt2_tiny"));
  config.hidden_size = 64;
  config.num_layers = name == kDeeper ? 24 : 8;
  config.num_heads = config.num_kv_heads = 4;
  config.intermediate_size = 256;
  return config;
}

// Initial weights: the fixture's (its reader kept in *keep), or for the deep models values in
// [-0.05, 0.05) from the element's index. Empty (a test failure recorded) when the fixture is bad.
inline UnitInitFn case_init(const std::string& name, const model::ModelLayout& layout,
                            std::unique_ptr<model::HfWeightReader>* keep) {
  if (name == kDeep || name == kDeeper) {
    return [](int u, int64_t b, int64_t e, float* dst) {
      for (int64_t i = b; i < e; ++i) {
        const uint64_t h =
            (static_cast<uint64_t>(u) << 40 ^ static_cast<uint64_t>(i)) * 0x9E3779B97F4A7C15ull;
        dst[i - b] =
            static_cast<float>(static_cast<double>(h >> 40) / double(1 << 24) - 0.5) * 0.1f;
      }
      return ok_status();
    };
  }
  auto reader = model::HfWeightReader::open(*default_storage(), kGoldenDir + name, layout);
  EXPECT_TRUE(reader.ok()) << reader.status().to_string();
  if (!reader.ok()) return {};
  *keep = std::move(*reader);
  model::HfWeightReader* r = keep->get();
  return [r](int u, int64_t b, int64_t e, float* dst) { return r->read_unit_range(u, b, e, dst); };
}

}  // namespace zero::runtime::testing
