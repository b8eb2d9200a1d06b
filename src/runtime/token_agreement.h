// The ranks of a stage-3 inference job agree on every new token: rank 0's are kept. Each rank
// samples from logits that should be bitwise its peers' (the same gathered weights, the same
// kernels), but a rank on another GPU model, or a kernel with a nondeterministic reduction, could
// break a tie differently; its sequence would then diverge, stop at EOS early and leave its peers
// waiting in the next gather until the collective timeout. With the lead's tokens broadcast each
// step, every rank runs the same forwards; a rank whose own pick differed counts it, and the job
// says so at its end (report()).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "runtime/generate.h"

namespace zero::runtime {

// Every rank's `local` status agreed over `comm` (one all-reduce of one value): OK when every
// rank's is; else this rank's own error, or on a rank that had none an error naming the lowest
// failing rank (whose own error is on its stderr). A rank failing alone would otherwise leave its
// peers waiting in the next collective until the timeout; with this every rank ends at the same
// point. Collective: every rank calls it at the same point. Errors: also the all-reduce's.
Status agree_on_status(Communicator& comm, const Status& local);

class TokenAgreement final : public TokenSync {
 public:
  // `comm` is not owned and must outlive this; every rank of it generates alike.
  explicit TokenAgreement(Communicator& comm) : comm_(comm) {}

  // Replaces `tokens` with rank 0's (one broadcast of the step's tokens). Collective.
  Status agree(std::span<int32_t> tokens) override;

  int64_t tokens() const { return tokens_; }      // new tokens agreed so far
  int64_t differed() const { return differed_; }  // of them, this rank's own pick was not rank 0's
  // One line naming this rank and the count when any token differed, else empty.
  std::string report() const;

 private:
  Communicator& comm_;
  std::vector<int32_t> lead_;
  int64_t tokens_ = 0;
  int64_t differed_ = 0;
};

}  // namespace zero::runtime
