// Recursive-descent reader for the JSON-with-comments dialect of ds_config files (json_text.h).
#include "config/json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <unordered_map>

namespace zero::config {
namespace {

// Deep enough for any real config, shallow enough that adversarial input cannot overflow the stack.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<ParsedJson> parse() {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    ParsedJson out;
    Status s = skip_space();
    if (!s.ok()) return s;
    if (at_end()) return error(pos_, "the file is empty; a DeepSpeed config is a JSON object");
    s = parse_value("", 0, out.value, out.sources);
    if (!s.ok()) return s;
    s = skip_space();
    if (!s.ok()) return s;
    if (!at_end()) return error(pos_, "unexpected text after the end of the JSON document");
    return out;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  // Line and column (in code points) of byte offset `at`. Values are located in increasing order,
  // so the scan resumes from the last position asked for: locating every value of the document
  // costs one pass over the text (a scan from the start each time made a 40,000-element array take
  // seconds, quadratically). Only an error may ask for an earlier offset and rescan from the start.
  std::pair<int, int> line_column(size_t at) const {
    at = std::min(at, text_.size());
    if (at < located_.offset) located_ = Location{};
    Location loc = located_;
    for (size_t i = loc.offset; i < at; ++i) {
      unsigned char c = static_cast<unsigned char>(text_[i]);
      if (c == '\n') {
        ++loc.line;
        loc.column = 1;
      } else if (c == '\r') {
        // CRLF counts once (at the \n); a lone CR does not start a line.
      } else if ((c & 0xC0) != 0x80) {
        ++loc.column;
      }
    }
    loc.offset = at;
    located_ = loc;
    return {loc.line, loc.column};
  }

  Status error(size_t at, const std::string& what) const {
    auto [line, column] = line_column(at);
    return invalid_argument("line {}, column {}: {}", line, column, what);
  }

  std::string describe_char(size_t at) const {
    if (at >= text_.size()) return "end of file";
    char c = text_[at];
    if (c == '\n' || c == '\r') return "end of line";
    if (static_cast<unsigned char>(c) < 0x20) return fmt::format("control character 0x{:02x}", c);
    if (static_cast<unsigned char>(c) >= 0x80) return "a non-ASCII character";
    return fmt::format("'{}'", c);
  }

