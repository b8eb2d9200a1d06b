// TensorBoard's event-file format, written by hand (no protobuf dependency): TFRecord framing of
// serialized `tensorflow.Event` messages holding scalar summaries (docs/formats/tfevents.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zero::runtime {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`.
uint32_t crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so a CRC stored inside the data
// it covers does not check itself.
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: uint64 length (LE), masked CRC of those 8 bytes (LE), the data, masked CRC of the
// data (LE).
std::string tfrecord(std::string_view data);

// A serialized Event{wall_time, file_version} — the first record of every event file
// ("brain.Event:2"). Fields at proto3 defaults (wall_time 0) are omitted, as protobuf does.
std::string file_version_event(double wall_time, std::string_view file_version = "brain.Event:2");

// A serialized Event{wall_time, step, summary{value{tag, simple_value}}}: one scalar. wall_time and
// step are omitted when 0 (proto3 defaults); simple_value is a oneof member and always written.
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

}  // namespace zero::runtime
