// Tests only: optimizer steps of an Engine over the golden token stream
// (tests/fixtures/golden/tokens.bin, the gpt2-tiny / llama-tiny fixtures' vocabulary of 67): step s
// is one micro-batch of samples [4s, 4s + 4), 16 tokens each.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/storage.h"
#include "data/token_dataset.h"
#include "runtime/engine.h"

namespace zero::runtime {

// Steps [first, first + count) on `e`; their results, up to the first failed step (a test failure).
inline std::vector<StepResult> train_golden_steps(Engine& e, int first, int count) {
  TokenDatasetOptions dopts;
  dopts.block_size = 16;
  dopts.vocab_size = 67;
  auto data =
      TokenDataset::open(*default_storage(),
                         std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/tokens.bin", dopts);
  EXPECT_TRUE(data.ok()) << data.status().to_string();
  std::vector<StepResult> results;
  if (!data.ok()) return results;
  for (int s = first; s < first + count; ++s) {
    MicroBatch mb;
    mb.batch = 4;
    mb.seq = 16;
    mb.tokens.resize(64);
    mb.targets.resize(64);
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(data->get_sample((s * 4 + i) % data->num_samples(), mb.tokens.data() + i * 16,
                                   mb.targets.data() + i * 16)
                      .ok());
    }
    auto r = e.train_step({mb});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) break;
    results.push_back(*r);
  }
  return results;
}

}  // namespace zero::runtime
