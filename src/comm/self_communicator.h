// SelfCommunicator: the world of one rank without MPI (`zero train` alone, unit tests). Every
// collective is a local copy that completes at once; counters are kept like any backend's.
#pragma once

#include "comm/communicator.h"

namespace zero {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() = default;

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world_size() const override { return 1; }
  std::string_view backend_name() const override { return "self"; }

  CommHandle all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                  DType dtype) override;
  CommHandle all_gather_async(const void* in, void* out, size_t block_numel, DType dtype) override;
  CommHandle broadcast_async(void* buf, size_t numel, DType dtype, int root) override;
  CommHandle barrier_async() override;
  [[noreturn]] void abort_job(int exit_code) override;
};

}  // namespace zero