  // Skips whitespace and the three comment forms DeepSpeed's hjson reader accepts. Comments
  // follow the same UTF-8 rule as strings.
  Status skip_space() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#' || (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/')) {
        size_t end = text_.find('\n', pos_);
        ZERO_RETURN_IF_ERROR(
            check_comment_utf8(pos_, end == std::string_view::npos ? text_.size() : end));
        pos_ = end == std::string_view::npos ? text_.size() : end;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '*') {
        size_t start = pos_;
        size_t end = text_.find("*/", pos_ + 2);
        if (end == std::string_view::npos) return error(start, "unterminated /* comment");
        ZERO_RETURN_IF_ERROR(check_comment_utf8(start, end));
        pos_ = end + 2;
      } else {
        break;
      }
    }
    return ok_status();
  }

  // Every non-ASCII byte in text_[begin, end) must start a valid UTF-8 sequence inside the range.
  Status check_comment_utf8(size_t begin, size_t end) const {
    for (size_t i = begin; i < end;) {
      if (static_cast<unsigned char>(text_[i]) < 0x80) {
        ++i;
        continue;
      }
      size_t n = utf8_length(i);
      if (n == 0 || i + n > end) return error(i, "invalid UTF-8 in comment");
      i += n;
    }
    return ok_status();
  }

  Status expect_value_start(size_t at) const {
    char c = at < text_.size() ? text_[at] : '\0';
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = at;
      while (end < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_'))
        ++end;
      return error(at, fmt::format("unquoted string '{}' (quote strings; JSON literals are true, "
                                   "false and null)",
                                   text_.substr(at, std::min<size_t>(end - at, 40))));
    }
    return error(at, fmt::format("expected a value, found {}", describe_char(at)));
  }

  Status parse_value(const std::string& path, int depth, Json& out, SourceMap& sources) {
    if (depth > kMaxDepth) return error(pos_, "nesting deeper than 200 levels");
    size_t start = pos_;
    auto [line, column] = line_column(start);
    char c = peek();
    Status s;
    if (c == '{') {
      s = parse_object(path, depth, out, sources);
    } else if (c == '[') {
      s = parse_array(path, depth, out, sources);
    } else if (c == '"') {
      std::string str;
      s = parse_string(str);
      out = std::move(str);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      s = parse_number(out);
    } else if (text_.substr(pos_, 4) == "true") {
      pos_ += 4;
      out = true;
    } else if (text_.substr(pos_, 5) == "false") {
      pos_ += 5;
      out = false;
    } else if (text_.substr(pos_, 4) == "null") {
      pos_ += 4;
      out = nullptr;
    } else {
      return expect_value_start(pos_);
    }
    if (!s.ok()) return s;
    SourceSpan span{line, column, {}};
    if (!out.is_structured()) span.raw = std::string(text_.substr(start, pos_ - start));
    sources[path] = std::move(span);
    return ok_status();
  }

  Status parse_object(const std::string& path, int depth, Json& out, SourceMap& sources) {
    ++pos_;  // '{'
    out = Json::object();
    // ordered_map is a std::vector of (key, value) pairs underneath.
    auto& members = static_cast<Json::object_t::Container&>(out.get_ref<Json::object_t&>());
    std::unordered_map<std::string, size_t> seen;  // key -> offset of its first occurrence
    while (true) {
      ZERO_RETURN_IF_ERROR(skip_space());
      if (peek() == '}') {
        ++pos_;
        return ok_status();
      }
      size_t key_at = pos_;
      if (peek() != '"') {
        if (at_end()) return error(pos_, "unterminated object: expected '}'");
        return error(pos_, fmt::format("expected a quoted key, found {} (unquoted keys are hjson "
                                       "syntax that ds_config files may not use here)",
                                       describe_char(pos_)));
      }
      std::string key;
      ZERO_RETURN_IF_ERROR(parse_string(key));
      if (auto it = seen.find(key); it != seen.end()) {
        auto [l, c] = line_column(it->second);
        return error(key_at, fmt::format("duplicate key \"{}\" in {} (first defined at line {}, "
                                         "column {})",
                                         key, path.empty() ? "the top-level object" : path, l, c));
      }
      seen.emplace(key, key_at);
      ZERO_RETURN_IF_ERROR(skip_space());
      if (peek() != ':') {
        return error(
            pos_, fmt::format("expected ':' after key \"{}\", found {}", key, describe_char(pos_)));
      }
      ++pos_;
      ZERO_RETURN_IF_ERROR(skip_space());
      Json value;
      ZERO_RETURN_IF_ERROR(parse_value(path_join(path, key), depth + 1, value, sources));
      // Appended directly: ordered_json's operator[] searches the members linearly, which made an
      // object with n keys cost n^2; `seen` has already ruled out a duplicate.
      members.emplace_back(std::move(key), std::move(value));
      ZERO_RETURN_IF_ERROR(skip_space());
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') continue;
      if (at_end()) return error(pos_, "unterminated object: expected ',' or '}'");
      if (peek() == '"') return error(pos_, "missing ',' between object members");
      return error(pos_, fmt::format("expected ',' or '}}' after the value of \"{}\", found {}",
                                     members.back().first, describe_char(pos_)));
    }
  }

  Status parse_array(const std::string& path, int depth, Json& out, SourceMap& sources) {
    ++pos_;  // '['
    out = Json::array();
    while (true) {
      ZERO_RETURN_IF_ERROR(skip_space());
      if (peek() == ']') {
        ++pos_;
        return ok_status();
      }
      if (at_end()) return error(pos_, "unterminated array: expected ']'");
      Json value;
      ZERO_RETURN_IF_ERROR(parse_value(path_index(path, out.size()), depth + 1, value, sources));
      out.push_back(std::move(value));
      ZERO_RETURN_IF_ERROR(skip_space());
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') continue;
      if (at_end()) return error(pos_, "unterminated array: expected ',' or ']'");
      return error(pos_,
                   fmt::format("expected ',' or ']' in array, found {}", describe_char(pos_)));
    }
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool read_hex4(uint32_t& out) {
    if (pos_ + 4 > text_.size()) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char h = text_[pos_ + i];
      out <<= 4;
      if (h >= '0' && h <= '9') {
        out |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        out |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        out |= h - 'A' + 10;
      } else {
        return false;
      }
    }
    pos_ += 4;
    return true;
  }

  // Length of the valid UTF-8 sequence at byte offset `at`, or 0 when it is malformed.
  size_t utf8_length(size_t at) const {
    auto byte = [&](size_t i) {
      return at + i < text_.size() ? static_cast<unsigned char>(text_[at + i]) : 0;
    };
    auto cont = [&](size_t i) { return (byte(i) & 0xC0) == 0x80; };
    unsigned char b0 = byte(0);
    if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
    if (b0 >= 0xE0 && b0 <= 0xEF) {
      if (!cont(1) || !cont(2)) return 0;
      if (b0 == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
      if (b0 == 0xED && byte(1) >= 0xA0) return 0;  // surrogate
      return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
      if (!cont(1) || !cont(2) || !cont(3)) return 0;
      if (b0 == 0xF0 && byte(1) < 0x90) return 0;
      if (b0 == 0xF4 && byte(1) >= 0x90) return 0;
      return 4;
    }
    return 0;
  }

  Status parse_string(std::string& out) {
    size_t start = pos_;
    ++pos_;  // opening quote
    while (true) {
      if (at_end()) return error(start, "unterminated string");
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return ok_status();
      }
      if (c == '\n' || c == '\r') {
        return error(start, "unterminated string (strings cannot span lines)");
      }
      if (c < 0x20) return error(pos_, "control character in string (escape it)");
      if (c == '\\') {
        ++pos_;
        char e = peek();
        ++pos_;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            size_t esc_at = pos_ - 2;
            uint32_t cp = 0;
            if (!read_hex4(cp)) return error(esc_at, "invalid \\u escape (needs 4 hex digits)");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              uint32_t low = 0;
              if (text_.substr(pos_, 2) != "\\u") {
                return error(esc_at, "unpaired UTF-16 surrogate in \\u escape");
              }
              pos_ += 2;
              if (!read_hex4(low) || low < 0xDC00 || low > 0xDFFF) {
                return error(esc_at, "unpaired UTF-16 surrogate in \\u escape");
              }
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return error(esc_at, "unpaired UTF-16 surrogate in \\u escape");
            }
            append_utf8(out, cp);
            break;
          }
          default: return error(pos_ - 2, "invalid escape sequence in string");
        }
        continue;
      }
      if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      size_t n = utf8_length(pos_);
      if (n == 0) return error(pos_, "invalid UTF-8 in string");
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  // JSON number grammar. Integers stay integers (int64, or uint64 when larger); anything with a
  // fraction or exponent is a double ("2e8" is an integral double; the schema accepts it as an
  // int).
  Status parse_number(Json& out) {
    size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (std::isdigit(static_cast<unsigned char>(peek()))) {
        return error(start, "numbers cannot have leading zeros");
      }
    } else if (std::isdigit(static_cast<unsigned char>(peek()))) {
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    } else {
      return error(start, "invalid number");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) {
        return error(start, "invalid number: digits must follow '.'");
      }
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) {
        return error(start, "invalid number: digits must follow the exponent");
      }
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      if (auto r = std::from_chars(first, last, i); r.ec == std::errc() && r.ptr == last) {
        out = i;
        return ok_status();
      }
      uint64_t u = 0;
      if (auto r = std::from_chars(first, last, u); r.ec == std::errc() && r.ptr == last) {
        out = u;
        return ok_status();
      }
    }
    double d = 0;
    auto r = std::from_chars(first, last, d);
    if (r.ec != std::errc() || r.ptr != last || !std::isfinite(d)) {
      return error(start, fmt::format("number {} is out of range", std::string_view(first, last)));
    }
    out = d;
    return ok_status();
  }

  // A byte offset with its line and column (line_column's resume point).
  struct Location {
    size_t offset = 0;
    int line = 1;
    int column = 1;
  };

  std::string_view text_;
  size_t pos_ = 0;
  mutable Location located_;
};

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-' || c == '+') return 62;
  if (c == '_' || c == '/') return 63;
  return -1;
}

bool needs_quoting(std::string_view key) {
  if (key.empty()) return true;
  for (char c : key) {
    if (c == '.' || c == '[' || c == ']' || c == '"' || c == ' ') return true;
  }
  return false;
}

}  // namespace

StatusOr<ParsedJson> parse_json_text(std::string_view text) { return Parser(text).parse(); }

std::optional<std::string> decode_base64(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.empty() || text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = base64_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::string path_join(std::string_view parent, std::string_view key) {
  std::string k = needs_quoting(key)
                      ? Json(std::string(key)).dump(-1, ' ', false, Json::error_handler_t::replace)
                      : std::string(key);
  if (parent.empty()) return needs_quoting(key) ? "[" + k + "]" : k;
  if (needs_quoting(key)) return std::string(parent) + "[" + k + "]";
  return std::string(parent) + "." + k;
}

std::string path_index(std::string_view parent, size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

}  // namespace zero::config
