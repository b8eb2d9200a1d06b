// TensorBoard event records against two independent references: a reader written here from the
// format's definition (a bitwise CRC-32C, a protobuf wire decoder), and a file made by
// TensorBoard's own protobuf classes and record writer (tools/golden/make_tfevents_fixture.py),
// matched byte for byte.
#include "runtime/tf_event.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "runtime/tensorboard_monitor.h"

namespace zero::runtime {
namespace {

// ---- the independent reader (nothing here calls tf_event.cc) ----------------------------------

// Bit by bit, from the polynomial (no table).
uint32_t reference_crc32c(std::string_view data) {
  uint32_t crc = ~0u;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t reference_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

template <typename T>
T load_le(std::string_view bytes, size_t at) {
  T v{};
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return v;
}

struct ReadEvent {
  std::optional<double> wall_time;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::string tag;
  std::optional<float> simple_value;
};

// A protobuf wire reader over one message.
struct Wire {
  std::string_view bytes;
  size_t pos = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      EXPECT_LT(pos, bytes.size());
      const auto b = static_cast<unsigned char>(bytes[pos++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  std::string_view length_delimited() {
    const uint64_t n = varint();
    std::string_view out = bytes.substr(pos, n);
    pos += n;
    return out;
  }
};

void decode_summary_value(std::string_view bytes, ReadEvent& ev) {
  Wire w{bytes};
  while (w.pos < bytes.size()) {
    const uint64_t key = w.varint();
    if (key == ((1 << 3) | 2)) {
      ev.tag = std::string(w.length_delimited());
    } else if (key == ((2 << 3) | 5)) {
      const uint32_t bits = load_le<uint32_t>(bytes, w.pos);
      w.pos += 4;
      float f;
      std::memcpy(&f, &bits, 4);
      ev.simple_value = f;
    } else {
      ADD_FAILURE() << "unexpected Summary.Value key " << key;
      return;
    }
  }
}

ReadEvent decode_event(std::string_view bytes) {
  ReadEvent ev;
  Wire w{bytes};
  while (w.pos < bytes.size()) {
    const uint64_t key = w.varint();
    if (key == ((1 << 3) | 1)) {
      const uint64_t bits = load_le<uint64_t>(bytes, w.pos);
      w.pos += 8;
      double d;
      std::memcpy(&d, &bits, 8);
      ev.wall_time = d;
    } else if (key == ((2 << 3) | 0)) {
      ev.step = static_cast<int64_t>(w.varint());
    } else if (key == ((3 << 3) | 2)) {
      ev.file_version = std::string(w.length_delimited());
    } else if (key == ((5 << 3) | 2)) {
      Wire summary{w.length_delimited()};
      while (summary.pos < summary.bytes.size()) {
        EXPECT_EQ(summary.varint(), (1u << 3) | 2) << "Summary.value";
        decode_summary_value(summary.length_delimited(), ev);
      }
    } else {
      ADD_FAILURE() << "unexpected Event key " << key;
      break;
    }
  }
  return ev;
}

// Every record of a file, each CRC checked; a torn or corrupt record fails the test.
std::vector<ReadEvent> read_records(std::string_view file) {
  std::vector<ReadEvent> out;
  size_t pos = 0;
  while (pos < file.size()) {
    EXPECT_GE(file.size() - pos, 12u) << "torn header at " << pos;
    if (file.size() - pos < 12) break;
    const auto length = load_le<uint64_t>(file, pos);
    EXPECT_EQ(load_le<uint32_t>(file, pos + 8),
              reference_mask(reference_crc32c(file.substr(pos, 8))))
        << "length CRC at " << pos;
    EXPECT_GE(file.size() - pos - 12, length + 4) << "torn record at " << pos;
    if (file.size() - pos - 12 < length + 4) break;
    const std::string_view data = file.substr(pos + 12, length);
    EXPECT_EQ(load_le<uint32_t>(file, pos + 12 + length), reference_mask(reference_crc32c(data)))
        << "data CRC at " << pos;
    out.push_back(decode_event(data));
    pos += 12 + length + 4;
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- tests ----------------------------------------------------------------------------------

TEST(TfEvent, Crc32cKnownVectors) {
  // RFC 3720 B.4 check value, and the reference's own agreement on odd inputs.
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(reference_crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  const std::string odd = std::string("\x00\xff\x80 tfevents", 13);
  EXPECT_EQ(crc32c(odd), reference_crc32c(odd));
  EXPECT_EQ(masked_crc32c(odd), reference_mask(reference_crc32c(odd)));
}

// The fixture's events, as make_tfevents_fixture.py lists them.
struct FixtureScalar {
  double wall_time;
  int64_t step;
  std::string tag;
  float value;
};
const std::vector<FixtureScalar>& fixture_scalars() {
  static const std::vector<FixtureScalar> v = {
      {1764300000.25, 1, "Train/Samples/train_loss", 5.546875f},
      {1764300000.5, 1, "Train/Samples/lr", 0.0f},
      {1764300001.0, 0, "Train/Samples/loss_scale", 65536.0f},
      {0.0, 300, "Eval/Samples/eval_loss", -1.5f},
      {1764300002.75, 1234567890123, "Train/Samples/" + std::string(150, 'x'), 3.0e-7f},
  };
  return v;
}

TEST(TfEvent, MatchesTensorBoardsOwnWriterByteForByte) {
  const std::string golden =
      slurp(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/tfevents/tensorboard_writer.tfevents");
  ASSERT_FALSE(golden.empty());
  std::string ours = tfrecord(file_version_event(1764300000.0));
  for (const auto& s : fixture_scalars()) {
    ours += tfrecord(scalar_event(s.wall_time, s.step, s.tag, s.value));
  }
  EXPECT_EQ(ours.size(), golden.size());
  EXPECT_TRUE(ours == golden) << "our records differ from TensorBoard's";
}

TEST(TfEvent, IndependentReaderReadsOurRecords) {
  std::string ours = tfrecord(file_version_event(1764300000.0));
  for (const auto& s : fixture_scalars()) {
    ours += tfrecord(scalar_event(s.wall_time, s.step, s.tag, s.value));
  }
  const std::vector<ReadEvent> events = read_records(ours);
  ASSERT_EQ(events.size(), fixture_scalars().size() + 1);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, 1764300000.0);
  for (size_t i = 0; i < fixture_scalars().size(); ++i) {
    const FixtureScalar& want = fixture_scalars()[i];
    const ReadEvent& got = events[i + 1];
    EXPECT_EQ(got.wall_time.value_or(0.0), want.wall_time);
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.tag, want.tag);
    ASSERT_TRUE(got.simple_value.has_value()) << "simple_value is a oneof member: always present";
    EXPECT_EQ(*got.simple_value, want.value);
  }
}

TEST(TfEvent, CorruptRecordIsCaughtByTheReader) {
  std::string rec = tfrecord(scalar_event(1.0, 2, "a", 3.0f));
  rec[rec.size() - 6] ^= 0x01;  // a bit of the value
  EXPECT_NONFATAL_FAILURE(read_records(rec), "data CRC");
}

TEST(TensorBoardMonitor, WritesNamedFileFlushedAfterEachScalar) {
  const std::string root = testing::TempDir() + "/tb_monitor_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto monitor = TensorBoardMonitor::open(root, "job");
  ASSERT_TRUE(monitor.ok()) << monitor.status().to_string();
  const std::string path = (*monitor)->path();
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(std::filesystem::path(path).parent_path().string(), root + "/job");
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(::getpid()) + ".0"), std::string::npos) << name;

  ASSERT_TRUE((*monitor)->write("Train/Samples/train_loss", 8, 2.5).ok());
  // Read while the writer is still open: each write reached the file (a crash loses nothing).
  std::vector<ReadEvent> events = read_records(slurp(path));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].tag, "Train/Samples/train_loss");
  EXPECT_EQ(events[1].step, 8);
  EXPECT_EQ(events[1].simple_value, 2.5f);
  EXPECT_GE(events[1].wall_time.value_or(0), before);
  EXPECT_LT(events[1].wall_time.value_or(0), before + 600);
  ASSERT_TRUE((*monitor)->write("Train/Samples/lr", 16, 1e-3).ok());
  EXPECT_EQ(read_records(slurp(path)).size(), 3u);
  monitor->reset();
  std::filesystem::remove_all(root);
}

TEST(TensorBoardMonitor, UncreatableDirectoryIsAnErrorNamingIt) {
  const std::string file = testing::TempDir() + "/tb_not_a_dir_" + std::to_string(::getpid());
  std::ofstream(file) << "x";
  auto monitor = TensorBoardMonitor::open(file, "job");
  ASSERT_FALSE(monitor.ok());
  EXPECT_NE(monitor.status().message().find(file + "/job"), std::string::npos)
      << monitor.status().to_string();
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace zero::runtime
