#include "text/normalizer.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <nlohmann/json.hpp>

namespace zero::text {
namespace {

const UNormalizer2* icu_normalizer(int form, UErrorCode* err) {
  switch (form) {
    case 0: return unorm2_getNFCInstance(err);
    case 1: return unorm2_getNFDInstance(err);
    case 2: return unorm2_getNFKCInstance(err);
    default: return unorm2_getNFKDInstance(err);
  }
}

// `text` in a Unicode normal form (ICU; HF uses Rust's unicode-normalization, the same tables).
StatusOr<std::string> unicode_normalize(std::string_view text, int form) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // every normal form leaves ASCII alone
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = icu_normalizer(form, &err);
  std::u16string utf16(text.size() + 1, u'\0');
  int32_t utf16_len = 0;
  u_strFromUTF8(utf16.data(), static_cast<int32_t>(utf16.size()), &utf16_len, text.data(),
                static_cast<int32_t>(text.size()), &err);
  // NFKC/NFKD can expand a code unit up to 18 times (U+FDFA); grow once if ICU asks.
  std::u16string normalized(static_cast<size_t>(utf16_len) * 3 + 16, u'\0');
  int32_t normalized_len = 0;
  for (int attempt = 0; attempt < 2 && U_SUCCESS(err); ++attempt) {
    normalized_len = unorm2_normalize(n, utf16.data(), utf16_len, normalized.data(),
                                      static_cast<int32_t>(normalized.size()), &err);
    if (err != U_BUFFER_OVERFLOW_ERROR) break;
    err = U_ZERO_ERROR;
    normalized.resize(static_cast<size_t>(normalized_len) + 1);
  }
  std::string out(static_cast<size_t>(normalized_len) * 3 + 1, '\0');
  int32_t out_len = 0;
  if (U_SUCCESS(err)) {
    u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_len, normalized.data(),
                normalized_len, &err);
  }
  if (U_FAILURE(err)) return internal_error("ICU normalization failed: {}", u_errorName(err));
  out.resize(static_cast<size_t>(out_len));
  return out;
}

}  // namespace

StatusOr<std::string> replace_all(const Pattern& pattern, std::string_view text,
                                  std::string_view content) {
  ZERO_ASSIGN_OR_RETURN(std::vector<ByteSpan> matches, pattern.find_all(text));
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const ByteSpan& m : matches) {
    out.append(text.substr(prev, m.begin - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

Status Normalizer::append_steps(const nlohmann::json& j, const std::string& where,
                                std::vector<Step>* steps) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return invalid_argument("{}: normalizer Sequence has no \"normalizers\" list", where);
    }
    for (const auto& child : j["normalizers"]) {
      ZERO_RETURN_IF_ERROR(append_steps(child, where, steps));
    }
    return ok_status();
  }
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return invalid_argument("{}: normalizer Prepend has no \"prepend\" string", where);
    }
    steps->push_back(Prepend{j["prepend"].get<std::string>()});
    return ok_status();
  }
  if (type == "Replace") {
    if (!j.contains("pattern") || !j.contains("content") || !j["content"].is_string()) {
      return invalid_argument("{}: normalizer Replace needs \"pattern\" and \"content\"", where);
    }
    ZERO_ASSIGN_OR_RETURN(Pattern p,
                          Pattern::from_json(j["pattern"], where + ": normalizer Replace"));
    steps->push_back(Replace{std::move(p), j["content"].get<std::string>()});
    return ok_status();
  }
  const char* forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
  for (int f = 0; f < 4; ++f) {
    if (type == forms[f]) {
      steps->push_back(Normalize{static_cast<UnicodeForm>(f)});
      return ok_status();
    }
  }
  return unimplemented(
      "{}: normalizer type {:?} is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, "
      "NFKC, NFKD); "
      "refusing to tokenize differently from HF",
      where, type.empty() ? j.dump() : type);
}

StatusOr<Normalizer> Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (j.is_null()) return n;
  ZERO_RETURN_IF_ERROR(append_steps(j, where, &n.steps_));
  return n;
}

StatusOr<std::string> Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    if (const auto* p = std::get_if<Prepend>(&step)) {
      if (!s.empty()) s.insert(0, p->prefix);
    } else if (const auto* r = std::get_if<Replace>(&step)) {
      ZERO_ASSIGN_OR_RETURN(s, replace_all(r->pattern, s, r->content));
    } else {
      ZERO_ASSIGN_OR_RETURN(s,
                            unicode_normalize(s, static_cast<int>(std::get<Normalize>(step).form)));
    }
  }
  return s;
}

}  // namespace zero::text
