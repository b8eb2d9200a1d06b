// NvmeSwapper against an in-memory mirror: random tiles, many outstanding tickets, every backend
// and submission policy, injected errors, disk full, buffered fallback, cleanup and fd hygiene.
#include "offload/nvme_swapper.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace zero::offload {
namespace {

namespace fs = std::filesystem;

int count_open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// A fresh, not-yet-existing directory two levels deep under `root` (so create() makes both).
std::string fresh_dir(const std::string& root) {
  static std::atomic<int> counter{0};
  return fmt::format("{}/zero_nvme_test_{}_{}/nested", root, ::getpid(), counter++);
}

std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
  return v;
}

struct Mode {
  IoBackend backend;
  int queue_depth;
  int parallelism;
  bool single_submit;
  bool overlap_events;
  uint64_t block_size_bytes;
};

std::string mode_name(const testing::TestParamInfo<Mode>& info) {
  const Mode& m = info.param;
  return fmt::format("{}_qd{}_t{}_{}_{}_bs{}", io_backend_name(m.backend), m.queue_depth,
                     m.parallelism, m.single_submit ? "single" : "batch",
                     m.overlap_events ? "overlap" : "drain", m.block_size_bytes);
}

class NvmeSwapperModeTest : public testing::TestWithParam<Mode> {
 protected:
  NvmeSwapperOptions options(const std::string& root = "/tmp") const {
    NvmeSwapperOptions o;
    o.nvme_path = fresh_dir(root);
    o.rank = 3;
    o.backend = GetParam().backend;
    o.aio.queue_depth = GetParam().queue_depth;
    o.aio.intra_op_parallelism = GetParam().parallelism;
    o.aio.single_submit = GetParam().single_submit;
    o.aio.overlap_events = GetParam().overlap_events;
    o.aio.block_size_bytes = GetParam().block_size_bytes;
    return o;
  }
};

