// Safetensors: round trips through Storage, hand-built bytes, a file written by Python, and every
// kind of corruption (including truncation at every byte) returning an error rather than crashing.
#include "core/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

namespace zero {
namespace {

// 8-byte little-endian length + header text + data.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

TEST(Safetensors, ParsesHandBuiltBytes) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},)"
                             R"("__metadata__":{"format":"pt"}})";
  std::string data = f32_bytes({1, 2, 3, 4});
  data += std::string("\x80\x3f\x00\xc0", 4);  // bf16 1.0, -2.0
  const std::string bytes = make_file(header, data);
  auto reader = SafetensorsReader::from_buffer(bytes, "hand");
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  ASSERT_EQ(reader->tensors().size(), 2u);
  EXPECT_EQ(reader->tensors()[0].name, "b");  // sorted by name
  EXPECT_EQ(reader->metadata().at("format"), "pt");
  EXPECT_EQ(reader->data_offset(), 8 + header.size());
  const SafetensorsEntry* w = reader->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(w->numel(), 4);
  float out[4];
  ASSERT_TRUE(reader->read_f32("w", out, 4).ok());
  EXPECT_EQ(out[3], 4.0f);
  ASSERT_TRUE(reader->read_range_f32("w", 1, 2, out).ok());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 3.0f);
  ASSERT_TRUE(reader->read_f32("b", out, 2).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  char raw[2];
  ASSERT_TRUE(reader->read_range("b", 2, 2, raw).ok());
  EXPECT_EQ(raw[1], '\xc0');
  EXPECT_EQ(reader->read_range("b", 3, 2, raw).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader->read_f32("w", out, 3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reader->read_f32("nope", out, 1).code(), StatusCode::kNotFound);
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zero_st_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(default_storage()->make_dirs(dir_.string()).ok());
  }
  void TearDown() override { ASSERT_TRUE(default_storage()->remove_dir(dir_.string()).ok()); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsFileTest, RoundTripAllDTypesAlignedAndPadded) {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.125f};
  std::vector<uint16_t> h = {0x3F80, 0xC000, 0x3E20};  // bf16
  std::vector<uint8_t> flags = {1, 0, 1};
  std::vector<int64_t> ids = {-1, 1ll << 40};
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.add("z.weight", SafetensorsDType::kF32, {2, 3}, w.data()).ok());
  ASSERT_TRUE(writer.add("a.bf16", SafetensorsDType::kBF16, {3}, h.data()).ok());
  ASSERT_TRUE(writer.add("flags", SafetensorsDType::kBool, {3}, flags.data()).ok());
  ASSERT_TRUE(writer.add("ids", SafetensorsDType::kI64, {2}, ids.data()).ok());
  ASSERT_TRUE(writer.add("empty", SafetensorsDType::kF16, {0}, nullptr).ok());
  ASSERT_TRUE(writer
                  .add_streamed("streamed", SafetensorsDType::kF32, {2},
                                [](WritableFile& f) {
                                  return f.append(f32_bytes({9, 10}));
                                })
                  .ok());
  writer.set_metadata("format", "pt");
  EXPECT_FALSE(writer.add("ids", SafetensorsDType::kI64, {2}, ids.data()).ok());
  EXPECT_FALSE(writer.add("__metadata__", SafetensorsDType::kI64, {2}, ids.data()).ok());
  ASSERT_TRUE(writer.write(*default_storage(), path("m.safetensors")).ok());

  auto reader = SafetensorsReader::open(*default_storage(), path("m.safetensors"));
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ(reader->data_offset() % 8, 0u);
  for (const SafetensorsEntry& e : reader->tensors()) {
    EXPECT_EQ(e.begin % safetensors_dtype_bytes(e.dtype), 0u) << e.name;
  }
  std::vector<float> got(6);
  ASSERT_TRUE(reader->read_f32("z.weight", got.data(), 6).ok());
  EXPECT_EQ(got, w);
  ASSERT_TRUE(reader->read_f32("a.bf16", got.data(), 3).ok());
  EXPECT_EQ(got[2], 0.15625f);
  ASSERT_TRUE(reader->read_f32("streamed", got.data(), 2).ok());
  EXPECT_EQ(got[1], 10.0f);
  std::vector<int64_t> ids_back(2);
  ASSERT_TRUE(reader->read("ids", ids_back.data(), 16).ok());
  EXPECT_EQ(ids_back, ids);
  Status not_float = reader->read_f32("ids", got.data(), 2);
  EXPECT_EQ(not_float.code(), StatusCode::kUnimplemented);
  EXPECT_NE(not_float.message().find("I64"), std::string::npos);
  EXPECT_EQ(reader->find("empty")->nbytes(), 0u);
  EXPECT_EQ(reader->metadata().at("format"), "pt");
}

TEST_F(SafetensorsFileTest, WriteFaultsSurface) {
  std::vector<float> w(1000, 1.0f);
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.add("w", SafetensorsDType::kF32, {1000}, w.data()).ok());
  FaultInjectingStorage faulty(default_storage());
  faulty.disk_full_after(100);
  Status s = writer.write(faulty, path("m.safetensors"));
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.message();
  faulty.reset();
  faulty.fail_nth(FaultOp::kSync, 1);
  EXPECT_EQ(writer.write(faulty, path("m.safetensors")).code(), StatusCode::kIoError);
  SafetensorsWriter bad_stream;
  ASSERT_TRUE(bad_stream
                  .add_streamed("s", SafetensorsDType::kF32, {2},
                                [](WritableFile& f) { return f.append("abc"); })
                  .ok());
  EXPECT_FALSE(bad_stream.write(*default_storage(), path("s.safetensors")).ok());
}

