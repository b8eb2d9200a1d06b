// Issue 32 item 1, nothing left behind: swap directories of runs that were SIGKILLed (real child
// processes, really killed) are reclaimed by the next swapper on the same nvme_path; those of live
// runs — in another process or in this one — are never touched.
#include "offload/swap_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "offload/nvme_swapper.h"

namespace zero::offload {
namespace {

namespace fs = std::filesystem;

std::string fresh_root(const char* name) {
  const std::string root = fmt::format("/tmp/zero_swap_dir_test_{}_{}", ::getpid(), name);
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// A child process that makes a swapper on `nvme_path` with one 1 MiB swap file written, reports
// its swap file's path on a pipe and then waits to be killed. Returns its pid and the path.
struct Child {
  pid_t pid = -1;
  std::string swap_file;
};
Child start_swapping_child(const std::string& nvme_path) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    NvmeSwapperOptions o;
    o.nvme_path = nvme_path;
    o.backend = IoBackend::kThreadPool;
    auto swapper = NvmeSwapper::create(o);
    if (!swapper.ok() || !(*swapper)->add_file("param", 1 << 20).ok()) ::_exit(3);
    std::vector<std::byte> data(1 << 20, std::byte{7});
    if (!(*swapper)->write("param", 0, data.size(), data.data()).ok()) ::_exit(4);
    const std::string path = (*swapper)->file_path("param") + "\n";
    if (::write(fds[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) ::_exit(5);
    for (;;) ::pause();  // until SIGKILL: no destructor runs
  }
  ::close(fds[1]);
  std::string line;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(fds[0]);
  return {pid, line};
}

void sigkill(pid_t pid) {
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST(SwapDir, SigkilledRunIsReclaimedLiveRunsAreNot) {
  const std::string root = fresh_root("kill");
  Child dead = start_swapping_child(root);
  Child live = start_swapping_child(root);
  ASSERT_FALSE(dead.swap_file.empty());
  ASSERT_FALSE(live.swap_file.empty());
  sigkill(dead.pid);
  // The killed run's files are still there: nothing ran at its death.
  ASSERT_TRUE(fs::exists(dead.swap_file));
  const std::string dead_dir = fs::path(dead.swap_file).parent_path().string();
  const std::string live_dir = fs::path(live.swap_file).parent_path().string();

  // A live swapper of this process too: its lock is held through another open file description.
  NvmeSwapperOptions o;
  o.nvme_path = root;
  o.backend = IoBackend::kThreadPool;
  auto mine = NvmeSwapper::create(o);
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  ASSERT_TRUE((*mine)->add_file("param", 4096).ok());
  const std::string my_dir = fs::path((*mine)->file_path("param")).parent_path().string();

  // Creating it reclaimed the dead run's directory, and only that one.
  EXPECT_FALSE(fs::exists(dead_dir)) << dead_dir;
  EXPECT_TRUE(fs::exists(live.swap_file));
  EXPECT_EQ(entries(root), (std::set<std::string>{fs::path(live_dir).filename().string(),
                                                  fs::path(my_dir).filename().string()}));
  // Nothing else to reclaim while both are alive.
  EXPECT_TRUE(reclaim_dead_swap_dirs(root).empty());

  // The other process dies too: the next reclaim says what it removed (files and bytes).
  sigkill(live.pid);
  std::vector<ReclaimedSwapDir> removed = reclaim_dead_swap_dirs(root);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].path, live_dir);
  EXPECT_EQ(removed[0].files, 1);
  EXPECT_EQ(removed[0].bytes, 1 << 20);
  EXPECT_NE(removed[0].holder.find("pid " + std::to_string(live.pid)), std::string::npos)
      << removed[0].holder;
  EXPECT_EQ(entries(root), std::set<std::string>{fs::path(my_dir).filename().string()});
  mine->reset();
  EXPECT_TRUE(fs::is_empty(root));
  fs::remove_all(root);
}

TEST(SwapDir, LeavesWhatTheProtocolDidNotMake) {
  const std::string root = fresh_root("foreign");
  // An older zero's directory (no lock file), a symlink, a file, a directory being created.
  fs::create_directories(root + "/zero_swap_pid1_rank0_old");
  std::ofstream(root + "/zero_swap_pid1_rank0_old/zero_rank0_param.swp") << "data";
  fs::create_directories(root + "/target");
  std::ofstream(root + "/target/.lock") << "";
  fs::create_directory_symlink(root + "/target", root + "/zero_swap_link");
  std::ofstream(root + "/zero_swap_file") << "x";
  fs::create_directories(root + "/.zero_swap_new_pid1_abcdef");  // young: may be starting
  std::ofstream(root + "/.zero_swap_new_pid1_abcdef/.lock") << "";
  const std::set<std::string> before = entries(root);
  EXPECT_TRUE(reclaim_dead_swap_dirs(root).empty());
  EXPECT_EQ(entries(root), before);
  EXPECT_TRUE(fs::exists(root + "/target/.lock"));
  fs::remove_all(root);
}

// A process killed between making its staging directory and publishing it: once the staging
// directory is older than the grace period and its lock is free, it goes too.
TEST(SwapDir, StaleStagingDirectoryIsReclaimed) {
  const std::string root = fresh_root("stale");
  const std::string stale = root + "/.zero_swap_new_pid1_old123";
  fs::create_directories(stale);
  std::ofstream(stale + "/.lock") << "pid 1 host h rank 0\n";
  const timeval old[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimes(stale.c_str(), old), 0);
  std::vector<ReclaimedSwapDir> removed = reclaim_dead_swap_dirs(root);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].path, stale);
  EXPECT_TRUE(removed[0].complete);
  EXPECT_TRUE(fs::is_empty(root));
  fs::remove_all(root);
}

TEST(SwapDir, CreateMakesALockedPrivateDirectoryAndRemovesIt) {
  const std::string root = fresh_root("create");
  std::string path;
  {
    auto dir = SwapDir::create(root, 5);
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    path = (*dir)->path();
    EXPECT_EQ(fs::path(path).filename().string().rfind(
                  fmt::format("zero_swap_pid{}_rank5_", ::getpid()), 0),
              0u)
        << path;
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // Held: another open file description cannot take the lock.
    const int fd = ::open((path + "/.lock").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
    ::close(fd);
    EXPECT_EQ(entries(root), std::set<std::string>{fs::path(path).filename().string()});
  }
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(root);
}

}  // namespace
}  // namespace zero::offload
