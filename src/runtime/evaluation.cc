// See evaluation.h.
#include "runtime/evaluation.h"

#include "runtime/engine.h"
#include "runtime/token_agreement.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zero::runtime {
namespace {

constexpr int32_t kIgnoreIndex = -100;  // HF's label for "not trained on / not evaluated"
// Micro-batches per eval_loss call: bounds the host memory of one call, one all-reduce each.
constexpr int64_t kRoundsPerReduce = 16;

}  // namespace

Evaluator::Evaluator(const TokenDataset* data, int64_t micro_batch, int world_size, int rank)
    : data_(data), micro_batch_(micro_batch), world_size_(world_size), rank_(rank) {}

int64_t Evaluator::num_rounds() const {
  const int64_t per_round = micro_batch_ * world_size_;
  return (data_->num_samples() + per_round - 1) / per_round;
}

std::vector<int64_t> Evaluator::samples(int64_t round, int rank) const {
  const int64_t first = round * micro_batch_ * world_size_ + rank * micro_batch_;
  const int64_t last = std::min(first + micro_batch_, data_->num_samples());
  std::vector<int64_t> out;
  for (int64_t g = first; g < last; ++g) out.push_back(g);
  return out;
}

StatusOr<EvalResult> Evaluator::run(Engine& engine) const {
  return run([&engine](const std::vector<MicroBatch>& micro) { return engine.eval_loss(micro); });
}

StatusOr<EvalResult> Evaluator::run(const LossFn& eval_loss) const {
  const int64_t T = data_->block_size();
  LossSum total;
  std::vector<MicroBatch> micro;
  for (int64_t round = 0; round < num_rounds(); round += kRoundsPerReduce) {
    const int64_t n = std::min(kRoundsPerReduce, num_rounds() - round);
    micro.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      MicroBatch& mb = micro[static_cast<size_t>(i)];
      mb.batch = micro_batch_;
      mb.seq = T;
      mb.tokens.assign(static_cast<size_t>(micro_batch_ * T), 0);
      mb.targets.assign(mb.tokens.size(), kIgnoreIndex);
      const std::vector<int64_t> rows = samples(round + i, rank_);
      for (size_t r = 0; r < rows.size(); ++r) {
        ZERO_RETURN_IF_ERROR(
            data_->get_sample(rows[r], mb.tokens.data() + r * T, mb.targets.data() + r * T));
      }
    }
    ZERO_ASSIGN_OR_RETURN(LossSum part, eval_loss(micro));
    total.loss_sum += part.loss_sum;
    total.tokens += part.tokens;
  }
  EvalResult out;
  out.loss = total.mean();
  out.tokens = total.tokens;
  out.perplexity = out.loss < std::log(std::numeric_limits<double>::max())
                       ? std::exp(out.loss)
                       : std::numeric_limits<double>::infinity();
  return out;
}

StatusOr<EvalResult> evaluate_weights(const TokenDataset& data, int64_t micro_batch,
                                      Communicator& comm, model::Model& model,
                                      model::ParamAccess& params,
                                      const std::function<Status()>& weights_status) {
  const Evaluator evaluator(&data, micro_batch, comm.world_size(), comm.rank());
  return evaluator.run([&](const std::vector<MicroBatch>& micro) -> StatusOr<LossSum> {
    ZERO_ASSIGN_OR_RETURN(LossSum local, forward_loss_sum(model, params, micro));
    // Agreed: a rank failing alone would leave its peers in the all-reduce below.
    if (weights_status) ZERO_RETURN_IF_ERROR(agree_on_status(comm, weights_status()));
    return all_reduce_loss_sum(comm, local);
  });
}

}  // namespace zero::runtime
