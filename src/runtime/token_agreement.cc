#include "runtime/token_agreement.h"

#include <algorithm>

#include <fmt/format.h>

namespace zero::runtime {

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
