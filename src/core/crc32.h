// Table-driven reflected CRC-32 with its polynomial as a parameter: zip's CRC-32 (checkpoint/
// zip_reader.h, torch.save archives) and the Castagnoli CRC-32C of TFRecord framing
// (runtime/tf_event.h) are the same algorithm over different polynomials.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace zero {

inline constexpr uint32_t kCrc32Polynomial = 0xEDB88320u;   // zip, gzip, PNG (reflected)
inline constexpr uint32_t kCrc32cPolynomial = 0x82F63B78u;  // Castagnoli (reflected)

template <uint32_t kPolynomial>
constexpr std::array<uint32_t, 256> make_crc32_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? kPolynomial ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

template <uint32_t kPolynomial>
inline constexpr std::array<uint32_t, 256> kCrc32Table = make_crc32_table<kPolynomial>();

// The CRC of `n` more bytes after a CRC of `crc` (0 to start): crc32_update(crc32_update(0, a), b)
// is the CRC of a then b.
template <uint32_t kPolynomial>
uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  const std::array<uint32_t, 256>& table = kCrc32Table<kPolynomial>;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace zero
