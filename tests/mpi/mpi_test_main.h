// The shared main of the multi-rank GoogleTest programs: MPI start-up, one world communicator with
// a test-sized collective timeout (a desynchronised test fails instead of hanging), brief output on
// ranks other than 0, MPI shut-down after the communicator is gone.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/check.h"

namespace zero::testing {

// Runs every test with `on_world(runtime, world)` called first (set the program's globals there).
inline int run_mpi_tests(int argc, char** argv, int64_t timeout_ms,
                         const std::function<void(MpiRuntime&, MpiCommunicator&)>& on_world) {
  auto runtime = MpiRuntime::create(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", runtime.status().to_string().c_str());
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 0;
  {
    MpiCommunicatorOptions options;
    options.timeout_ms = timeout_ms;
    auto world = MpiCommunicator::create_world(**runtime, options);
    ZERO_CHECK(world.ok(), world.status().to_string());
    on_world(**runtime, **world);
    if ((*world)->rank() != 0) GTEST_FLAG_SET(brief, true);
    rc = RUN_ALL_TESTS();
    if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", (*world)->rank());
  }
  return rc;
}

}  // namespace zero::testing
