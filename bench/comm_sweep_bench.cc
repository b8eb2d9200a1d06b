// Collective time against payload size through MpiCommunicator: the measurement that calibrates
// the throughput model's shm and tcp links (bench/scaling_check.sh, docs/scaling.md), apart from
// the step times the model then predicts. Run under mpirun:
//   mpirun -np N build/release/bench/comm_sweep_bench ITERATIONS KIB [KIB ...]
// Prints on rank 0 one line per collective and size: `sweep KIND WORLD PAYLOAD_BYTES MEDIAN_MS`,
// payload as CommStats counts it (all_reduce: the buffer; reduce_scatter: the input; all_gather:
// the output), median over ITERATIONS calls of the slowest rank. fp32 throughout.
// ZERO_SHM_COLLECTIVES=0 (with mpirun --mca btl tcp,self) selects Open MPI over TCP.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm_timing.h"
#include "core/check.h"

namespace zero {
namespace {

using bench::median_ms;

int run(MpiRuntime& runtime, int iterations, const std::vector<size_t>& kib_sizes) {
  auto made = MpiCommunicator::create_world(runtime);
  ZERO_CHECK(made.ok(), made.status().to_string());
  MpiCommunicator& comm = **made;
  const int world = comm.world_size();
  for (size_t kib : kib_sizes) {
    const size_t numel = std::max<size_t>((kib << 10) / sizeof(float) / world, 1) * world;
    const size_t block = numel / world;
    const double bytes = static_cast<double>(numel * sizeof(float));
    std::vector<float> buf(numel, 1.0f), shard(block, 1.0f);
    const double all_reduce = median_ms(comm, iterations, [&] {
      ZERO_CHECK(comm.all_reduce(buf.data(), numel, DType::kF32).ok());
    });
    const double reduce_scatter = median_ms(comm, iterations, [&] {
      ZERO_CHECK(comm.reduce_scatter(buf.data(), shard.data(), block, DType::kF32).ok());
    });
    const double all_gather = median_ms(comm, iterations, [&] {
      ZERO_CHECK(comm.all_gather(shard.data(), buf.data(), block, DType::kF32).ok());
    });
    if (comm.rank() == 0) {
      std::printf("sweep all_reduce %d %.0f %.4f\n", world, bytes, all_reduce);
      std::printf("sweep reduce_scatter %d %.0f %.4f\n", world, bytes, reduce_scatter);
      std::printf("sweep all_gather %d %.0f %.4f\n", world, bytes, all_gather);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  auto runtime = zero::MpiRuntime::create(&argc, &argv);
  ZERO_CHECK(runtime.ok(), runtime.status().to_string());
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 9;
  std::vector<size_t> kib;
  for (int i = 2; i < argc; ++i) kib.push_back(std::strtoul(argv[i], nullptr, 10));
  if (kib.empty()) kib = {64, 1024, 16384};
  return zero::run(**runtime, std::max(iterations, 1), kib);
}
