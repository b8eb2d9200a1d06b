// `zero bench`: placeholder until its issue lands.
#include "cli/commands.h"

namespace zero::cli {

void add_bench_command(CLI::App& app, int& exit_code) {
  add_unimplemented_command(app, exit_code, "bench",
                            "micro and step benchmarks (adam, aio, comm, step)",
                            "planned: offload and CUDA issues");
}

}  // namespace zero::cli
