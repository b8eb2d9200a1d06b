// `zero bench ckpt`: checkpoint save and load time, and the bytes each rank reads when resharding —
// a rank of a world of M should read about 1/M of the model, not the whole of it.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zero::runtime {

struct CkptBenchOptions {
  std::string model = "preset:gpt2-mini";
  std::string dir;  // default: a temporary directory (removed afterwards)
  int stage = 3;    // stage of the saving run
  std::vector<int> load_worlds = {1, 2, 4, 8};  // world sizes whose rank-0 reads are measured
};

int run_ckpt_benchmark(const CkptBenchOptions& options, Communicator& comm);

}  // namespace zero::runtime
