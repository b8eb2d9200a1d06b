#include "runtime/token_agreement.h"

#include <algorithm>

#include <fmt/format.h>

namespace zero::runtime {

Status agree_on_status(Communicator& comm, const Status& local) {
  if (comm.world_size() == 1) return local;
  // The max of world_size - rank over the failing ranks names the lowest one (0: none failed).
  float failed = local.ok() ? 0.0f : static_cast<float>(comm.world_size() - comm.rank());
  ZERO_RETURN_IF_ERROR(comm.all_reduce(&failed, 1, DType::kF32, ReduceOp::kMax)
                           .with_context("agreeing on the ranks' status"));
  if (!local.ok()) return local;
  if (failed == 0.0f) return ok_status();
  return failed_precondition("rank {} failed (its error is on its stderr); every rank stops here",
                             comm.world_size() - static_cast<int>(failed));
}

Status TokenAgreement::agree(std::span<int32_t> tokens) {
  lead_.assign(tokens.begin(), tokens.end());
  // Token ids travel as their bytes (a broadcast moves them verbatim; f32 sets 4-byte elements).
  ZERO_RETURN_IF_ERROR(comm_.broadcast(lead_.data(), lead_.size(), DType::kF32, /*root=*/0)
                           .with_context("agreeing on the step's new tokens with rank 0"));
  for (size_t i = 0; i < tokens.size(); ++i) differed_ += tokens[i] != lead_[i];
  tokens_ += static_cast<int64_t>(tokens.size());
  std::copy(lead_.begin(), lead_.end(), tokens.begin());
  return ok_status();
}

std::string TokenAgreement::report() const {
  if (differed_ == 0) return {};
  return fmt::format(
      "[rank {}] warning: {} of {} new tokens this rank sampled differed from rank "
      "0's (rank 0's kept: the ranks' logits were not bitwise equal)",
      comm_.rank(), differed_, tokens_);
}

}  // namespace zero::runtime
