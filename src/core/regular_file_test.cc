// read_regular_file: regular files are read whole; devices, FIFOs, directories and files over the
// limit are refused with a message naming the path (and the limit), without blocking.
#include "core/regular_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace zero {
namespace {

class RegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_regular_file_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  std::filesystem::path dir_;
};

TEST_F(RegularFileTest, ReadsARegularFileWhole) {
  std::string bytes = "{\"a\": 1}\n";
  bytes += std::string(5000, ' ');
  auto got = read_regular_file(write("c.json", bytes), 1 << 20, "a test file");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, bytes);
  auto empty = read_regular_file(write("empty", ""), 10, "a test file");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST_F(RegularFileTest, SizeLimitIsInclusiveAndNamed) {
  auto at_limit = read_regular_file(write("100", std::string(100, 'x')), 100, "a test file");
  ASSERT_TRUE(at_limit.ok());
  EXPECT_EQ(at_limit->size(), 100u);
  std::string p = write("101", std::string(101, 'x'));
  auto over = read_regular_file(p, 100, "a test file");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), p + ": larger than the 100 bytes limit for a test file");
  EXPECT_EQ(format_byte_limit(16u << 20), "16 MiB");
  EXPECT_EQ(format_byte_limit(3 << 10), "3 KiB");
}

TEST_F(RegularFileTest, MissingFileIsNotFound) {
  auto got = read_regular_file((dir_ / "nope").string(), 100, "a test file");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("nope: no such file"), std::string::npos);
}

TEST_F(RegularFileTest, RefusesDevicesDirectoriesAndFifos) {
  // /dev/zero never ends and a FIFO without a writer blocks a plain open(); both must be refused
  // up front. (Before: the config loader read /dev/zero until std::bad_alloc and hung on a FIFO.)
  auto zero = read_regular_file("/dev/zero", 1 << 20, "a test file");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(),
            "/dev/zero: is a character device, not a regular file (expected a test file)");

  auto dir = read_regular_file(dir_.string(), 1 << 20, "a test file");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);

  std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto got = read_regular_file(fifo, 1 << 20, "a test file");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            fifo + ": is a FIFO (named pipe), not a regular file (expected a test file)");
}

TEST_F(RegularFileTest, FollowsSymlinksToRegularFilesOnly) {
  std::string target = write("target", "abc");
  std::filesystem::create_symlink(target, dir_ / "link");
  auto got = read_regular_file((dir_ / "link").string(), 100, "a test file");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "abc");
  std::filesystem::create_symlink("/dev/zero", dir_ / "zero_link");
  EXPECT_FALSE(read_regular_file((dir_ / "zero_link").string(), 100, "a test file").ok());
}

}  // namespace
}  // namespace zero