// Random tiles at random aligned slots, written and read back with many tickets outstanding,
// through aligned and unaligned buffers; the mirror is the oracle.
TEST_P(NvmeSwapperModeTest, RandomTilesMatchMirror) {
  const int fds_before = count_open_fds();
  NvmeSwapperOptions opts = options();
  std::string file_path;
  {
    auto swapper = NvmeSwapper::create(opts);
    ASSERT_TRUE(swapper.ok()) << swapper.status().to_string();
    NvmeSwapper& s = **swapper;
    EXPECT_EQ(s.backend(), GetParam().backend);
    const uint64_t capacity_bytes = 24 << 20;
    ASSERT_TRUE(s.add_file("exp_avg", capacity_bytes).ok());
    ASSERT_TRUE(s.add_file("master", 1 << 20).ok());
    file_path = s.file_path("exp_avg");
    EXPECT_EQ(fs::path(file_path).filename(), "zero_rank3_exp_avg.swp");
    EXPECT_TRUE(s.direct_io());

    std::mt19937_64 rng(42);
    std::vector<std::byte> mirror(capacity_bytes);
    const size_t sizes[] = {
        1, 7, 4095, 4096, 4097, 65536 + 3, 1 << 20, 1 << 20 | 1, (3 << 20) + 12345, 5 << 20};
    for (int round = 0; round < 4; ++round) {
      // Non-overlapping slots so outstanding writes do not race each other.
      struct Tile {
        uint64_t offset_bytes;
        std::vector<std::byte> data;
        size_t misalign;
        std::vector<std::byte> storage;  // write source / read destination with misalignment
      };
      std::vector<Tile> tiles;
      uint64_t cursor = (rng() % 8) * kDirectIoAlignBytes;
      for (size_t n : sizes) {
        if (cursor + NvmeSwapper::slot_bytes(n) > capacity_bytes) break;
        Tile t{cursor, random_bytes(rng, n), static_cast<size_t>(rng() % 3) * 13, {}};
        t.storage.resize(n + t.misalign + 1);
        std::memcpy(t.storage.data() + t.misalign, t.data.data(), n);
        cursor += NvmeSwapper::slot_bytes(n) + (rng() % 4) * kDirectIoAlignBytes;
        tiles.push_back(std::move(t));
      }
      std::vector<Ticket> tickets;
      for (auto& t : tiles) {
        auto ticket =
            s.submit_write("exp_avg", t.offset_bytes, t.data.size(), t.storage.data() + t.misalign);
        ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
        tickets.push_back(*ticket);
        std::memcpy(mirror.data() + t.offset_bytes, t.data.data(), t.data.size());
        // The padding of a slot is clobbered: mirror it as zeros.
        std::memset(mirror.data() + t.offset_bytes + t.data.size(), 0,
                    NvmeSwapper::slot_bytes(t.data.size()) - t.data.size());
      }
      if (round % 2 == 0) {
        for (Ticket t : tickets) ASSERT_TRUE(s.wait(t).ok());
      } else {
        ASSERT_TRUE(s.wait_all().ok());
      }
      // Read whole random windows back (aligned start, odd length) and compare with the mirror.
      std::vector<std::pair<uint64_t, std::vector<std::byte>>> reads;
      tickets.clear();
      for (int i = 0; i < 12; ++i) {
        const uint64_t off =
            (rng() % (capacity_bytes / kDirectIoAlignBytes / 2)) * kDirectIoAlignBytes;
        const size_t n = 1 + rng() % (capacity_bytes - off - kDirectIoAlignBytes);
        reads.emplace_back(off, std::vector<std::byte>(n));
      }
      for (auto& [off, buf] : reads) {
        auto ticket = s.submit_read("exp_avg", off, buf.size(), buf.data());
        ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
        tickets.push_back(*ticket);
      }
      for (size_t i = 0; i < reads.size(); ++i) {
        ASSERT_TRUE(s.wait(tickets[i]).ok());
        const auto& [off, buf] = reads[i];
        ASSERT_EQ(std::memcmp(buf.data(), mirror.data() + off, buf.size()), 0)
            << "round " << round << " read " << i << " at " << off << " of " << buf.size();
      }
    }
    // Synchronous helpers and a second class in the same swapper.
    auto page = random_bytes(rng, 5000);
    ASSERT_TRUE(s.write("master", 8192, page.size(), page.data()).ok());
    std::vector<std::byte> back(page.size());
    ASSERT_TRUE(s.read("master", 8192, back.size(), back.data()).ok());
    EXPECT_EQ(back, page);
    EXPECT_TRUE(fs::exists(file_path));
  }
  EXPECT_FALSE(fs::exists(file_path));
  EXPECT_FALSE(fs::exists(fs::path(opts.nvme_path).parent_path()));
  EXPECT_EQ(count_open_fds(), fds_before);
}

std::vector<Mode> all_modes() {
  std::vector<Mode> modes = {
      {IoBackend::kIoUring, 8, 1, false, true, 1 << 20},
      {IoBackend::kIoUring, 1, 1, false, true, 1 << 20},
      {IoBackend::kIoUring, 4, 2, true, true, 64 << 10},
      {IoBackend::kIoUring, 8, 1, false, false, 1 << 20},
      {IoBackend::kIoUring, 3, 3, true, false, 4096},
      {IoBackend::kThreadPool, 8, 2, false, true, 1 << 20},
      {IoBackend::kThreadPool, 2, 1, false, false, 8192},
  };
#if defined(ZERO_WITH_LIBAIO)
  modes.push_back({IoBackend::kLibaio, 8, 1, false, true, 1 << 20});
  modes.push_back({IoBackend::kLibaio, 4, 2, true, false, 64 << 10});
#endif
  return modes;
}
INSTANTIATE_TEST_SUITE_P(Modes, NvmeSwapperModeTest, testing::ValuesIn(all_modes()), mode_name);

