#include "text/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace zero::text {

namespace {

// HF runs tokenizer.json regexes through Oniguruma; PCRE2 (Debian 12: 10.42, Unicode 14) differs in
// two places that change tokenization, so the expression is rewritten before compiling:
//  - \s: Oniguruma's is Unicode White_Space; PCRE2's also matches U+180E (MONGOLIAN VOWEL
//    SEPARATOR, no longer a space since Unicode 6.3).
//  - \p{L}, \p{N}: HF tokenizers 0.23 knows Unicode 16; the code points assigned since Unicode 14
//    are added as ranges (measured over all code points against tokenizers 0.23; a union, so a
//    newer PCRE2 is unaffected).
constexpr const char* kWhiteSpaceClassBody =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr uint32_t kLetterSince14[][2] = {
    {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3},
    {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240},
    {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5},
    {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0},
    {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C},
    {0x18CFF, 0x18CFF}, {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A},
    {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0},
    {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF}};
constexpr uint32_t kNumberSince14[][2] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59},
    {0x16130, 0x16139}, {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}};

template <size_t N>
std::string class_body(const char* property, const uint32_t (&ranges)[N][2]) {
  std::string body = property;
  for (const auto& r : ranges) body += fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r[0], r[1]);
  return body;
}

// The Oniguruma-compatible PCRE2 form of `expression` (see above). Inside a character class \s,
// \p{L}, \p{N} become class members; outside, classes of their own. Negated forms inside a class
// (rare) keep PCRE2's meaning.
std::string onig_compatible(const std::string& expression) {
  const std::string space = kWhiteSpaceClassBody;
  const std::string letter = class_body("\\p{L}", kLetterSince14);
  const std::string number = class_body("\\p{N}", kNumberSince14);
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < expression.size();) {
    const char c = expression[i];
    if (c == '\\' && i + 1 < expression.size()) {
      const char n = expression[i + 1];
      const std::string rest = expression.substr(i + 2, 3);
      const std::string* body = nullptr;
      size_t used = 2;
      bool negated = false;
      if (n == 's' || n == 'S') {
        body = &space;
        negated = n == 'S';
      } else if ((n == 'p' || n == 'P') && (rest == "{L}" || rest == "{N}")) {
        body = rest == "{L}" ? &letter : &number;
        negated = n == 'P';
        used = 5;
      }
      if (body != nullptr && !(in_class && negated)) {
        out += in_class ? *body : (negated ? "[^" : "[") + *body + "]";
      } else {
        out.append(expression, i, used);
      }
      i += used;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < expression.size() && expression[i] == '^') out.push_back(expression[i++]);
      if (i < expression.size() && expression[i] == ']') out.push_back(expression[i++]);
      continue;
    }
    if (c == '[' && in_class && i + 1 < expression.size() && expression[i + 1] == ':') {
      const size_t end = expression.find(":]", i + 2);  // a POSIX class [:alpha:]
      if (end != std::string::npos) {
        out.append(expression, i, end + 2 - i);
        i = end + 2;
        continue;
      }
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
    ++i;
  }
  return out;
}

}  // namespace

struct Pattern::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

StatusOr<Pattern> Pattern::literal(std::string text) {
  if (text.empty()) return invalid_argument("an empty split/replace pattern");
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

StatusOr<Pattern> Pattern::regex(const std::string& expression) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string pcre2_expression = onig_compatible(expression);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_expression.data()), pcre2_expression.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    // (error_offset counts in the rewritten expression, so it is not shown.)
    return invalid_argument("regex {:?} does not compile with PCRE2: {}", expression,
                            reinterpret_cast<const char*>(message));
  }
  // JIT makes matching several times faster; without it (unsupported CPU) the interpreter runs.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto compiled = std::make_shared<Compiled>();
  compiled->code = code;
  Pattern p;
  p.regex_ = std::move(compiled);
  return p;
}

StatusOr<Pattern> Pattern::from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_object() && j.size() == 1) {
    if (j.contains("String") && j["String"].is_string()) {
      auto p = literal(j["String"].get<std::string>());
      if (!p.ok()) return p.status().with_context(where);
      return p;
    }
    if (j.contains("Regex") && j["Regex"].is_string()) {
      auto p = regex(j["Regex"].get<std::string>());
      if (!p.ok()) return p.status().with_context(where);
      return p;
    }
  }
  return invalid_argument("{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}",
                          where, j.dump());
}

namespace {

// One match-data block per thread, reused across calls (one ovector pair is all we read).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

StatusOr<std::vector<ByteSpan>> Pattern::find_all(std::string_view text) const {
  std::vector<ByteSpan> matches;
  if (!regex_) {
    size_t pos = 0;
    while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
      matches.push_back({pos, pos + literal_.size()});
      pos += literal_.size();
    }
    return matches;
  }
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc =
        pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return internal_error("PCRE2 match failed: {}", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {
      // An empty match splits nothing; step over one code point and search again.
      if (ov[0] >= text.size()) break;
      size_t next = ov[0] + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
      continue;
    }
    matches.push_back({ov[0], ov[1]});
    start = ov[1];
  }
  return matches;
}

std::vector<ByteSpan> split_spans(size_t text_bytes, const std::vector<ByteSpan>& matches,
                                  SplitBehavior behavior, bool invert) {
  // Every byte of the text, in order, as matched / unmatched runs (HF's find_matches).
  struct Run {
    ByteSpan span;
    bool is_match;
  };
  std::vector<Run> runs;
  runs.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const ByteSpan& m : matches) {
    if (m.begin != prev) runs.push_back({{prev, m.begin}, invert});
    runs.push_back({m, !invert});
    prev = m.end;
  }
  if (prev != text_bytes) runs.push_back({{prev, text_bytes}, invert});

  std::vector<ByteSpan> out;
  out.reserve(runs.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Run& r : runs) out.push_back(r.span);
      break;
    case SplitBehavior::kRemoved:
      for (const Run& r : runs) {
        if (!r.is_match) out.push_back(r.span);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Run& r : runs) {
        if (r.is_match && !previous_match && !out.empty()) {
          out.back().end = r.span.end;
        } else {
          out.push_back(r.span);
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->span.begin;
        } else {
          out.push_back(it->span);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (size_t i = 0; i < runs.size(); ++i) {
        if (i > 0 && runs[i].is_match == previous_match) {
          out.back().end = runs[i].span.end;
        } else {
          out.push_back(runs[i].span);
        }
        previous_match = runs[i].is_match;
      }
      break;
    }
  }
  std::erase_if(out, [](const ByteSpan& s) { return s.end == s.begin; });
  return out;
}

}  // namespace zero::text
