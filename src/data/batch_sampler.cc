// Sample-index arithmetic for sequential and per-epoch shuffled orders, and our own Fisher–Yates.
#include "data/batch_sampler.h"

#include <random>

#include "core/check.h"

namespace zero {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) without modulo bias: reject draws below 2^64 mod bound.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

std::string_view data_order_name(DataOrder order) {
  return order == DataOrder::kSequential ? "sequential" : "shuffle";
}

// Permutations for the two most recently used epochs (a step can straddle an epoch boundary).
struct GlobalBatchSampler::Cache {
  std::mutex mu;
  int64_t epochs[2] = {-1, -1};
  std::vector<int64_t> perms[2];
  int next_slot = 0;
};

GlobalBatchSampler::GlobalBatchSampler(const BatchSamplerConfig& config)
    : config_(config), cache_(std::make_unique<Cache>()) {}
GlobalBatchSampler::GlobalBatchSampler(GlobalBatchSampler&&) noexcept = default;
GlobalBatchSampler& GlobalBatchSampler::operator=(GlobalBatchSampler&&) noexcept = default;
GlobalBatchSampler::~GlobalBatchSampler() = default;

StatusOr<GlobalBatchSampler> GlobalBatchSampler::create(const BatchSamplerConfig& config) {
  if (config.num_samples <= 0) {
    return invalid_argument("data: no whole samples (num_samples = {})", config.num_samples);
  }
  if (config.micro_batch_size <= 0 || config.world_size <= 0 || config.train_batch_size <= 0) {
    return invalid_argument(
        "data: train_batch_size ({}), micro_batch_size ({}) and world_size ({}) must be positive",
        config.train_batch_size, config.micro_batch_size, config.world_size);
  }
  const int64_t per_micro_step = config.micro_batch_size * config.world_size;
  if (config.train_batch_size % per_micro_step != 0) {
    return invalid_argument(
        "data: train_batch_size {} is not micro_batch_size {} x world_size {} x an integer number "
        "of gradient accumulation steps",
        config.train_batch_size, config.micro_batch_size, config.world_size);
  }
  GlobalBatchSampler sampler(config);
  sampler.grad_accum_steps_ = config.train_batch_size / per_micro_step;
  return sampler;
}

int64_t GlobalBatchSampler::epoch_of_step(int64_t step) const {
  return step * config_.train_batch_size / config_.num_samples;
}

std::vector<int64_t> GlobalBatchSampler::epoch_permutation(uint64_t seed, int64_t epoch,
                                                           int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  std::mt19937_64 rng(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

int64_t GlobalBatchSampler::permuted(int64_t epoch, int64_t k) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  for (int slot = 0; slot < 2; ++slot) {
    if (cache_->epochs[slot] == epoch) return cache_->perms[slot][static_cast<size_t>(k)];
  }
  const int slot = cache_->next_slot;
  cache_->next_slot ^= 1;
  cache_->epochs[slot] = epoch;
  cache_->perms[slot] = epoch_permutation(config_.seed, epoch, config_.num_samples);
  return cache_->perms[slot][static_cast<size_t>(k)];
}

int64_t GlobalBatchSampler::global_sample(int64_t step, int64_t j) const {
  ZERO_CHECK(step >= 0 && j >= 0 && j < config_.train_batch_size, "step ", step, " slot ", j);
  const int64_t position = step * config_.train_batch_size + j;  // overflows only past 2^63 samples
  const int64_t k = position % config_.num_samples;
  if (config_.order == DataOrder::kSequential) return k;
  return permuted(position / config_.num_samples, k);
}

std::vector<int64_t> GlobalBatchSampler::micro_batch(int64_t step, int64_t micro_step,
                                                     int64_t dp_rank) const {
  ZERO_CHECK(micro_step >= 0 && micro_step < grad_accum_steps_, "micro_step ", micro_step);
  ZERO_CHECK(dp_rank >= 0 && dp_rank < config_.world_size, "dp_rank ", dp_rank);
  const int64_t micro = config_.micro_batch_size;
  const int64_t first = micro_step * micro * config_.world_size + dp_rank * micro;
  std::vector<int64_t> out(static_cast<size_t>(micro));
  for (int64_t i = 0; i < micro; ++i) out[static_cast<size_t>(i)] = global_sample(step, first + i);
  return out;
}

SamplerState GlobalBatchSampler::state(int64_t next_step) const {
  return SamplerState{next_step, config_.seed, config_.order, config_.num_samples,
                      config_.train_batch_size};
}

Status GlobalBatchSampler::check_resume(const SamplerState& saved) const {
  if (saved.num_samples != config_.num_samples) {
    return failed_precondition(
        "data: checkpoint was trained on {} samples, this run has {} (different --train_file or "
        "--block_size?)",
        saved.num_samples, config_.num_samples);
  }
  if (saved.train_batch_size != config_.train_batch_size) {
    return failed_precondition("data: checkpoint used train_batch_size {}, this run {}",
                               saved.train_batch_size, config_.train_batch_size);
  }
  if (saved.order != config_.order) {
    return failed_precondition("data: checkpoint used --data_order {}, this run {}",
                               data_order_name(saved.order), data_order_name(config_.order));
  }
  if (config_.order == DataOrder::kShuffle && saved.seed != config_.seed) {
    return failed_precondition("data: checkpoint shuffled with --seed {}, this run has {}",
                               saved.seed, config_.seed);
  }
  return ok_status();
}

}  // namespace zero
