// Evaluation of `zero train --validation_file`: the mean token cross-entropy over every sample of
// a validation set (each counted once, whatever the world size) and its perplexity, forward only
// through Engine::eval_loss (so every ZeRO stage evaluates the same numbers) or, in `zero eval`,
// through a forward over ModelWeights with the same reduction.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/token_dataset.h"
#include "model/model.h"
#include "model/param_access.h"
#include "runtime/batch.h"

namespace zero::runtime {

class Engine;

struct EvalResult {
  double loss = 0.0;        // mean token cross-entropy over the validation samples
  double perplexity = 0.0;  // exp(loss) (inf when it overflows, as HF's)
  int64_t tokens = 0;       // targets counted
};

// Splits a validation set into rounds of `micro_batch` samples per rank: round i holds samples
// [i*B*W, (i+1)*B*W), rank r the B of them from i*B*W + r*B. Every rank runs every round (the
// last may be short: its missing rows are padding with targets -100), so collectives match.
class Evaluator {
 public:
  // `data` is not owned and must outlive this. REQUIRES: micro_batch >= 1, 0 <= rank < world.
  Evaluator(const TokenDataset* data, int64_t micro_batch, int world_size, int rank);

  // Rounds every rank runs: ceil(num_samples / (micro_batch * world_size)).
  int64_t num_rounds() const;
  // The sample indices of `rank`'s micro-batch in `round` (fewer than micro_batch, or none, in
  // the last round).
  std::vector<int64_t> samples(int64_t round, int rank) const;

  // The loss sum of this rank's micro-batches of a round group, summed over ranks.
  using LossFn = std::function<StatusOr<LossSum>(const std::vector<MicroBatch>&)>;
  // Evaluates through `eval_loss` (a training Engine's, or a forward over ModelWeights). Collective
  // when eval_loss is: every rank calls it.
  StatusOr<EvalResult> run(const LossFn& eval_loss) const;
  // Evaluates `engine`'s current weights (Engine::eval_loss). Collective: every rank calls it.
  StatusOr<EvalResult> run(Engine& engine) const;

 private:
  const TokenDataset* data_;
  int64_t micro_batch_;
  int world_size_;
  int rank_;
};

// `zero eval`'s evaluation of weights held for inference: `model` reads `params` forward only
// (forward_loss_sum), each rank over its Evaluator samples of `data` in micro-batches of
// `micro_batch`, the loss sums all-reduced over `comm` (one rank: a SelfCommunicator), so N ranks
// holding stage-3 shards evaluate the samples once between them. `weights_status` (may be empty)
// is checked after each forward, agreed over the ranks: a failed weight read on any rank leaves a
// loss that is not trusted, and every rank ends with an error there.
// Collective: every rank of `comm` calls it.
StatusOr<EvalResult> evaluate_weights(const TokenDataset& data, int64_t micro_batch,
                                      Communicator& comm, model::Model& model,
                                      model::ParamAccess& params,
                                      const std::function<Status()>& weights_status = {});

}  // namespace zero::runtime
