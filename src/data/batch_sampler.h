// GlobalBatchSampler: which global samples each (step, micro-step, dp_rank) trains on. A pure
// function of (step, seed) and the config, so the loss curve is independent of how the global
// batch is split over ranks and micro-steps, and resuming needs only the step
// (docs/formats/data.md).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace zero {

enum class DataOrder : uint8_t { kSequential, kShuffle };

std::string_view data_order_name(DataOrder order);  // "sequential" / "shuffle"

struct BatchSamplerConfig {
  int64_t num_samples = 0;       // S
  int64_t train_batch_size = 0;  // TBS = micro_batch_size * grad_accum_steps * world_size
  int64_t micro_batch_size = 0;  // per rank, per micro-step
  int64_t world_size = 1;        // data-parallel ranks
  uint64_t seed = 0;             // --seed (shuffle only)
  DataOrder order = DataOrder::kSequential;
};

// What a checkpoint stores to resume the data stream exactly.
struct SamplerState {
  int64_t next_step = 0;  // optimizer steps completed
  uint64_t seed = 0;
  DataOrder order = DataOrder::kSequential;
  int64_t num_samples = 0;
  int64_t train_batch_size = 0;
};

// Step s consumes positions p = s*TBS + j, j in [0, TBS). Position p is global sample
//   sequential: p mod S;   shuffle: perm_e[p mod S] with epoch e = floor(p / S).
// Rank r at micro-step m takes j = m*(micro*world) + r*micro + i, i in [0, micro).
// Thread-safe (a small cache of epoch permutations sits behind a mutex).
class GlobalBatchSampler {
 public:
  // Validates: S > 0, micro > 0, world > 0, TBS divisible by micro * world.
  static StatusOr<GlobalBatchSampler> create(const BatchSamplerConfig& config);

  GlobalBatchSampler(GlobalBatchSampler&&) noexcept;
  GlobalBatchSampler& operator=(GlobalBatchSampler&&) noexcept;
  ~GlobalBatchSampler();

  const BatchSamplerConfig& config() const { return config_; }
  int64_t grad_accum_steps() const { return grad_accum_steps_; }
  // The epoch step s starts in (floor(s*TBS / S)).
  int64_t epoch_of_step(int64_t step) const;

  // Global sample index of slot j (0 <= j < TBS) of step s (s >= 0).
  int64_t global_sample(int64_t step, int64_t j) const;
  // The micro_batch_size samples rank `dp_rank` trains on at micro-step `micro_step` of `step`.
  // REQUIRES: 0 <= micro_step < grad_accum_steps, 0 <= dp_rank < world_size.
  std::vector<int64_t> micro_batch(int64_t step, int64_t micro_step, int64_t dp_rank) const;

  SamplerState state(int64_t next_step) const;
  // Ok when `saved` was produced by a sampler that yields the same stream as this one; otherwise
  // an error naming the field that differs (a different seed, order, dataset or TBS would
  // silently change which samples the resumed run sees).
  Status check_resume(const SamplerState& saved) const;

  // The permutation of [0, n) for (seed, epoch): Fisher–Yates driven by std::mt19937_64 (whose
  // output sequence the C++ standard fixes) seeded with splitmix64(seed ^ splitmix64(epoch)),
  // with unbiased bounded draws by rejection. Identical on every platform.
  static std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

 private:
  explicit GlobalBatchSampler(const BatchSamplerConfig& config);
  int64_t permuted(int64_t epoch, int64_t k) const;

  struct Cache;
  BatchSamplerConfig config_;
  int64_t grad_accum_steps_ = 1;
  std::unique_ptr<Cache> cache_;
};

}  // namespace zero
