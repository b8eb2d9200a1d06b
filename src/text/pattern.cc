#include "text/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include <nlohmann/json.hpp>

namespace zero::text {

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
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expression.data()), expression.size(),
                    PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return invalid_argument("regex {:?} does not compile with PCRE2 at offset {}: {}", expression,
                            error_offset, reinterpret_cast<const char*>(message));
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
