// read_prompts_file (prompts_file.h): JSONL lines -> checked, encoded sequences.
#include "runtime/prompts_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "config/did_you_mean.h"

namespace zero::runtime {
namespace {

constexpr std::array<std::string_view, 10> kKeys = {
    "prompt",      "prompt_tokens", "id",    "max_new_tokens",
    "temperature", "top_k",         "top_p", "repetition_penalty",
    "seed",        "stop"};

// The line's keys applied to `o` (and its stop strings to `stop`). `where` is "PATH:LINE".
Status apply_overrides(const nlohmann::json& j, const std::string& where, SamplingOptions* o,
                       std::vector<std::string>* stop) {
  auto integer = [&](const char* key, int64_t min, int64_t* out) -> Status {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) ||
        v.get<int64_t>() < min) {
      return invalid_argument("{}: \"{}\" must be an integer >= {}, got {}", where, key, min,
                              v.dump());
    }
    *out = v.get<int64_t>();
    return ok_status();
  };
  // A number in [min, max], or (min, max] when `exclusive`.
  auto real = [&](const char* key, double min, bool exclusive, double max, double* out) -> Status {
    const nlohmann::json& v = j.at(key);
    const double x = v.is_number() ? v.get<double>() : 0.0;
    if (!v.is_number() || !(exclusive ? x > min : x >= min) || x > max) {
      return invalid_argument("{}: \"{}\" must be a number {} {}{}, got {}", where, key,
                              exclusive ? ">" : ">=", min,
                              max < 1e308 ? fmt::format(" and <= {}", max) : "", v.dump());
    }
    *out = x;
    return ok_status();
  };
  if (j.contains("max_new_tokens")) {
    ZERO_RETURN_IF_ERROR(integer("max_new_tokens", 0, &o->max_new_tokens));
  }
  if (j.contains("temperature")) {
    ZERO_RETURN_IF_ERROR(real("temperature", 0, false, 1e308, &o->temperature));
  }
  if (j.contains("top_k")) ZERO_RETURN_IF_ERROR(integer("top_k", 0, &o->top_k));
  if (j.contains("top_p")) ZERO_RETURN_IF_ERROR(real("top_p", 0, true, 1, &o->top_p));
  if (j.contains("repetition_penalty")) {
    ZERO_RETURN_IF_ERROR(real("repetition_penalty", 0, true, 1e308, &o->repetition_penalty));
  }
  if (j.contains("seed")) {
    const nlohmann::json& v = j.at("seed");
    if (!v.is_number_unsigned()) {
      return invalid_argument("{}: \"seed\" must be an integer >= 0, got {}", where, v.dump());
    }
    o->seed = v.get<uint64_t>();
  }
  if (j.contains("stop")) {
    const nlohmann::json& v = j.at("stop");
    const nlohmann::json list = v.is_string() ? nlohmann::json::array({v}) : v;
    bool good = list.is_array();
    for (const nlohmann::json& s : good ? list : nlohmann::json::array()) {
      good = good && s.is_string() && !s.get<std::string>().empty();
    }
    if (!good) {
      return invalid_argument("{}: \"stop\" must be a non-empty string or an array of them, got {}",
                              where, v.dump());
    }
    for (const nlohmann::json& s : list) stop->push_back(s.get<std::string>());
  }
  return ok_status();
}

// Every key known; the prompt given once, as text or ids.
Status check_keys(const nlohmann::json& j, const std::string& where) {
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end()) continue;
    const std::optional<std::string> guess = config::did_you_mean(key, kKeys);
    std::string known;
    for (std::string_view k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k);
    return invalid_argument("{}: unknown key \"{}\"{} (known: {})", where, key,
                            guess ? fmt::format(" (did you mean \"{}\"?)", *guess) : "", known);
  }
  const bool text = j.contains("prompt"), ids = j.contains("prompt_tokens");
  if (text == ids) {
    return invalid_argument("{}: {} \"prompt\" (text) or \"prompt_tokens\" (ids)", where,
                            text ? "give one of" : "no prompt: give");
  }
  return ok_status();
}