// ---- fault injection ------------------------------------------------------------------------

class CountingHook : public NvmeFaultHook {
 public:
  std::atomic<int64_t> completions{0};
  int64_t fail_nth = -1;  // 1-based completion to fail with fail_errno
  int fail_errno = EIO;
  int64_t shorten_nth = -1;  // 1-based completion to report half done
  int preallocate_errno = 0;
  int uring_init_errno = 0;
  int64_t on_completion(const IoRequestInfo& request, int64_t result) override {
    const int64_t n = ++completions;
    if (n == fail_nth) return -fail_errno;
    if (n == shorten_nth) return result / 2;
    return result;
  }
  int on_preallocate(const std::string&, uint64_t) override { return preallocate_errno; }
  int on_engine_init(IoBackend backend) override {
    return backend == IoBackend::kIoUring ? uring_init_errno : 0;
  }
};

NvmeSwapperOptions basic_options(NvmeFaultHook* hook, const std::string& root = "/tmp") {
  NvmeSwapperOptions o;
  o.nvme_path = fresh_dir(root);
  o.fault_hook = hook;
  o.aio.block_size_bytes = 64 << 10;
  o.aio.queue_depth = 4;
  return o;
}

TEST(NvmeSwapperFaultTest, InjectedIoErrorSurfacesWithFileOffsetAndErrno) {
  CountingHook hook;
  hook.fail_nth = 5;
  hook.fail_errno = EIO;
  auto swapper = NvmeSwapper::create(basic_options(&hook));
  ASSERT_TRUE(swapper.ok());
  NvmeSwapper& s = **swapper;
  ASSERT_TRUE(s.add_file("param", 4 << 20).ok());
  std::vector<std::byte> buf(1 << 20, std::byte{7});  // 16 chunks
  Status status = s.write("param", 0, buf.size(), buf.data());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("zero_rank0_param.swp"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("at offset"), std::string::npos);
  EXPECT_NE(status.message().find(std::strerror(EIO)), std::string::npos);
  // The swapper keeps working after a failed request.
  EXPECT_TRUE(s.write("param", 0, buf.size(), buf.data()).ok());
}

TEST(NvmeSwapperFaultTest, ShortWriteAndEnospcOnCompletionAreErrors) {
  CountingHook hook;
  hook.shorten_nth = 2;
  auto swapper = NvmeSwapper::create(basic_options(&hook));
  ASSERT_TRUE(swapper.ok());
  NvmeSwapper& s = **swapper;
  ASSERT_TRUE(s.add_file("param", 4 << 20).ok());
  std::vector<std::byte> buf(256 << 10);
  auto t1 = s.submit_write("param", 0, buf.size(), buf.data());
  auto t2 = s.submit_write("param", 1 << 20, buf.size(), buf.data());
  ASSERT_TRUE(t1.ok() && t2.ok());
  Status status = s.wait_all();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("short NVMe write"), std::string::npos) << status.message();

  hook.completions = 0;
  hook.shorten_nth = -1;
  hook.fail_nth = 1;
  hook.fail_errno = ENOSPC;
  status = s.write("param", 0, buf.size(), buf.data());
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find(std::strerror(ENOSPC)), std::string::npos);
  // Waiting twice on a ticket is a caller bug reported as FAILED_PRECONDITION.
  EXPECT_EQ(s.wait(*t1).code(), StatusCode::kFailedPrecondition);
}

