// Save once from this world, then time loads and count the bytes read for rank 0 of other worlds.
#include "runtime/ckpt_benchmark.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "core/storage.h"
#include "runtime/engine.h"
#include "runtime/engine_checkpoint.h"
#include "runtime/model_source.h"

namespace zero::runtime {

namespace {

// Storage that counts the bytes read through it (everything else passes through).
class CountingStorage : public Storage {
 public:
  explicit CountingStorage(Storage& base) : base_(base) {}
  uint64_t bytes_read() const { return bytes_read_.load(); }
  void reset() { bytes_read_ = 0; }

  StatusOr<std::unique_ptr<RandomAccessFile>> open_read(const std::string& path) override {
    ZERO_ASSIGN_OR_RETURN(auto file, base_.open_read(path));
    return std::unique_ptr<RandomAccessFile>(new CountingFile(std::move(file), bytes_read_));
  }
  StatusOr<std::unique_ptr<WritableFile>> open_write(const std::string& path) override {
    return base_.open_write(path);
  }
  Status rename(const std::string& from, const std::string& to) override {
    return base_.rename(from, to);
  }
  Status exchange(const std::string& a, const std::string& b) override {
    return base_.exchange(a, b);
  }
  Status remove_file(const std::string& path) override { return base_.remove_file(path); }
  Status remove_dir(const std::string& path) override { return base_.remove_dir(path); }
  Status make_dirs(const std::string& path) override { return base_.make_dirs(path); }
  StatusOr<std::vector<std::string>> list_dir(const std::string& path) override {
    return base_.list_dir(path);
  }
  bool file_exists(const std::string& path) override { return base_.file_exists(path); }
  StatusOr<uint64_t> file_size(const std::string& path) override { return base_.file_size(path); }
  Status sync_dir(const std::string& path) override { return base_.sync_dir(path); }
  StatusOr<uint64_t> free_bytes(const std::string& path) override { return base_.free_bytes(path); }

 private:
  class CountingFile : public RandomAccessFile {
   public:
    CountingFile(std::unique_ptr<RandomAccessFile> f, std::atomic<uint64_t>& counter)
        : f_(std::move(f)), counter_(counter) {}
    Status read_at(uint64_t offset, size_t n, void* dst) const override {
      counter_ += n;
      return f_->read_at(offset, n, dst);
    }
    uint64_t size() const override { return f_->size(); }
    const std::string& path() const override { return f_->path(); }

   private:
    std::unique_ptr<RandomAccessFile> f_;
    std::atomic<uint64_t>& counter_;
  };
  Storage& base_;
  std::atomic<uint64_t> bytes_read_{0};
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int run_ckpt_benchmark(const CkptBenchOptions& o, Communicator& comm) {
  const bool lead = comm.rank() == 0;
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "error: rank %d: %s\n", comm.rank(), s.message().c_str());
    return 1;
  };
  auto source = ModelSource::open(o.model, 42);
  if (!source.ok()) return fail(source.status());
  EngineOptions eo;
  eo.model_config = (*source)->config();
  eo.optimizer = *optim::optimizer_spec_from_json("AdamW", {{"lr", 1e-4}});
  eo.zero.stage = o.stage;
  auto engine_or = Engine::create(std::move(eo), (*source)->init_fn(), &comm);
  if (!engine_or.ok()) return fail(engine_or.status());
  Engine& engine = **engine_or;

  // Every rank must use the same directory: rank 0 picks it and broadcasts the name.
  char dir[512] = {};
  bool own_dir = o.dir.empty();
  if (lead) {
    std::string d = o.dir;
    if (d.empty()) {
      std::string tmpl =
          (std::filesystem::temp_directory_path() / "zero_bench_ckpt_XXXXXX").string();
      if (!mkdtemp(tmpl.data())) return fail(io_error("mkdtemp failed"));
      d = tmpl;
    }
    std::snprintf(dir, sizeof dir, "%s", d.c_str());
  }
  // The name travels as 2-byte elements (broadcast moves bytes verbatim).
  if (Status b = comm.broadcast(dir, sizeof dir / 2, DType::kBF16, 0); !b.ok()) return fail(b);

  auto request = engine_save_request(engine);
  if (!request.ok()) return fail(request.status());
  checkpoint::SaveRequest& r = *request;
  r.out_dir = dir;
  r.tag = "bench";
  r.tag_validation = checkpoint::TagValidation::kIgnore;
  // Why: time the save from a common start.
  if (Status b = comm.barrier(); !b.ok()) return fail(b);
  auto t0 = std::chrono::steady_clock::now();
  auto saved = checkpoint::save_checkpoint(*default_storage(), comm, r);
  if (!saved.ok()) return fail(saved.status());
  const double save_s = seconds_since(t0);

  const int64_t model_state_bytes = engine.shard_layout().total_numel() * 12;  // master + 2 moments
  if (lead) {
    std::printf(
        "zero bench ckpt: %s, %.2fM params, saved by %d rank(s) at stage %d in %.3f s "
        "(%.1f MB of fp32 master + moments)\n",
        o.model.c_str(), static_cast<double>(engine.shard_layout().total_numel()) / 1e6,
        comm.world_size(), o.stage, save_s, static_cast<double>(model_state_bytes) / 1e6);
    std::printf("%-12s %-8s %12s %14s %12s %14s\n", "load world", "verify", "load s", "bytes read",
                "share", "read / share");
    CountingStorage counting(*default_storage());
    for (int m : o.load_worlds) {
      sharding::ShardLayout target(engine.layout(), m, 0);
      for (bool verify : {false, true}) {
        counting.reset();
        auto t1 = std::chrono::steady_clock::now();
        auto ck = checkpoint::open_checkpoint(counting, dir, "", verify);
        if (!ck.ok()) return fail(ck.status());
        for (int u = 0; u < target.num_units(); ++u) {
          const int64_t begin = target.shard_begin(u), n = target.unit(u).shard_numel;
          std::vector<float> a(static_cast<size_t>(n)), b(a.size()), c(a.size());
          Status rs = (*ck)->read_partition(u, begin, begin + n, a.data(), b.data(), c.data());
          if (!rs.ok()) return fail(rs);
        }
        const double load_s = seconds_since(t1);
        const double share = static_cast<double>(model_state_bytes) / m;
        std::printf("%-12d %-8s %12.3f %14llu %12.0f %14.2f\n", m, verify ? "on" : "off", load_s,
                    static_cast<unsigned long long>(counting.bytes_read()), share,
                    static_cast<double>(counting.bytes_read()) / share);
      }
    }
    std::printf(
        "share = model state bytes / load world (what rank 0 of that world owns); verify on "
        "adds one full read of each rank file it touches (checksums)\n");
    if (own_dir) (void)default_storage()->remove_dir(dir);
  }
  // Why: no rank leaves while rank 0 still reads the files.
  if (Status b = comm.barrier(); !b.ok()) return fail(b);
  return 0;
}

}  // namespace zero::runtime
