// Forward-only loss over micro-batches, shared by Engine::eval_loss and engine-free evaluation.
#include "runtime/batch.h"

namespace zero::runtime {

StatusOr<LossSum> forward_loss_sum(model::Model& model, model::ParamAccess& params,
                                   const std::vector<MicroBatch>& micro_batches,
                                   const std::function<void()>& before_each,
                                   const std::function<Status()>& after_each) {
  double loss_sum = 0.0;
  int64_t tokens = 0;
  for (const MicroBatch& mb : micro_batches) {
    if (before_each) before_each();
    const double mean =
        model.forward(params, mb.tokens.data(), mb.targets.data(), mb.batch, mb.seq);
    if (after_each) ZERO_RETURN_IF_ERROR(after_each());
    const int64_t counted = model.counted_targets();
    loss_sum += mean * static_cast<double>(counted);
    tokens += counted;
  }
  LossSum out;
  out.loss_sum = loss_sum;
  out.tokens = tokens;
  return out;
}

StatusOr<LossSum> all_reduce_loss_sum(Communicator& comm, const LossSum& local) {
  float buf[3] = {static_cast<float>(local.loss_sum), static_cast<float>(local.tokens >> 16),
                  static_cast<float>(local.tokens & 0xFFFF)};
  ZERO_RETURN_IF_ERROR(comm.all_reduce(buf, 3, DType::kF32, ReduceOp::kSum));
  LossSum out;
  out.loss_sum = static_cast<double>(buf[0]);
  out.tokens = (static_cast<int64_t>(buf[1]) << 16) + static_cast<int64_t>(buf[2]);
  return out;
}

}  // namespace zero::runtime