TEST(NvmeSwapperFaultTest, DiskFullAtPreallocationNamesPathAndBytes) {
  CountingHook hook;
  NvmeSwapperOptions o = basic_options(&hook);
  auto swapper = NvmeSwapper::create(o);
  ASSERT_TRUE(swapper.ok());
  // Larger than the disk: refused before fallocate.
  Status status = (*swapper)->add_file("param", uint64_t{1} << 50);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find(o.nvme_path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(std::to_string(uint64_t{1} << 50)), std::string::npos);
  EXPECT_NE(status.message().find("bytes free"), std::string::npos);
  // fallocate itself reporting ENOSPC (a racing writer filled the disk).
  hook.preallocate_errno = ENOSPC;
  status = (*swapper)->add_file("master", 1 << 20);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.to_string();
  EXPECT_NE(status.message().find("1048576 bytes needed"), std::string::npos) << status.message();
  EXPECT_FALSE(fs::exists(fs::path(o.nvme_path) / "zero_rank0_master.swp"));
}

// A real failure from the kernel: RLIMIT_FSIZE makes fallocate fail with EFBIG in a child.
TEST(NvmeSwapperFaultTest, FileSizeLimitAtPreallocationIsAnError) {
  const std::string dir = fresh_dir("/tmp");
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    NvmeSwapperOptions o;
    o.nvme_path = dir;
    auto swapper = NvmeSwapper::create(o);
    if (!swapper.ok()) ::_exit(2);
    Status status = (*swapper)->add_file("param", 8 << 20);
    const bool good =
        !status.ok() && status.message().find("zero_rank0_param.swp") != std::string::npos;
    swapper->reset();
    ::_exit(good && !fs::exists(dir) ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

TEST(NvmeSwapperFallbackTest, IoUringUnavailableFallsBack) {
  CountingHook hook;
  hook.uring_init_errno = ENOSYS;
  auto swapper = NvmeSwapper::create(basic_options(&hook));
  ASSERT_TRUE(swapper.ok());
#if defined(ZERO_WITH_LIBAIO)
  EXPECT_EQ((*swapper)->backend(), IoBackend::kLibaio);
#else
  EXPECT_EQ((*swapper)->backend(), IoBackend::kThreadPool);
#endif
  ASSERT_TRUE((*swapper)->add_file("param", 1 << 20).ok());
  std::vector<std::byte> in(70000, std::byte{3}), out(70000);
  ASSERT_TRUE((*swapper)->write("param", 4096, in.size(), in.data()).ok());
  ASSERT_TRUE((*swapper)->read("param", 4096, out.size(), out.data()).ok());
  EXPECT_EQ(in, out);

  // A forced backend that cannot start is an error, not a silent fallback.
  NvmeSwapperOptions forced = basic_options(&hook);
  forced.backend = IoBackend::kIoUring;
  auto refused = NvmeSwapper::create(forced);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(std::strerror(ENOSYS)), std::string::npos);
  EXPECT_FALSE(fs::exists(fs::path(forced.nvme_path).parent_path()));
}

class RefuseDirectHook : public NvmeFaultHook {
 public:
  int on_open_direct(const std::string&) override { return EINVAL; }
};

// File systems without O_DIRECT answer EINVAL at open (tmpfs before Linux 6.6; this kernel's tmpfs
// accepts it, so the refusal is injected).
TEST(NvmeSwapperFallbackTest, ODirectRefusedSoBufferedIoIsUsed) {
  RefuseDirectHook hook;
  NvmeSwapperOptions o = basic_options(&hook);
  auto swapper = NvmeSwapper::create(o);
  ASSERT_TRUE(swapper.ok());
  NvmeSwapper& s = **swapper;
  ASSERT_TRUE(s.add_file("param", 1 << 20).ok());
  EXPECT_FALSE(s.direct_io());
  std::mt19937_64 rng(7);
  auto in = random_bytes(rng, 300001);
  std::vector<std::byte> out(in.size());
  ASSERT_TRUE(s.write("param", 8192, in.size(), in.data()).ok());
  ASSERT_TRUE(s.read("param", 8192, out.size(), out.data()).ok());
  EXPECT_EQ(in, out);

  o.allow_buffered_fallback = false;
  o.nvme_path = fresh_dir("/tmp");
  auto strict = NvmeSwapper::create(o);
  ASSERT_TRUE(strict.ok());
  Status status = (*strict)->add_file("param", 1 << 20);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find(std::strerror(EINVAL)), std::string::npos) << status.message();
}

