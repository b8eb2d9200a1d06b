#include "text/added_vocabulary.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace zero::text {

StatusOr<AddedVocabulary> AddedVocabulary::from_json(const nlohmann::json& added_tokens,
                                                     const Normalizer& normalizer,
                                                     const std::string& where) {
  AddedVocabulary v;
  if (added_tokens.is_null()) return v;
  if (!added_tokens.is_array())
    return invalid_argument("{}: \"added_tokens\" is not a list", where);
  for (const auto& t : added_tokens) {
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() ||
        !t.contains("id") || !t["id"].is_number_integer()) {
      return invalid_argument("{}: added token {} needs \"id\" and \"content\"", where, t.dump());
    }
    AddedToken a;
    a.content = t["content"].get<std::string>();
    a.id = t["id"].get<int32_t>();
    a.special = t.value("special", false);
    a.normalized = t.value("normalized", !a.special);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    if (t.value("single_word", false)) {
      return unimplemented("{}: added token {:?}: single_word true is not supported", where,
                           a.content);
    }
    if (a.content.empty() || first_invalid_utf8(a.content) != a.content.size()) {
      return invalid_argument("{}: added token {} has empty or invalid UTF-8 content", where, a.id);
    }
    v.index_by_id_[a.id] = v.tokens_.size();
    v.id_by_content_[a.content] = a.id;
    v.tokens_.push_back(std::move(a));
  }
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    AddedToken& a = v.tokens_[i];
    MatchSet& set = a.normalized ? v.normalized_ : v.raw_;
    std::string pattern = a.content;
    if (a.normalized && !normalizer.empty()) {
      ZERO_ASSIGN_OR_RETURN(pattern, normalizer.normalize(a.content));
    }
    a.token = pattern;
    if (pattern.empty()) continue;
    set.patterns.push_back(std::move(pattern));
    set.token_index.push_back(static_cast<int32_t>(i));
  }
  v.build(&v.raw_);
  v.build(&v.normalized_);
  return v;
}

void AddedVocabulary::build(MatchSet* set) const {
  for (size_t i = 0; i < set->patterns.size(); ++i) {
    set->by_first_byte[static_cast<uint8_t>(set->patterns[i][0])].push_back(
        static_cast<int32_t>(i));
  }
  for (auto& bucket : set->by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [set](int32_t a, int32_t b) {
      return set->patterns[a].size() > set->patterns[b].size();
    });
  }
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized_set) const {
  const MatchSet& set = normalized_set ? normalized_ : raw_;
  std::vector<Segment> out;
  if (set.patterns.empty()) {
    if (!text.empty()) out.push_back({{0, text.size()}, -1});
    return out;
  }
  size_t text_begin = 0;  // start of the text run not yet emitted
  for (size_t pos = 0; pos < text.size();) {
    const auto& bucket = set.by_first_byte[static_cast<uint8_t>(text[pos])];
    int32_t hit = -1;
    for (int32_t p : bucket) {
      if (text.compare(pos, set.patterns[p].size(), set.patterns[p]) == 0) {
        hit = p;
        break;
      }
    }
    if (hit < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[set.token_index[hit]];
    size_t start = pos, stop = pos + set.patterns[hit].size();
    if (token.lstrip) {
      // Back over whitespace, but not into the previous token.
      while (start > text_begin) {
        size_t prev = start - 1;
        while (prev > text_begin && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        const size_t n = utf8_sequence_bytes(text, prev);
        if (n == 0 || !is_unicode_whitespace(decode_utf8_at(text, prev, n))) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        const size_t n = utf8_sequence_bytes(text, stop);
        if (n == 0 || !is_unicode_whitespace(decode_utf8_at(text, stop, n))) break;
        stop += n;
      }
    }
    if (start > text_begin) out.push_back({{text_begin, start}, -1});
    out.push_back({{start, stop}, token.id});
    text_begin = pos = stop;
  }
  if (text_begin < text.size()) out.push_back({{text_begin, text.size()}, -1});
  return out;
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = id_by_content_.find(std::string(content));
  if (it == id_by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace zero::text
