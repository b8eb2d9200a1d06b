// One node's collective speed through MpiCommunicator (issue 14): a 64 MiB fp32 all-reduce (a
// stage-0 step's gradients) and a reduce-scatter + all-gather of the same buffer (stages 1-3),
// next to a plain memcpy of the same bytes. Run under mpirun:
//   mpirun -np 2 build/release/bench/comm_collectives_bench [MiB] [iterations]
// Prints, on rank 0, the median ms per call and payload GB/s (payload = the buffer's bytes).
// ZERO_SHM_COLLECTIVES=0 selects Open MPI's collectives instead of the shared-memory path.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm_timing.h"
#include "core/check.h"

namespace zero {
namespace {

using bench::median_ms;

int run(MpiRuntime& runtime, size_t mib, int iterations) {
  auto made = MpiCommunicator::create_world(runtime);
  ZERO_CHECK(made.ok(), made.status().to_string());
  MpiCommunicator& comm = **made;
  const int world = comm.world_size();
  const size_t numel = (mib << 20) / sizeof(float) / world * world;
  const size_t block = numel / world;
  const double bytes = static_cast<double>(numel * sizeof(float));
  std::vector<float> grads(numel, 1.0f), shard(block), src(numel, 2.0f), dst(numel);
  const double all_reduce = median_ms(comm, iterations, [&] {
    ZERO_CHECK(comm.all_reduce(grads.data(), numel, DType::kF32).ok());
  });
  const double all_reduce_bf16 = median_ms(comm, iterations, [&] {
    ZERO_CHECK(comm.all_reduce(grads.data(), numel, DType::kBF16).ok());  // numel x 2 B
  });
  const double reduce_scatter = median_ms(comm, iterations, [&] {
    ZERO_CHECK(comm.reduce_scatter(grads.data(), shard.data(), block, DType::kF32).ok());
  });
  const double all_gather = median_ms(comm, iterations, [&] {
    ZERO_CHECK(comm.all_gather(shard.data(), grads.data(), block, DType::kF32).ok());
  });
  const double memcpy_ms =
      median_ms(comm, iterations, [&] { std::memcpy(dst.data(), src.data(), numel * 4); });
  if (comm.rank() == 0) {
    const char* shm = std::getenv("ZERO_SHM_COLLECTIVES");
    std::printf("world %d, %.0f MiB fp32, %d iterations, ZERO_SHM_COLLECTIVES=%s\n", world,
                bytes / (1 << 20), iterations, shm ? shm : "(unset)");
    std::printf("| operation | ms | GB/s of payload |\n|---|---|---|\n");
    auto row = [&](const char* name, double ms, double b) {
      std::printf("| %s | %.1f | %.2f |\n", name, ms, b / ms / 1e6);
    };
    row("all_reduce fp32", all_reduce, bytes);
    row("all_reduce bf16 (half the bytes)", all_reduce_bf16, bytes / 2);
    row("reduce_scatter fp32", reduce_scatter, bytes);
    row("all_gather fp32", all_gather, bytes);
    row("reduce_scatter + all_gather", reduce_scatter + all_gather, bytes);
    row("memcpy (one rank, same bytes)", memcpy_ms, bytes);
  }
  return 0;
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  auto runtime = zero::MpiRuntime::create(&argc, &argv);
  ZERO_CHECK(runtime.ok(), runtime.status().to_string());
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  return zero::run(**runtime, mib, iterations);
}
