#include "text/normalizer.h"

#include <nlohmann/json.hpp>

namespace zero::text {

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
  return unimplemented(
      "{}: normalizer type {:?} is not supported (supported: Sequence, Prepend, Replace); "
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
    } else {
      const auto& r = std::get<Replace>(step);
      ZERO_ASSIGN_OR_RETURN(s, replace_all(r.pattern, s, r.content));
    }
  }
  return s;
}

}  // namespace zero::text
