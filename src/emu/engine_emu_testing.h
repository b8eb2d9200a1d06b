// The engine tests on the CPU emulator (docs/emu.md) that need a small CUDA engine, not a curve:
// the tiny GPT-2 of the golden fixtures on the emulated GPU with every weight 0.01, and a
// micro-batch for it. Include after emu/cuda_emu.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "model/model_config.h"
#include "runtime/batch.h"
#include "runtime/engine.h"

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

}  // namespace zero::runtime::testing
