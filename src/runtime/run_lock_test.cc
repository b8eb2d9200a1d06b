// RunLock: a second holder of one output directory is refused with the first's pid and host,
// in this process and from another process; the lock goes with its holder.
#include "runtime/run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>
#include <csignal>

#include <filesystem>

#include <fmt/format.h>

namespace zero::runtime {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const char* name) {
  fs::path p =
      fs::temp_directory_path() / ("zero_run_lock_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p.string();
}

// Issue 13 item 2: two jobs in one --output_dir interleaved their checkpoints.
TEST(RunLock, SecondHolderIsRefusedNamingTheFirst) {
  const std::string dir = fresh_dir("second");
  auto first = RunLock::acquire(dir, "zero train");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto second = RunLock::acquire(dir, "zero train");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string& msg = second.status().message();
  EXPECT_NE(msg.find(fmt::format("pid {} host ", ::getpid())), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  first->reset();
  EXPECT_TRUE(RunLock::acquire(dir, "zero train").ok());
  fs::remove_all(dir);
}

TEST(RunLock, AnotherProcessIsRefusedAndAKilledHolderLeavesNoStaleLock) {
  const std::string dir = fresh_dir("process");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = RunLock::acquire(dir, "child");
    char c = lock.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // until killed
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto refused = RunLock::acquire(dir, "parent");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(fmt::format("pid {} host ", child)), std::string::npos)
      << refused.status().message();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(RunLock::acquire(dir, "parent").ok());
  ::close(ready[0]);
  ::close(ready[1]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zero::runtime
