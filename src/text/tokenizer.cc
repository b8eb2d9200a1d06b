#include "text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace zero::text {
namespace {

StatusOr<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Top-level keys of tokenizer.json this reader understands; any other is refused.
constexpr const char* kKnownKeys[] = {"version",      "truncation",     "padding",
                                      "added_tokens", "normalizer",     "pre_tokenizer",
                                      "model",        "post_processor", "decoder"};

}  // namespace

StatusOr<Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path json_path = path, config_path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    json_path = fs::path(path) / "tokenizer.json";
    config_path = fs::path(path) / "tokenizer_config.json";
    if (!fs::exists(json_path, ec)) {
      if (fs::exists(fs::path(path) / "tokenizer.model", ec)) {
        return unimplemented(
            "{}: has tokenizer.model (SentencePiece) but no tokenizer.json; a SentencePiece model "
            "alone is not supported yet: write tokenizer.json with transformers "
            "(AutoTokenizer.from_pretrained(dir).save_pretrained(dir))",
            path);
      }
      return not_found("{}: no tokenizer.json in the model directory", path);
    }
  } else {
    config_path = json_path.parent_path() / "tokenizer_config.json";
  }
  ZERO_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(json_path));
  std::string config_json;
  if (fs::exists(config_path, ec)) {
    ZERO_ASSIGN_OR_RETURN(config_json, read_file(config_path));
  }
  return from_strings(tokenizer_json, config_json, json_path.string());
}

StatusOr<Tokenizer> Tokenizer::from_strings(const std::string& tokenizer_json,
                                            const std::string& config_json,
                                            const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(tokenizer_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("{}: not a JSON object", source);
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKnownKeys), std::end(kKnownKeys), key) == std::end(kKnownKeys)) {
      return unimplemented("{}: unknown top-level key {:?}", source, key);
    }
  }
  Tokenizer t;
  t.source_ = source;
  if (!j.contains("model")) return invalid_argument("{}: no \"model\"", source);
  const nlohmann::json null;
  auto get = [&](const char* key) -> const nlohmann::json& {
    return j.contains(key) ? j[key] : null;
  };
  // truncation / padding are not applied (transformers overrides them per call anyway).
  ZERO_ASSIGN_OR_RETURN(t.normalizer_, Normalizer::from_json(get("normalizer"), source));
  ZERO_ASSIGN_OR_RETURN(t.pre_tokenizer_, PreTokenizer::from_json(get("pre_tokenizer"), source));
  ZERO_ASSIGN_OR_RETURN(t.model_, BpeModel::from_json(j["model"], source));
  ZERO_ASSIGN_OR_RETURN(t.decoder_, Decoder::from_json(get("decoder"), source));
  ZERO_ASSIGN_OR_RETURN(t.post_, PostProcessor::from_json(get("post_processor"), source));
  ZERO_ASSIGN_OR_RETURN(t.added_,
                        AddedVocabulary::from_json(get("added_tokens"), t.normalizer_, source));
  t.vocab_size_ = t.model_.id_bound();
  for (const AddedToken& a : t.added_.tokens()) {
    t.vocab_size_ = std::max<int64_t>(t.vocab_size_, a.id + 1);
  }
  for (const std::vector<int32_t>* ids : {&t.post_.prefix_ids(), &t.post_.suffix_ids()}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= t.vocab_size_) {
        return invalid_argument("{}: post_processor: special token id {} is outside the vocab",
                                source, id);
      }
    }
  }

  if (!config_json.empty()) {
    const std::string config_source =
        (std::filesystem::path(source).parent_path() / "tokenizer_config.json").string();
    nlohmann::json c = nlohmann::json::parse(config_json, nullptr, false);
    if (c.is_discarded() || !c.is_object()) {
      return invalid_argument("{}: not a JSON object", config_source);
    }
    struct Slot {
      const char* key;
      std::optional<int32_t>* id;
    };
    for (const Slot& s : {Slot{"bos_token", &t.bos_id_}, Slot{"eos_token", &t.eos_id_},
                          Slot{"pad_token", &t.pad_id_}, Slot{"unk_token", &t.unk_id_}}) {
      if (!c.contains(s.key) || c[s.key].is_null()) continue;
      const nlohmann::json& v = c[s.key];
      std::string content;
      if (v.is_string()) {
        content = v.get<std::string>();
      } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
        content = v["content"].get<std::string>();
      } else {
        return invalid_argument("{}: {} must be a string or {{\"content\": ...}}, got {}",
                                config_source, s.key, v.dump());
      }
      *s.id = t.token_to_id(content);
      if (!*s.id) {
        return invalid_argument("{}: {} {:?} is not a token of {}", config_source, s.key, content,
                                source);
      }
    }
  }

  const std::string canonical =
      fmt::format("{}\nbos={} eos={} pad={} unk={}\n", j.dump(), t.bos_id_.value_or(-1),
                  t.eos_id_.value_or(-1), t.pad_id_.value_or(-1), t.unk_id_.value_or(-1));
  t.content_hash_ = fmt::format("xxh3:{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
  return t;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.token_to_id(token)) return id;
  return model_.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = added_.find_id(id)) return a->token;
  if (const std::string* s = model_.id_to_token(id)) return *s;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* a = added_.find_id(id);
  return a != nullptr && a->special;
}

Status Tokenizer::encode_text(std::string_view text, bool at_start,
                              std::vector<int32_t>* ids) const {
  std::string normalized;
  if (!normalizer_.empty()) {
    ZERO_ASSIGN_OR_RETURN(normalized, normalizer_.normalize(text));
    text = normalized;
  }
  std::vector<Piece> words;
  for (const Segment& seg : added_.split(text, /*normalized_set=*/true)) {
    if (seg.token_id >= 0) {
      ids->push_back(seg.token_id);
      continue;
    }
    words.clear();
    words.push_back({std::string(text.substr(seg.span.begin, seg.span.end - seg.span.begin)),
                     at_start && seg.span.begin == 0});
    ZERO_RETURN_IF_ERROR(pre_tokenizer_.split(&words));
    for (const Piece& w : words) model_.tokenize(w.text, ids);
  }
  return ok_status();
}

StatusOr<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                                 bool add_special_tokens) const {
  const size_t bad = first_invalid_utf8(text);
  if (bad != text.size()) {
    return invalid_argument("text is not valid UTF-8 at byte {} (0x{:02X})", bad,
                            static_cast<uint8_t>(text[bad]));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const Segment& seg : added_.split(text, /*normalized_set=*/false)) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
    } else {
      ZERO_RETURN_IF_ERROR(encode_text(text.substr(seg.span.begin, seg.span.end - seg.span.begin),
                                       seg.span.begin == 0, &ids));
    }
  }
  if (add_special_tokens) post_.add_special_tokens(&ids);
  return ids;
}

StatusOr<std::string> Tokenizer::decode(std::span<const int32_t> ids,
                                        bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* a = added_.find_id(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->token);
    } else if (const std::string* s = model_.id_to_token(id)) {
      tokens.push_back(*s);
    } else {
      return invalid_argument("token id {} is not in the vocabulary of {} (size {})", id, source_,
                              vocab_size_);
    }
  }
  return decoder_.decode(std::move(tokens));
}

}  // namespace zero::text
