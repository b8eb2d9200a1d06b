// TensorBoard event records (tf_event.h): protobuf wire format and TFRecord framing.
#include "runtime/tf_event.h"

#include <bit>
#include <cstring>

#include "core/crc32.h"

namespace zero::runtime {

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

template <typename T>
void put_little_endian(std::string& out, T v) {
  static_assert(std::endian::native == std::endian::little, "event files are little-endian");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields (tensorflow/core/util/event.proto): wall_time = 1, step = 2, file_version = 3,
// summary = 5. Summary: repeated Value value = 1. Summary.Value: tag = 1, simple_value = 2.
std::string event_header(double wall_time, int64_t step) {
  std::string out;
  if (wall_time != 0.0) {
    put_key(out, 1, kFixed64);
    put_little_endian(out, wall_time);
  }
  if (step != 0) {
    put_key(out, 2, kVarint);
    put_varint(out, static_cast<uint64_t>(step));  // negative int64: ten bytes, as protobuf does
  }
  return out;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  return crc32_update<kCrc32cPolynomial>(0, data.data(), data.size());
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_little_endian(length, static_cast<uint64_t>(data.size()));
  std::string out = length;
  put_little_endian(out, masked_crc32c(length));
  out.append(data);
  put_little_endian(out, masked_crc32c(data));
  return out;
}

std::string file_version_event(double wall_time, std::string_view file_version) {
  std::string out = event_header(wall_time, 0);
  put_bytes(out, 3, file_version);
  return out;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_key(summary_value, 2, kFixed32);
  put_little_endian(summary_value, value);
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string out = event_header(wall_time, step);
  put_bytes(out, 5, summary);
  return out;
}

}  // namespace zero::runtime
