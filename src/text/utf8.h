// UTF-8 helpers for the tokenizer: code point iteration, validation, and the lossy conversion HF
// applies when decoded bytes are not valid UTF-8 (each maximal invalid subpart becomes U+FFFD).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zero::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= 0x10FFFF, not a surrogate).
void append_utf8(char32_t cp, std::string* out);

// Length in bytes of the valid UTF-8 sequence at s[pos], or 0 when it is not valid there (a
// truncated, overlong or surrogate sequence, or a stray continuation byte).
size_t utf8_sequence_bytes(std::string_view s, size_t pos);

// Decodes the code point at s[pos]. REQUIRES: a valid sequence of `bytes` = utf8_sequence_bytes.
char32_t decode_utf8_at(std::string_view s, size_t pos, size_t bytes);

// The byte offset of the first invalid sequence, or s.size() when all of `s` is valid UTF-8.
size_t first_invalid_utf8(std::string_view s);

// Rust's String::from_utf8_lossy: valid sequences are kept; every maximal prefix of a valid
// sequence that is cut short, and every other invalid byte, becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Rust's char::is_whitespace (Unicode White_Space).
bool is_unicode_whitespace(char32_t cp);

}  // namespace zero::text
