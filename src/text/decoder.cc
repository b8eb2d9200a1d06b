#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "text/normalizer.h"
#include "text/utf8.h"

namespace zero::text {
namespace {

// The byte a "<0xNN>" token stands for (HF: len 6, "<0x" prefix, ">" suffix, hex digits).
std::optional<uint8_t> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  for (size_t pos = 0; pos < s.size();) {
    size_t n = utf8_sequence_bytes(s, pos);
    if (n == 0) n = 1;  // token strings are valid UTF-8; be safe
    cps.push_back(decode_utf8_at(s, pos, n));
    pos += n;
  }
  return cps;
}

}  // namespace

Status Decoder::append_steps(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  const std::string what = where + ": decoder " + type;
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return invalid_argument("{} has no \"decoders\" list", what);
    }
    for (const auto& child : j["decoders"]) ZERO_RETURN_IF_ERROR(append_steps(child, where));
  } else if (type == "ByteLevel") {
    if (!alphabet_) alphabet_ = std::make_shared<ByteLevelAlphabet>();
    steps_.push_back(ByteLevel{});
  } else if (type == "ByteFallback") {
    steps_.push_back(ByteFallback{});
  } else if (type == "Fuse") {
    steps_.push_back(Fuse{});
  } else if (type == "Strip") {
    const std::string content = j.value("content", std::string(" "));
    const std::vector<char32_t> cps = code_points(content);
    if (cps.size() != 1) return invalid_argument("{}: content must be one character", what);
    steps_.push_back(Strip{cps[0], j.value("start", size_t{0}), j.value("stop", size_t{0})});
  } else if (type == "Replace") {
    if (!j.contains("pattern") || !j.contains("content") || !j["content"].is_string()) {
      return invalid_argument("{} needs \"pattern\" and \"content\"", what);
    }
    ZERO_ASSIGN_OR_RETURN(Pattern p, Pattern::from_json(j["pattern"], what));
    steps_.push_back(Replace{std::move(p), j["content"].get<std::string>()});
  } else if (type == "Metaspace") {
    ZERO_ASSIGN_OR_RETURN(PrependScheme scheme, parse_prepend_scheme(j, what));
    steps_.push_back(Metaspace{j.value("replacement", std::string("\u2581")), scheme});
  } else {
    return unimplemented(
        "{}: decoder type {:?} is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, "
        "Replace, Metaspace, Sequence)",
        where, type.empty() ? j.dump() : type);
  }
  return ok_status();
}

StatusOr<Decoder> Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  Decoder d;
  if (j.is_null()) return d;
  d.present_ = true;
  ZERO_RETURN_IF_ERROR(d.append_steps(j, where));
  return d;
}

Status Decoder::apply(const Step& step, std::vector<std::string>* tokens) const {
  if (std::holds_alternative<ByteLevel>(step)) {
    // All tokens to bytes (a token with a character outside the alphabet passes through as its
    // UTF-8), then one lossy conversion over the whole run.
    std::string bytes;
    for (const std::string& t : *tokens) {
      if (!alphabet_->decode(t, &bytes)) bytes.append(t);
    }
    *tokens = {utf8_lossy(bytes)};
  } else if (std::holds_alternative<ByteFallback>(step)) {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (first_invalid_utf8(pending) == pending.size()) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : *tokens) {
      if (auto b = byte_token(t)) {
        pending.push_back(static_cast<char>(*b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  } else if (std::holds_alternative<Fuse>(step)) {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    *tokens = {std::move(all)};
  } else if (const auto* s = std::get_if<Strip>(&step)) {
    for (std::string& t : *tokens) {
      const std::vector<char32_t> cps = code_points(t);
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(s->start, cps.size()) && cps[i] == s->content; ++i) {
        start_cut = i + 1;
      }
      size_t stop_cut = cps.size();
      for (size_t i = 0; i < std::min(s->stop, cps.size()); ++i) {
        const size_t index = cps.size() - i - 1;
        if (cps[index] != s->content) break;
        stop_cut = index;
      }
      std::string out;
      for (size_t i = start_cut; i < std::max(start_cut, stop_cut); ++i) append_utf8(cps[i], &out);
      t = std::move(out);
    }
  } else if (const auto* r = std::get_if<Replace>(&step)) {
    for (std::string& t : *tokens) {
      ZERO_ASSIGN_OR_RETURN(t, replace_all(r->pattern, t, r->content));
    }
  } else {
    // Metaspace: the replacement becomes a space, except in the first token (HF drops every
    // replacement character there unless prepend_scheme is "never").
    const auto& m = std::get<Metaspace>(step);
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, m.replacement.size(), m.replacement) == 0) {
          if (!(i == 0 && m.prepend_scheme != PrependScheme::kNever)) out.push_back(' ');
          pos += m.replacement.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      t = std::move(out);
    }
  }
  return ok_status();
}

StatusOr<std::string> Decoder::decode(std::vector<std::string> tokens) const {
  std::string text;
  if (!present_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text.push_back(' ');
      text += tokens[i];
    }
    return text;
  }
  for (const Step& step : steps_) ZERO_RETURN_IF_ERROR(apply(step, &tokens));
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace zero::text
