// `zero bench aio`: sequential read/write bandwidth of the NvmeSwapper next to fio (io_uring,
// O_DIRECT, same block size and queue depth) on the same file system, and their ratio.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "offload/aio_config.h"
#include "offload/nvme_swapper.h"

namespace zero::offload {

struct AioBenchOptions {
  std::string dir = "/tmp";                 // where the swap file and fio's file go
  uint64_t file_bytes = uint64_t{1} << 30;  // bytes moved per pass (one request, like ds_io)
  int repeats = 3;                          // passes per measurement; the median is reported
  AioConfig aio;
  IoBackend backend = IoBackend::kAuto;
  std::string fio_path = "/usr/bin/fio";
  bool run_fio = true;
};

struct AioBenchResult {
  double swapper_write_gbps = 0;  // GB/s = 1e9 bytes per second
  double swapper_read_gbps = 0;
  double fio_write_gbps = 0;  // 0 when fio did not run
  double fio_read_gbps = 0;
  IoBackend backend = IoBackend::kAuto;
  bool direct_io = true;
};

// Measures; RESOURCE_EXHAUSTED when `dir` lacks 2 x file_bytes of free space.
StatusOr<AioBenchResult> measure_aio(const AioBenchOptions& options);

// Measures and prints a table (and errors) to stdout; returns a process exit code.
int run_aio_benchmark(const AioBenchOptions& options);

}  // namespace zero::offload
