#include "text/pre_tokenizer.h"

#include <nlohmann/json.hpp>

namespace zero::text {
namespace {

// GPT-2's pre-tokenization regex (openai/gpt-2 encoder.py; HF ByteLevel with use_regex).
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

StatusOr<SplitBehavior> parse_behavior(const nlohmann::json& j, const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("{}: pre_tokenizer Split: unknown behavior {}", where, j.dump());
}

bool json_bool(const nlohmann::json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

}  // namespace

StatusOr<PrependScheme> parse_prepend_scheme(const nlohmann::json& j, const std::string& where) {
  if (j.contains("prepend_scheme")) {
    const std::string s =
        j["prepend_scheme"].is_string() ? j["prepend_scheme"].get<std::string>() : "";
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    return invalid_argument("{}: Metaspace: unknown prepend_scheme {}", where,
                            j["prepend_scheme"].dump());
  }
  // Files written before tokenizers 0.14 say add_prefix_space instead.
  return json_bool(j, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

Status PreTokenizer::append_steps(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return invalid_argument("{}: pre_tokenizer Sequence has no \"pretokenizers\" list", where);
    }
    for (const auto& child : j["pretokenizers"]) ZERO_RETURN_IF_ERROR(append_steps(child, where));
    return ok_status();
  }
  if (type == "ByteLevel") {
    ByteLevel b;
    b.add_prefix_space = json_bool(j, "add_prefix_space", true);
    b.use_regex = json_bool(j, "use_regex", true);
    if (!alphabet_) alphabet_ = std::make_shared<ByteLevelAlphabet>();
    if (b.use_regex && !gpt2_regex_) {
      ZERO_ASSIGN_OR_RETURN(Pattern p, Pattern::regex(kGpt2Regex));
      gpt2_regex_ = std::make_shared<Pattern>(std::move(p));
    }
    steps_.push_back(b);
    return ok_status();
  }
  if (type == "Split") {
    if (!j.contains("pattern")) {
      return invalid_argument("{}: pre_tokenizer Split has no \"pattern\"", where);
    }
    ZERO_ASSIGN_OR_RETURN(Pattern p,
                          Pattern::from_json(j["pattern"], where + ": pre_tokenizer Split"));
    ZERO_ASSIGN_OR_RETURN(SplitBehavior behavior,
                          parse_behavior(j.value("behavior", nlohmann::json()), where));
    steps_.push_back(Split{std::move(p), behavior, json_bool(j, "invert", false)});
    return ok_status();
  }
  if (type == "Metaspace") {
    Metaspace m;
    m.replacement = j.value("replacement", std::string("\u2581"));
    if (m.replacement.empty()) {
      return invalid_argument("{}: pre_tokenizer Metaspace: empty replacement", where);
    }
    ZERO_ASSIGN_OR_RETURN(m.prepend_scheme, parse_prepend_scheme(j, where + ": pre_tokenizer"));
    m.split = json_bool(j, "split", true);
    ZERO_ASSIGN_OR_RETURN(m.marker, Pattern::literal(m.replacement));
    steps_.push_back(std::move(m));
    return ok_status();
  }
  return unimplemented(
      "{}: pre_tokenizer type {:?} is not supported (supported: ByteLevel, Split, Metaspace, "
      "Sequence); refusing to tokenize differently from HF",
      where, type.empty() ? j.dump() : type);
}

StatusOr<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (!j.is_null()) ZERO_RETURN_IF_ERROR(p.append_steps(j, where));
  return p;
}

Status PreTokenizer::apply(const Step& step, std::vector<Piece>* pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces->size() * 2);
  // Cuts `piece` at `spans` (from split_spans) into `out`.
  auto emit_spans = [&out](const Piece& piece, const std::vector<ByteSpan>& spans) {
    for (const ByteSpan& s : spans) {
      out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
    }
  };
  if (const auto* b = std::get_if<ByteLevel>(&step)) {
    for (Piece& piece : *pieces) {
      if (b->add_prefix_space && piece.text[0] != ' ') piece.text.insert(piece.text.begin(), ' ');
      std::vector<ByteSpan> spans{{0, piece.text.size()}};
      if (b->use_regex) {
        ZERO_ASSIGN_OR_RETURN(std::vector<ByteSpan> m, gpt2_regex_->find_all(piece.text));
        spans = split_spans(piece.text.size(), m, SplitBehavior::kIsolated, false);
      }
      for (const ByteSpan& s : spans) {
        Piece word;
        word.at_start = piece.at_start && s.begin == 0;
        alphabet_->encode(std::string_view(piece.text).substr(s.begin, s.end - s.begin),
                          &word.text);
        out.push_back(std::move(word));
      }
    }
  } else if (const auto* sp = std::get_if<Split>(&step)) {
    for (const Piece& piece : *pieces) {
      ZERO_ASSIGN_OR_RETURN(std::vector<ByteSpan> m, sp->pattern.find_all(piece.text));
      emit_spans(piece, split_spans(piece.text.size(), m, sp->behavior, sp->invert));
    }
  } else {
    const auto& ms = std::get<Metaspace>(step);
    for (Piece& piece : *pieces) {
      std::string replaced;
      replaced.reserve(piece.text.size() + 8);
      for (char c : piece.text) {
        if (c == ' ') {
          replaced.append(ms.replacement);
        } else {
          replaced.push_back(c);
        }
      }
      piece.text = std::move(replaced);
      const bool starts = piece.text.compare(0, ms.replacement.size(), ms.replacement) == 0;
      if (!starts && (ms.prepend_scheme == PrependScheme::kAlways ||
                      (ms.prepend_scheme == PrependScheme::kFirst && piece.at_start))) {
        piece.text.insert(0, ms.replacement);
      }
      if (!ms.split) {
        out.push_back(std::move(piece));
        continue;
      }
      ZERO_ASSIGN_OR_RETURN(std::vector<ByteSpan> m, ms.marker.find_all(piece.text));
      emit_spans(piece, split_spans(piece.text.size(), m, SplitBehavior::kMergedWithNext, false));
    }
  }
  *pieces = std::move(out);
  return ok_status();
}

Status PreTokenizer::split(std::vector<Piece>* pieces) const {
  std::erase_if(*pieces, [](const Piece& p) { return p.text.empty(); });
  for (const Step& step : steps_) {
    ZERO_RETURN_IF_ERROR(apply(step, pieces));
    std::erase_if(*pieces, [](const Piece& p) { return p.text.empty(); });
  }
  return ok_status();
}

}  // namespace zero::text
