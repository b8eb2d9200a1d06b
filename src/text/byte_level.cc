#include "text/byte_level.h"

#include "text/utf8.h"

namespace zero::text {

ByteLevelAlphabet::ByteLevelAlphabet() {
  cp_to_byte_.fill(-1);
  int next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    // Printable Latin-1 stands for itself; the rest (controls, space, 0x7F-0xA0, 0xAD) shift to
    // 256 + n, in byte order.
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next_extra++;
    append_utf8(static_cast<char32_t>(cp), &byte_to_utf8_[b]);
    cp_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

void ByteLevelAlphabet::encode(std::string_view bytes, std::string* out) const {
  for (char c : bytes) out->append(byte_to_utf8_[static_cast<uint8_t>(c)]);
}

std::optional<uint8_t> ByteLevelAlphabet::decode_char(char32_t cp) const {
  if (cp >= cp_to_byte_.size() || cp_to_byte_[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(cp_to_byte_[cp]);
}

bool ByteLevelAlphabet::decode(std::string_view text, std::string* out) const {
  const size_t start = out->size();
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = utf8_sequence_bytes(text, pos);
    std::optional<uint8_t> b = n ? decode_char(decode_utf8_at(text, pos, n)) : std::nullopt;
    if (!b) {
      out->resize(start);
      return false;
    }
    out->push_back(static_cast<char>(*b));
    pos += n;
  }
  return true;
}

}  // namespace zero::text