TEST(Safetensors, ReadsFileWrittenByPython) {
  const std::string fixture =
      std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/safetensors/tiny.safetensors";
  auto reader = SafetensorsReader::open(*default_storage(), fixture);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ(reader->tensors().size(), 5u);
  EXPECT_EQ(reader->metadata().at("producer"), "make_fixture.py");
  float f[6];
  ASSERT_TRUE(reader->read_f32("a.f32", f, 6).ok());
  EXPECT_EQ(f[2], 2.25f);
  EXPECT_EQ(f[5], 1e-3f);
  ASSERT_TRUE(reader->read_f32("b.bf16", f, 3).ok());
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 0.15625f);
  ASSERT_TRUE(reader->read_f32("c.f16", f, 3).ok());
  EXPECT_EQ(f[1], -0.5f);
  EXPECT_EQ(f[2], 65504.0f);
  int64_t ids[2];
  ASSERT_TRUE(reader->read("d.i64", ids, sizeof(ids)).ok());
  EXPECT_EQ(ids[0], -7);
  EXPECT_EQ(ids[1], 1ll << 40);
  EXPECT_EQ(reader->find("e.empty")->shape, (std::vector<int64_t>{0, 4}));
}

TEST(Safetensors, TruncationAtEveryByteErrors) {
  const std::string fixture =
      std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/safetensors/tiny.safetensors";
  auto full = read_file(*default_storage(), fixture);
  ASSERT_TRUE(full.ok());
  const std::string& bytes = *full;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto reader = SafetensorsReader::from_buffer(std::string_view(bytes).substr(0, n), "cut");
    // A cut inside the final (empty or I64) tensor's bytes must be caught at parse time; cuts that
    // remove only trailing data of a tensor still fail because offsets exceed the buffer.
    EXPECT_FALSE(reader.ok()) << "truncated to " << n << " bytes parsed";
    if (!reader.ok()) {
      EXPECT_NE(reader.status().message().find("cut"), std::string::npos);
    }
  }
  EXPECT_TRUE(SafetensorsReader::from_buffer(bytes).ok());
}

struct Corruption {
  const char* what;
  std::string header;
  size_t data_bytes;
  const char* expect;  // substring of the error
};

class SafetensorsCorruption : public ::testing::TestWithParam<Corruption> {};

TEST_P(SafetensorsCorruption, Rejected) {
  const Corruption& c = GetParam();
  const std::string bytes = make_file(c.header, std::string(c.data_bytes, '\0'));
  auto reader = SafetensorsReader::from_buffer(bytes, "bad.safetensors");
  ASSERT_FALSE(reader.ok()) << c.what;
  EXPECT_NE(reader.status().message().find(c.expect), std::string::npos)
      << c.what << ": " << reader.status().message();
  EXPECT_NE(reader.status().message().find("bad.safetensors"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    All, SafetensorsCorruption,
    ::testing::Values(
        Corruption{"not json", "{not json}", 0, "not valid JSON"},
        Corruption{"array", "[1,2]   ", 0, "does not start"},
        Corruption{"string", R"("abc")", 0, "does not start"},
        Corruption{"entry not object", R"({"a":1})", 0, "'a': header entry is not"},
        Corruption{"unknown dtype", R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})",
                   16, "unknown dtype 'F128'"},
        Corruption{"missing shape", R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, "'shape'"},
        Corruption{"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                   "non-negative"},
        Corruption{"float dim", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
                   "non-negative"},
        Corruption{"size mismatch", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8,
                   "shape x dtype is 8 bytes"},
        Corruption{"reversed", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
                   "reversed"},
        Corruption{"past buffer", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8,
                   "run past the data buffer"},
        Corruption{"overflow",
                   R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                   4, "overflows"},
        Corruption{"overlap",
                   R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   12, "overlap"},
        Corruption{"duplicate",
                   R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   8, "twice"},
        Corruption{"offsets arity", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
                   "data_offsets"},
        Corruption{"metadata not strings", R"({"__metadata__":{"k":1}})", 0, "not a string"},
        Corruption{"metadata not object", R"({"__metadata__":[]})", 0, "must be an object"}));

TEST(Safetensors, HeaderLengthChecks) {
  std::string bytes = make_file("{}", "");
  bytes[0] = 100;  // claims 100 bytes, only 2 present
  auto r = SafetensorsReader::from_buffer(bytes, "x");
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  bytes[0] = 0;
  bytes[7] = 1;  // 2^56: over the limit
  EXPECT_NE(SafetensorsReader::from_buffer(bytes, "x").status().message().find("limit"),
            std::string::npos);
  EXPECT_FALSE(SafetensorsReader::from_buffer("abc", "x").ok());
  EXPECT_TRUE(SafetensorsReader::from_buffer(make_file("{}", ""), "x").ok());
}

}  // namespace
}  // namespace zero
