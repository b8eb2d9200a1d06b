#include "text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
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

// tokenizer_class values whose transformers tokenizer rebuilds BOS/EOS from tokenizer_config.json.
const std::set<std::string> kRebuildsTemplate = {"LlamaTokenizer",     "LlamaTokenizerFast",
                                                 "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
                                                 "GemmaTokenizer",     "GemmaTokenizerFast"};

}  // namespace

StatusOr<Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path json_path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    json_path = fs::path(path) / "tokenizer.json";
    if (!fs::exists(json_path, ec)) {
      if (!fs::exists(fs::path(path) / "tokenizer.model", ec)) {
        return not_found("{}: no tokenizer.json or tokenizer.model in the model directory", path);
      }
      json_path = fs::path(path) / "tokenizer.model";
    }
  }
  const fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  std::string config_json;
  if (fs::exists(config_path, ec)) {
    ZERO_ASSIGN_OR_RETURN(config_json, read_file(config_path));
  }
  if (json_path.extension() == ".model") return load_sentencepiece(json_path.string(), config_json);
  ZERO_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(json_path));
  return from_strings(tokenizer_json, config_json, json_path.string());
}

StatusOr<Tokenizer> Tokenizer::load_sentencepiece(const std::string& model_path,
                                                  const std::string& config_json) {
  Tokenizer t;
  t.source_ = model_path;
  ZERO_ASSIGN_OR_RETURN(t.spm_, SentencePieceModel::load(model_path));
  t.vocab_size_ = t.spm_->vocab_size();
  t.bos_id_ = t.spm_->bos_id();
  t.eos_id_ = t.spm_->eos_id();
  t.pad_id_ = t.spm_->pad_id();
  t.unk_id_ = t.spm_->unk_id();
  // BOS/EOS as transformers' LlamaTokenizer: add_bos_token (default true) and add_eos_token
  // (default false) from tokenizer_config.json.
  bool add_bos = true, add_eos = false;
  if (!config_json.empty()) {
    const std::string config_source =
        (std::filesystem::path(model_path).parent_path() / "tokenizer_config.json").string();
    ZERO_RETURN_IF_ERROR(t.read_config(config_json, config_source));
    const nlohmann::json c = nlohmann::json::parse(config_json, nullptr, false);
    add_bos = c.value("add_bos_token", true);
    add_eos = c.value("add_eos_token", false);
  }
  if (add_bos && t.bos_id_) t.prefix_ids_.push_back(*t.bos_id_);
  if (add_eos && t.eos_id_) t.suffix_ids_.push_back(*t.eos_id_);
  t.set_content_hash(t.spm_->serialized());
  return t;
}

void Tokenizer::set_content_hash(const std::string& canonical_model) {
  const std::string canonical =
      fmt::format("{}\nbos={} eos={} pad={} unk={} prefix={} suffix={}\n", canonical_model,
                  bos_id_.value_or(-1), eos_id_.value_or(-1), pad_id_.value_or(-1),
                  unk_id_.value_or(-1), fmt::join(prefix_ids_, ","), fmt::join(suffix_ids_, ","));
  content_hash_ = fmt::format("xxh3:{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
}

Status Tokenizer::read_config(const std::string& config_json, const std::string& config_source) {
  config_source_ = config_source;
  const nlohmann::json c = nlohmann::json::parse(config_json, nullptr, false);
  if (c.is_discarded() || !c.is_object()) {
    return invalid_argument("{}: not a JSON object", config_source);
  }
  struct Slot {
    const char* key;
    std::optional<int32_t>* id;
  };
  for (const Slot& s : {Slot{"bos_token", &bos_id_}, Slot{"eos_token", &eos_id_},
                        Slot{"pad_token", &pad_id_}, Slot{"unk_token", &unk_id_}}) {
    if (!c.contains(s.key)) continue;
    const nlohmann::json& v = c[s.key];
    if (v.is_null()) {
      *s.id = std::nullopt;
      continue;
    }
    std::string content;
    if (v.is_string()) {
      content = v.get<std::string>();
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      content = v["content"].get<std::string>();
    } else {
      return invalid_argument("{}: {} must be a string or {{\"content\": ...}}, got {}",
                              config_source, s.key, v.dump());
    }
    *s.id = token_to_id(content);
    if (!*s.id) {
      return invalid_argument("{}: {} {:?} is not a token of {}", config_source, s.key, content,
                              source_);
    }
  }
  if (c.contains("chat_template")) {
    const nlohmann::json& ct = c["chat_template"];
    if (ct.is_string()) {
      chat_template_ = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const auto& named : ct) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          chat_template_ = named["template"].get<std::string>();
        }
      }
    }
  }
  // transformers' Llama / Gemma fast tokenizers rebuild the post-processor from add_bos_token
  // (default true) and add_eos_token (default false) when they load, whatever tokenizer.json says.
  const std::string tokenizer_class = c.value("tokenizer_class", "");
  if (!spm_ && kRebuildsTemplate.contains(tokenizer_class)) {
    prefix_ids_.clear();
    suffix_ids_.clear();
    if (c.value("add_bos_token", true)) {
      if (!bos_id_) {
        return invalid_argument("{}: add_bos_token is true but there is no bos_token",
                                config_source);
      }
      prefix_ids_.push_back(*bos_id_);
    }
    if (c.value("add_eos_token", false)) {
      if (!eos_id_) {
        return invalid_argument("{}: add_eos_token is true but there is no eos_token",
                                config_source);
      }
      suffix_ids_.push_back(*eos_id_);
    }
  }
  return ok_status();
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

  t.prefix_ids_ = t.post_.prefix_ids();
  t.suffix_ids_ = t.post_.suffix_ids();
  if (!config_json.empty()) {
    ZERO_RETURN_IF_ERROR(t.read_config(
        config_json,
        (std::filesystem::path(source).parent_path() / "tokenizer_config.json").string()));
  }
  t.set_content_hash(j.dump());
  return t;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (spm_) return spm_->piece_to_id(token);
  if (auto id = added_.token_to_id(token)) return id;
  return model_.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (spm_) {
    if (id < 0 || id >= vocab_size_) return std::nullopt;
    return spm_->id_to_piece(id);
  }
  if (const AddedToken* a = added_.find_id(id)) return a->token;
  if (const std::string* s = model_.id_to_token(id)) return *s;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  if (spm_) return id >= 0 && id < vocab_size_ && spm_->is_control(id);
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
  if (spm_) {
    ZERO_ASSIGN_OR_RETURN(ids, spm_->encode(text));
  } else {
    ids.reserve(text.size() / 3 + 4);
    for (const Segment& seg : added_.split(text, /*normalized_set=*/false)) {
      if (seg.token_id >= 0) {
        ids.push_back(seg.token_id);
      } else {
        ZERO_RETURN_IF_ERROR(encode_text(text.substr(seg.span.begin, seg.span.end - seg.span.begin),
                                         seg.span.begin == 0, &ids));
      }
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.begin(), prefix_ids_.begin(), prefix_ids_.end());
    ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  }
  return ids;
}

StatusOr<std::string> Tokenizer::decode(std::span<const int32_t> ids,
                                        bool skip_special_tokens) const {
  if (spm_) {
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size_) {
        return invalid_argument("token id {} is not in the vocabulary of {} (size {})", id, source_,
                                vocab_size_);
      }
    }
    return spm_->decode(ids, skip_special_tokens);
  }
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
