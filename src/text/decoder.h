// tokenizer.json's "decoder": turns token strings back into text. Supported: ByteLevel (GPT-2's
// alphabet back to bytes, invalid UTF-8 replaced by U+FFFD per maximal subpart as Rust's
// from_utf8_lossy), ByteFallback (<0xNN> runs; an invalid run gives one U+FFFD per byte), Fuse,
// Strip, Replace, Metaspace, and Sequence of these. Without a decoder tokens are joined by " ".
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/pattern.h"
#include "text/pre_tokenizer.h"

namespace zero::text {

class Decoder {
 public:
  // `j` is the "decoder" value (null: join with spaces).
  static StatusOr<Decoder> from_json(const nlohmann::json& j, const std::string& where);

  // The text of `tokens` (consumed), as HF's Decoder::decode.
  StatusOr<std::string> decode(std::vector<std::string> tokens) const;

 private:
  struct ByteLevel {};
  struct ByteFallback {};
  struct Fuse {};
  struct Strip {
    char32_t content;
    size_t start;
    size_t stop;
  };
  struct Replace {
    Pattern pattern;
    std::string content;
  };
  struct Metaspace {
    std::string replacement;
    PrependScheme prepend_scheme;
  };
  using Step = std::variant<ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace>;
  Status append_steps(const nlohmann::json& j, const std::string& where);
  Status apply(const Step& step, std::vector<std::string>* tokens) const;

  bool present_ = false;
  std::vector<Step> steps_;
  std::shared_ptr<const ByteLevelAlphabet> alphabet_;
};

}  // namespace zero::text