// The line's prompt ids into s->tokens. Its "prompt" text through `encode`, or its "prompt_tokens".
Status encode_line(const nlohmann::json& j, const std::string& where, int64_t vocab_size,
                   const EncodePromptFn& encode, PromptLine* line, BatchSequence* s) {
  if (j.contains("prompt")) {
    line->prompt = j.at("prompt");
    line->prompt_is_text = true;
    if (!line->prompt.is_string()) {
      return invalid_argument("{}: \"prompt\" must be a string, got {}", where,
                              line->prompt.dump());
    }
    if (!encode) {
      return invalid_argument(
          "{}: \"prompt\" needs a tokenizer (tokenizer.json or tokenizer.model in the model "
          "directory) or a byte-level model (vocab_size 256); this model has {} tokens and no "
          "tokenizer: give \"prompt_tokens\" (ids) instead",
          where, vocab_size);
    }
    auto ids = encode(line->prompt.get<std::string>());
    if (!ids.ok()) return invalid_argument("{}: \"prompt\": {}", where, ids.status().message());
    s->tokens = std::move(*ids);
  } else {
    line->prompt = j.at("prompt_tokens");
    bool good = line->prompt.is_array() && !line->prompt.empty();
    for (const nlohmann::json& id : good ? line->prompt : nlohmann::json::array()) {
      good = good && id.is_number_integer() && id.get<int64_t>() >= 0 &&
             id.get<int64_t>() < vocab_size;
      if (good) s->tokens.push_back(id.get<int32_t>());
    }
    if (!good) {
      return invalid_argument(
          "{}: \"prompt_tokens\" must be a non-empty array of token ids in [0, {}), got {}", where,
          vocab_size, line->prompt.dump());
    }
  }
  if (!line->stop.empty() && !encode) {
    return invalid_argument(
        "{}: \"stop\" strings need a model with text (a tokenizer or a "
        "byte-level vocabulary)",
        where);
  }
  line->prompt_tokens = static_cast<int64_t>(s->tokens.size());
  return ok_status();
}

}  // namespace

StatusOr<PromptBatch> read_prompts_file(const std::string& path, const model::ModelConfig& config,
                                        const SamplingOptions& defaults,
                                        const EncodePromptFn& encode) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("{}: cannot read the prompts file: {}", path, std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string content = buffer.str();
  PromptBatch batch;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    ++line_no;
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    const std::string_view text = std::string_view(content).substr(pos, end - pos);
    pos = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument("{}: not valid JSON", where);
    if (!j.is_object()) return invalid_argument("{}: not a JSON object", where);
    ZERO_RETURN_IF_ERROR(check_keys(j, where));
    const int64_t index = static_cast<int64_t>(batch.sequences.size());
    PromptLine line;
    line.line = line_no;
    BatchSequence s;
    s.options = defaults;
    s.options.seed = sequence_seed(defaults.seed, index);
    ZERO_RETURN_IF_ERROR(apply_overrides(j, where, &s.options, &line.stop));
    if (j.contains("id")) line.id = j.at("id");
    ZERO_RETURN_IF_ERROR(encode_line(j, where, config.vocab_size, encode, &line, &s));
    const int64_t limit = generation_context_limit(config, s.options);
    if (line.prompt_tokens > limit) {
      return invalid_argument(
          "{}: the prompt is {} tokens, more than the context of {} positions (--context_limit, "
          "at most max_position_embeddings {})",
          where, line.prompt_tokens, limit, config.max_position_embeddings);
    }
    batch.sequences.push_back(std::move(s));
    batch.lines.push_back(std::move(line));
  }
  if (batch.sequences.empty())
    return invalid_argument("{}: no prompts (one JSON object a line)", path);
  return batch;
}

}  // namespace zero::runtime