// Real tmpfs (/dev/shm): whichever way the kernel answers O_DIRECT, the data round-trips.
TEST(NvmeSwapperFallbackTest, TmpfsRoundTrips) {
  if (!fs::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  auto swapper = NvmeSwapper::create(basic_options(nullptr, "/dev/shm"));
  ASSERT_TRUE(swapper.ok());
  ASSERT_TRUE((*swapper)->add_file("param", 1 << 20).ok());
  std::mt19937_64 rng(9);
  auto in = random_bytes(rng, 123457);
  std::vector<std::byte> out(in.size());
  ASSERT_TRUE((*swapper)->write("param", 0, in.size(), in.data()).ok());
  ASSERT_TRUE((*swapper)->read("param", 0, out.size(), out.data()).ok());
  EXPECT_EQ(in, out);
}

TEST(NvmeSwapperTest, ArgumentErrors) {
  auto swapper = NvmeSwapper::create(basic_options(nullptr));
  ASSERT_TRUE(swapper.ok());
  NvmeSwapper& s = **swapper;
  std::vector<std::byte> buf(8192);
  EXPECT_EQ(s.add_file("bad/name", 4096).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.add_file("param", 8192).ok());
  EXPECT_EQ(s.add_file("param", 8192).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.submit_read("nope", 0, 10, buf.data()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.submit_read("param", 100, 10, buf.data()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(s.submit_read("param", 4096, 4097, buf.data()).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_TRUE(s.read("param", 4096, 4096, buf.data()).ok());
  EXPECT_TRUE(s.read("param", 0, 0, nullptr).ok());
  EXPECT_EQ(s.wait(Ticket{12345}).code(), StatusCode::kFailedPrecondition);

  NvmeSwapperOptions gds = basic_options(nullptr);
  gds.aio.use_gds = true;
  auto refused = NvmeSwapper::create(gds);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
}

TEST(NvmeSwapperTest, ExistingDirectoryIsKeptAndNotRemoved) {
  const std::string dir = fresh_dir("/tmp");
  fs::create_directories(dir);
  {
    NvmeSwapperOptions o;
    o.nvme_path = dir;
    auto swapper = NvmeSwapper::create(o);
    ASSERT_TRUE(swapper.ok());
    ASSERT_TRUE((*swapper)->add_file("param", 4096).ok());
  }
  EXPECT_TRUE(fs::exists(dir));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(fs::path(dir).parent_path());
}

// Ranks (and a rank's parameter and optimizer swappers) share one nvme_path: the directories one
// of them created are removed by whichever finishes last, in either order.
TEST(NvmeSwapperTest, SharedCreatedDirectoryGoesWithTheLastSwapper) {
  for (bool creator_first : {true, false}) {
    const std::string dir = fresh_dir("/tmp");
    NvmeSwapperOptions a, b;
    a.nvme_path = b.nvme_path = dir;
    a.rank = 0;
    b.rank = 1;
    auto first = NvmeSwapper::create(a);  // creates both levels
    ASSERT_TRUE(first.ok());
    auto second = NvmeSwapper::create(b);  // finds them made by a swapper of this run
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE((*first)->add_file("param", 4096).ok());
    ASSERT_TRUE((*second)->add_file("param", 4096).ok());
    if (creator_first) {
      first->reset();
      EXPECT_TRUE(fs::exists(dir)) << "removed while another swapper still had files there";
      second->reset();
    } else {
      second->reset();
      EXPECT_TRUE(fs::exists(dir));
      first->reset();
    }
    EXPECT_FALSE(fs::exists(fs::path(dir).parent_path())) << "creator_first " << creator_first;
  }
}

// Issue 13 item 3: two jobs with one nvme_path (same rank numbers): job B used to truncate and
// overwrite job A's swap files. Each swapper now has its own fresh directory.
TEST(NvmeSwapperTest, TwoJobsOnOneNvmePathKeepTheirOwnFiles) {
  const std::string dir = fresh_dir("/tmp");
  fs::create_directories(dir);
  NvmeSwapperOptions o;
  o.nvme_path = dir;
  auto a = NvmeSwapper::create(o);
  auto b = NvmeSwapper::create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->add_file("param", 4096).ok());
  ASSERT_TRUE((*b)->add_file("param", 4096).ok());
  EXPECT_NE((*a)->file_path("param"), (*b)->file_path("param"));
  std::vector<std::byte> one(4096, std::byte{1}), two(4096, std::byte{2}), back(4096);
  ASSERT_TRUE((*a)->write("param", 0, 4096, one.data()).ok());
  ASSERT_TRUE((*b)->write("param", 0, 4096, two.data()).ok());
  ASSERT_TRUE((*a)->read("param", 0, 4096, back.data()).ok());
  EXPECT_EQ(back, one);
  struct stat st {};
  ASSERT_EQ(::stat(fs::path((*a)->file_path("param")).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  a->reset();
  b->reset();
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(fs::path(dir).parent_path());
}

// Issue 13 item 4: a symlink planted under the swap file's name made the job overwrite the link's
// target. The files live in a fresh 0700 directory and are opened O_EXCL | O_NOFOLLOW.
TEST(NvmeSwapperTest, PlantedSymlinkIsNotFollowed) {
  const std::string dir = fresh_dir("/tmp");
  fs::create_directories(dir);
  const std::string victim = dir + "_victim";
  { std::ofstream(victim) << "precious"; }
  fs::create_symlink(victim, fs::path(dir) / "zero_rank0_param.swp");
  {
    NvmeSwapperOptions o;
    o.nvme_path = dir;
    auto s = NvmeSwapper::create(o);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->add_file("param", 8192).ok());
    std::vector<std::byte> buf(8192, std::byte{7});
    ASSERT_TRUE((*s)->write("param", 0, 8192, buf.data()).ok());
  }
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "precious");
  EXPECT_EQ(fs::file_size(victim), 8u);
  fs::remove(victim);
  fs::remove_all(fs::path(dir).parent_path());
}

// Issue 13 item 4: a world-writable nvme_path without the sticky bit is refused, naming it.
TEST(NvmeSwapperTest, WorldWritableNvmePathWithoutStickyBitIsRefused) {
  const std::string dir = fresh_dir("/tmp");
  fs::create_directories(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  NvmeSwapperOptions o;
  o.nvme_path = dir;
  auto refused = NvmeSwapper::create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(dir), std::string::npos);
  EXPECT_NE(refused.status().message().find("sticky"), std::string::npos);
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
  EXPECT_TRUE(NvmeSwapper::create(o).ok());
  fs::remove_all(fs::path(dir).parent_path());
}

// Many threads submit and wait concurrently on one swapper.
TEST(NvmeSwapperTest, ConcurrentSubmittersFromManyThreads) {
  NvmeSwapperOptions o = basic_options(nullptr);
  o.aio.intra_op_parallelism = 2;
  auto swapper = NvmeSwapper::create(o);
  ASSERT_TRUE(swapper.ok());
  NvmeSwapper& s = **swapper;
  constexpr int kThreads = 4;
  constexpr uint64_t kRegionBytes = 2 << 20;
  ASSERT_TRUE(s.add_file("param", kThreads * kRegionBytes).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int iter = 0; iter < 20; ++iter) {
        const size_t n = 1 + rng() % (kRegionBytes - 1);
        auto in = random_bytes(rng, n);
        std::vector<std::byte> out(n);
        if (!s.write("param", t * kRegionBytes, n, in.data()).ok()) ++failures;
        if (!s.read("param", t * kRegionBytes, n, out.data()).ok() || out != in) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace zero::offload
