// Storage: POSIX behaviour on a temp dir, the atomic-write helper, and every injected fault
// surfacing as a Status that names the path.
#include "core/storage.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

namespace zero {
namespace {

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_storage_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(storage_->make_dirs(dir_.string()).ok());
  }
  void TearDown() override { ASSERT_TRUE(storage_->remove_dir(dir_.string()).ok()); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  Storage* storage_ = default_storage();
  std::filesystem::path dir_;
};

TEST_F(StorageTest, WriteReadRoundTrip) {
  auto file = storage_->open_write(path("a.bin"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  ASSERT_TRUE((*file)->append("hello ").ok());
  ASSERT_TRUE((*file)->append("world").ok());
  EXPECT_EQ((*file)->size(), 11u);
  ASSERT_TRUE((*file)->write_at(0, "J", 1).ok());
  ASSERT_TRUE((*file)->flush().ok());
  ASSERT_TRUE((*file)->sync().ok());
  ASSERT_TRUE((*file)->close().ok());
  EXPECT_FALSE((*file)->append("x").ok());

  auto size = storage_->file_size(path("a.bin"));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 11u);
  auto reader = storage_->open_read(path("a.bin"));
  ASSERT_TRUE(reader.ok());
  char buf[5];
  ASSERT_TRUE((*reader)->read_at(6, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
  Status past_end = (*reader)->read_at(8, 5, buf);
  EXPECT_EQ(past_end.code(), StatusCode::kDataLoss);
  EXPECT_NE(past_end.message().find("a.bin"), std::string::npos);
  auto all = read_file(*storage_, path("a.bin"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, "Jello world");
  // A limit: the file's size is checked before anything is read.
  EXPECT_EQ(*read_file(*storage_, path("a.bin"), 11), "Jello world");
  auto over = read_file(*storage_, path("a.bin"), 10);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("a.bin: 11 bytes, more than the 10 bytes"),
            std::string::npos)
      << over.status().message();
}

TEST_F(StorageTest, DirectoryOperations) {
  ASSERT_TRUE(storage_->make_dirs(path("x/y/z")).ok());
  ASSERT_TRUE(storage_->make_dirs(path("x/y/z")).ok());  // idempotent
  ASSERT_TRUE(write_file_atomically(*storage_, path("x/b"), "2").ok());
  ASSERT_TRUE(write_file_atomically(*storage_, path("x/a"), "1").ok());
  auto names = storage_->list_dir(path("x"));
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "y"}));
  EXPECT_TRUE(storage_->file_exists(path("x/a")));
  EXPECT_FALSE(storage_->file_exists(path("x/a.tmp")));
  ASSERT_TRUE(storage_->rename(path("x/a"), path("x/b")).ok());
  EXPECT_EQ(*read_file(*storage_, path("x/b")), "1");
  ASSERT_TRUE(storage_->remove_file(path("x/b")).ok());
  EXPECT_EQ(storage_->remove_file(path("x/b")).code(), StatusCode::kNotFound);
  ASSERT_TRUE(storage_->sync_dir(path("x")).ok());
  ASSERT_TRUE(storage_->remove_dir(path("x")).ok());
  EXPECT_FALSE(storage_->file_exists(path("x")));
  ASSERT_TRUE(storage_->remove_dir(path("x")).ok());  // absent is fine
  EXPECT_EQ(storage_->list_dir(path("x")).status().code(), StatusCode::kNotFound);
  auto free = storage_->free_bytes(dir_.string());
  ASSERT_TRUE(free.ok());
  EXPECT_GT(*free, 0u);
}

// exchange swaps two directories atomically (used to replace a checkpoint tag); a missing side is
// an error naming it, and the default Storage says it cannot.
TEST_F(StorageTest, ExchangeSwapsTwoDirectories) {
  ASSERT_TRUE(storage_->make_dirs(path("a")).ok());
  ASSERT_TRUE(storage_->make_dirs(path("b")).ok());
  ASSERT_TRUE(write_file_atomically(*storage_, path("a/x"), "from a").ok());
  ASSERT_TRUE(write_file_atomically(*storage_, path("b/y"), "from b").ok());
  Status s = storage_->exchange(path("a"), path("b"));
  if (s.code() == StatusCode::kUnimplemented) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(storage_->file_exists(path("a/y")));
  EXPECT_TRUE(storage_->file_exists(path("b/x")));
  s = storage_->exchange(path("a"), path("missing"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s.message();
}

// Every reader built on Storage (checkpoint manifests, metrics, safetensors and their index) gets
// this: a FIFO is refused without waiting for a writer, a device without reading it.
TEST_F(StorageTest, OpenReadRefusesFifosAndDevices) {
  std::string fifo = path("manifest.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = storage_->open_read(fifo);  // before: blocked forever in open()
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(), fifo + ": is a FIFO (named pipe), not a regular file");
  auto z = storage_->open_read("/dev/zero");
  ASSERT_FALSE(z.ok());
  EXPECT_EQ(z.status().message(), "/dev/zero: is a character device, not a regular file");
}

TEST_F(StorageTest, ErrorsNamePathAndErrnoText) {
  auto missing = storage_->open_read(path("nope"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  auto bad = storage_->open_write(path("no/such/dir/f"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kIoError);
  EXPECT_NE(bad.status().message().find("no/such/dir/f"), std::string::npos);
  EXPECT_NE(bad.status().message().find("No such file or directory"), std::string::npos);
  EXPECT_FALSE(storage_->open_read(dir_.string()).ok());
}

TEST(MemoryFile, BoundsChecked) {
  std::string bytes = "abcdef";
  auto file = memory_file(bytes, "mem");
  char buf[3];
  ASSERT_TRUE(file->read_at(3, 3, buf).ok());
  EXPECT_EQ(std::string(buf, 3), "def");
  EXPECT_FALSE(file->read_at(4, 3, buf).ok());
  EXPECT_FALSE(file->read_at(UINT64_MAX, 1, buf).ok());
  EXPECT_TRUE(file->read_at(6, 0, buf).ok());
}

class FaultTest : public StorageTest {
 protected:
  FaultInjectingStorage faulty_{default_storage()};
};

TEST_F(FaultTest, FailNthWrite) {
  faulty_.fail_nth(FaultOp::kWrite, 2);
  auto file = faulty_.open_write(path("f"));
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->append("aa").ok());
  Status s = (*file)->append("bb");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(path("f")), std::string::npos);
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos);
  EXPECT_TRUE((*file)->append("cc").ok());  // one-shot
  ASSERT_TRUE((*file)->close().ok());
  EXPECT_EQ(*read_file(faulty_, path("f")), "aacc");
  EXPECT_EQ(faulty_.count(FaultOp::kWrite), 3);
}

TEST_F(FaultTest, DiskFullWritesWhatFits) {
  faulty_.disk_full_after(5);
  auto file = faulty_.open_write(path("f"));
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->append("abc").ok());
  Status s = (*file)->append("defg");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos);
  EXPECT_FALSE((*file)->append("h").ok());
  ASSERT_TRUE((*file)->close().ok());
  EXPECT_EQ(*read_file(faulty_, path("f")), "abcde");
  EXPECT_EQ(faulty_.bytes_written(), 5u);
}

TEST_F(FaultTest, ShortWrite) {
  faulty_.short_write_nth(1, 2);
  auto file = faulty_.open_write(path("f"));
  ASSERT_TRUE(file.ok());
  Status s = (*file)->append("abcdef");
  EXPECT_NE(s.message().find("short write: 2 of 6"), std::string::npos) << s.message();
  ASSERT_TRUE((*file)->close().ok());
  EXPECT_EQ(*read_file(faulty_, path("f")), "ab");
}

TEST_F(FaultTest, AtomicWriteLeavesOldContentOnEveryFault) {
  ASSERT_TRUE(write_file_atomically(faulty_, path("f"), "old").ok());
  const int64_t syncs = faulty_.count(FaultOp::kSync);
  EXPECT_EQ(syncs, 2);  // the file and its directory
  for (FaultOp op : {FaultOp::kWrite, FaultOp::kSync, FaultOp::kRename}) {
    faulty_.reset();
    faulty_.fail_nth(op, 1);
    Status s = write_file_atomically(faulty_, path("f"), "new");
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_EQ(*read_file(faulty_, path("f")), "old");
    EXPECT_FALSE(faulty_.file_exists(path("f.tmp")));
  }
  faulty_.reset();
  faulty_.disk_full_after(1);
  EXPECT_FALSE(write_file_atomically(faulty_, path("f"), "new").ok());
  EXPECT_EQ(*read_file(faulty_, path("f")), "old");
  faulty_.reset();
  ASSERT_TRUE(write_file_atomically(faulty_, path("f"), "new").ok());
  EXPECT_EQ(*read_file(faulty_, path("f")), "new");
}

TEST_F(FaultTest, FailNthRead) {
  ASSERT_TRUE(write_file_atomically(faulty_, path("f"), "abc").ok());
  faulty_.fail_nth(FaultOp::kRead, 1);
  EXPECT_EQ(read_file(faulty_, path("f")).status().code(), StatusCode::kIoError);
  EXPECT_TRUE(read_file(faulty_, path("f")).ok());
}

}  // namespace
}  // namespace zero
