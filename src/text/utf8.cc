// UTF-8 per RFC 3629 / Unicode 15 §3.9, Table 3-7 (well-formed byte sequences).
#include "text/utf8.h"

namespace zero::text {

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// How many bytes of a sequence starting at s[pos] are a valid prefix (Table 3-7), and how long the
// full sequence must be. A result with valid_prefix == need is a complete valid sequence.
struct SequenceCheck {
  size_t need = 0;          // 0: the lead byte can never start a sequence
  size_t valid_prefix = 0;  // bytes (>= 1 when need > 0) that match the table
};

SequenceCheck check_sequence(std::string_view s, size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  SequenceCheck c;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 < 0x80) {
    return {1, 1};
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    c.need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    c.need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    c.need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  c.valid_prefix = 1;
  for (size_t i = 1; i < c.need; ++i) {
    if (pos + i >= s.size()) break;
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
    c.valid_prefix = i + 1;
  }
  return c;
}

}  // namespace

size_t utf8_sequence_bytes(std::string_view s, size_t pos) {
  SequenceCheck c = check_sequence(s, pos);
  return c.need > 0 && c.valid_prefix == c.need ? c.need : 0;
}

char32_t decode_utf8_at(std::string_view s, size_t pos, size_t bytes) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (bytes == 1) return b0;
  char32_t cp = b0 & (0x7F >> bytes);
  for (size_t i = 1; i < bytes; ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  return cp;
}

size_t first_invalid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = utf8_sequence_bytes(s, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return s.size();
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    SequenceCheck c = check_sequence(bytes, pos);
    if (c.need > 0 && c.valid_prefix == c.need) {
      out.append(bytes.substr(pos, c.need));
      pos += c.need;
    } else {
      append_utf8(kReplacementChar, &out);
      pos += c.valid_prefix > 0 ? c.valid_prefix : 1;
    }
  }
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace zero::text
