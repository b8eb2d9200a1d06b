// Swapper vs fio bandwidth (see aio_benchmark.h).
#include "offload/aio_benchmark.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace zero::offload {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs fio once and returns bytes/s of the `rw` direction from its JSON report.
StatusOr<double> run_fio_pass(const AioBenchOptions& o, const std::string& file, const char* rw) {
  const int jobs = o.aio.intra_op_parallelism;
  const uint64_t per_job_bytes = o.file_bytes / static_cast<uint64_t>(jobs);
  const std::string cmd = fmt::format(
      "{} --name=zero_aio --filename={} --size={} --offset_increment={} --numjobs={} "
      "--group_reporting --direct=1 --ioengine=io_uring --bs={} --iodepth={} --rw={} "
      "--output-format=json 2>&1",
      o.fio_path, file, per_job_bytes, per_job_bytes, jobs, o.aio.block_size_bytes,
      o.aio.queue_depth, rw);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return io_error("cannot run {}", cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = ::pclose(pipe);
  const size_t json_start = out.find('{');
  if (rc != 0 || json_start == std::string::npos) {
    return io_error("fio failed (exit {}): {}\n{}", rc, cmd, out.substr(0, 2000));
  }
  auto report = nlohmann::json::parse(out.substr(json_start), nullptr, false);
  if (report.is_discarded()) return io_error("cannot parse fio output of: {}", cmd);
  return report["jobs"][0][rw == std::string("read") ? "read" : "write"]["bw_bytes"].get<double>();
}

}  // namespace

StatusOr<AioBenchResult> measure_aio(const AioBenchOptions& o) {
  ZERO_RETURN_IF_ERROR(validate_aio_config(o.aio));
  if (o.file_bytes == 0 || o.file_bytes % (o.aio.block_size_bytes * o.aio.intra_op_parallelism)) {
    return invalid_argument(
        "bench size {} must be a positive multiple of block_size x "
        "intra_op_parallelism = {}",
        o.file_bytes, o.aio.block_size_bytes * o.aio.intra_op_parallelism);
  }
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  struct statvfs vfs {};
  if (::statvfs(o.dir.c_str(), &vfs) != 0) return io_error("statvfs({}) failed", o.dir);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t needed_bytes = 2 * o.file_bytes + (uint64_t{1} << 30);
  if (free_bytes < needed_bytes) {
    return resource_exhausted("{} has {} bytes free; the benchmark needs {} (2 x size + 1 GiB)",
                              o.dir, free_bytes, needed_bytes);
  }

  AioBenchResult result;
  {
    NvmeSwapperOptions so;
    so.nvme_path =
        (std::filesystem::path(o.dir) / fmt::format("zero_aio_bench_{}", ::getpid())).string();
    so.aio = o.aio;
    so.backend = o.backend;
    ZERO_ASSIGN_OR_RETURN(auto swapper, NvmeSwapper::create(so));
    ZERO_RETURN_IF_ERROR(swapper->add_file("bench", o.file_bytes));
    result.backend = swapper->backend();
    result.direct_io = swapper->direct_io();
    // Page-aligned so chunks go to the kernel without staging copies (the intended use).
    void* raw = std::aligned_alloc(kDirectIoAlignBytes, o.file_bytes);
    if (raw == nullptr) return resource_exhausted("cannot allocate {} bytes", o.file_bytes);
    std::unique_ptr<std::byte[], decltype(&std::free)> buffer(static_cast<std::byte*>(raw),
                                                              &std::free);
    for (uint64_t i = 0; i < o.file_bytes; i += 8) {
      const uint64_t v = i * 0x9E3779B97F4A7C15ull;
      std::memcpy(buffer.get() + i, &v, std::min<uint64_t>(8, o.file_bytes - i));
    }
    std::vector<double> write_bps, read_bps;
    for (int r = 0; r < o.repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      ZERO_RETURN_IF_ERROR(swapper->write("bench", 0, o.file_bytes, buffer.get()));
      auto t1 = std::chrono::steady_clock::now();
      ZERO_RETURN_IF_ERROR(swapper->read("bench", 0, o.file_bytes, buffer.get()));
      auto t2 = std::chrono::steady_clock::now();
      write_bps.push_back(o.file_bytes / std::chrono::duration<double>(t1 - t0).count());
      read_bps.push_back(o.file_bytes / std::chrono::duration<double>(t2 - t1).count());
    }
    result.swapper_write_gbps = median(write_bps) / 1e9;
    result.swapper_read_gbps = median(read_bps) / 1e9;
  }  // swap file and its directory removed here, before fio needs the space

  if (o.run_fio) {
    const std::string file =
        (std::filesystem::path(o.dir) / fmt::format("zero_aio_bench_fio_{}.tmp", ::getpid()))
            .string();
    std::vector<double> write_bps, read_bps;
    Status status;
    for (int r = 0; r < o.repeats && status.ok(); ++r) {
      auto w = run_fio_pass(o, file, "write");
      if (!w.ok()) {
        status = w.status();
        break;
      }
      auto rd = run_fio_pass(o, file, "read");
      if (!rd.ok()) {
        status = rd.status();
        break;
      }
      write_bps.push_back(*w);
      read_bps.push_back(*rd);
    }
    std::filesystem::remove(file, ec);
    ZERO_RETURN_IF_ERROR(status);
    result.fio_write_gbps = median(write_bps) / 1e9;
    result.fio_read_gbps = median(read_bps) / 1e9;
  }
  return result;
}

int run_aio_benchmark(const AioBenchOptions& o) {
  auto result = measure_aio(o);
  if (!result.ok()) {
    fmt::print(stderr, "zero bench aio: {}\n", result.status().to_string());
    return 1;
  }
  const AioBenchResult& r = *result;
  fmt::print(
      "aio bench: dir={} size={} MiB repeats={} block_size={} queue_depth={} "
      "intra_op_parallelism={} single_submit={} overlap_events={} backend={}{}\n",
      o.dir, o.file_bytes >> 20, o.repeats, o.aio.block_size_bytes, o.aio.queue_depth,
      o.aio.intra_op_parallelism, o.aio.single_submit, o.aio.overlap_events,
      io_backend_name(r.backend), r.direct_io ? "" : " (buffered: O_DIRECT refused)");
  fmt::print("{:<6} {:>14} {:>14} {:>10}\n", "op", "swapper GB/s", "fio GB/s", "ratio");
  auto row = [&](const char* op, double mine, double fio) {
    if (fio > 0) {
      fmt::print("{:<6} {:>14.3f} {:>14.3f} {:>10.2f}\n", op, mine, fio, mine / fio);
    } else {
      fmt::print("{:<6} {:>14.3f} {:>14} {:>10}\n", op, mine, "-", "-");
    }
  };
  row("read", r.swapper_read_gbps, r.fio_read_gbps);
  row("write", r.swapper_write_gbps, r.fio_write_gbps);
  return 0;
}

}  // namespace zero::offload
