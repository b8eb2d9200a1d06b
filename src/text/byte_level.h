// GPT-2's byte-level alphabet: every byte maps to one printable code point (bytes_to_unicode in
// openai/gpt-2 encoder.py), so that BPE runs on visible characters and decodes back to raw bytes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zero::text {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();

  // The UTF-8 text of the code point byte `b` maps to (1 or 2 bytes).
  const std::string& encode_byte(uint8_t b) const { return byte_to_utf8_[b]; }
  // Appends the mapped form of every byte of `bytes`.
  void encode(std::string_view bytes, std::string* out) const;
  // The byte a code point stands for, or nullopt when it is not in the alphabet.
  std::optional<uint8_t> decode_char(char32_t cp) const;
  // Appends the bytes `text` (UTF-8 of mapped characters) stands for; returns false (appending
  // nothing) when some character is not in the alphabet.
  bool decode(std::string_view text, std::string* out) const;

 private:
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 324> cp_to_byte_;  // code points 0..323; -1 when not mapped
};

}  // namespace zero::text
