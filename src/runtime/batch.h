// Token batches as the engine and the evaluator see them, and the forward-only loss over them
// (one function for the training Engine's eval_loss and for inference without an Engine).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/model.h"

namespace zero::runtime {

// One micro-batch of this rank: tokens and targets, (B, T) each.
struct MicroBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
};

// The eval loss of micro-batches over all ranks: the sum of token cross-entropies over targets
// != -100 and how many there were. mean() is the mean token cross-entropy.
struct LossSum {
  double loss_sum = 0.0;
  int64_t tokens = 0;
  double mean() const { return tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0; }
};

// The sum of token cross-entropies of `model` over `micro_batches` on this rank, forward only.
// `before_each` (may be null) runs before each forward (the ZeRO coordinator's micro-step start);
// `after_each` (may be null) after it, its error ending the loop (a failed gather).
StatusOr<LossSum> forward_loss_sum(model::Model& model, model::ParamAccess& params,
                                   const std::vector<MicroBatch>& micro_batches,
                                   const std::function<void()>& before_each = nullptr,
                                   const std::function<Status()>& after_each = nullptr);

// The sum over ranks of every rank's `local` (collective: every rank calls it). It travels as
// three floats (the loss sum, then the token count split below 2^16 so it stays exact in fp32 up
// to 2^24 ranks x 2^32 tokens), so at world 1 the loss sum is rounded to fp32 as well.
StatusOr<LossSum> all_reduce_loss_sum(Communicator& comm, const LossSum& local);

}  // namespace zero::runtime
