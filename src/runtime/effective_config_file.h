// The run's effective DeepSpeed config on disk (OUTPUT_DIR/ds_config.effective.json) and its
// one-line summary for the console (the full dump only with --verbose).
#pragma once

#include <cstdint>
#include <string>

#include "config/effective.h"
#include "core/status.h"
#include "core/storage.h"
#include "runtime/offload_options.h"

namespace zero::runtime {

inline constexpr const char* kEffectiveConfigFile = "ds_config.effective.json";

// Writes the resolved batch triad into the effective config: train_batch_size,
// train_micro_batch_size_per_gpu and gradient_accumulation_steps get their values with the real
// world size (origin "derived" where the config left them out or "auto"), as the HF integration
// fills them in before DeepSpeed reads the config.
void record_batch_triad(config::EffectiveConfig& effective, int64_t train_batch_size,
                        int64_t micro_batch_per_gpu, int64_t gradient_accumulation_steps);

// Writes `effective.json` (indented JSON, a loadable ds_config) to OUT_DIR/ds_config.effective.json
// atomically: a .tmp file written and synced, then renamed over the old one. Rank 0 only.
Status write_effective_config(Storage& storage, const std::string& out_dir,
                              const config::EffectiveConfig& effective);

// "ZeRO stage 3, bf16, AdamW lr 0.001, WarmupDecayLR, train_batch_size 32 (micro 4 x accumulation
// 4 x world 2), gradient_clipping 1": what a reader checks first.
// `placement` (optional): the offload placements that will run (after the stage rules), shown
// instead of the config's devices.
std::string effective_config_summary(const config::EffectiveConfig& effective, int world_size,
                                     const OffloadOptions* placement = nullptr);

}  // namespace zero::runtime
