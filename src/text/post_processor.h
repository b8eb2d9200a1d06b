// tokenizer.json's "post_processor", for one sequence: the special tokens added around it when
// encoding with add_special_tokens (TemplateProcessing's "single" template, e.g. "<s> $A";
// RobertaProcessing / BertProcessing's cls ... sep). ByteLevel only adjusts offsets: a no-op here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace zero::text {

class PostProcessor {
 public:
  static StatusOr<PostProcessor> from_json(const nlohmann::json& j, const std::string& where);

  // Wraps `ids` in the template's special tokens.
  void add_special_tokens(std::vector<int32_t>* ids) const;
  const std::vector<int32_t>& prefix_ids() const { return prefix_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_; }

 private:
  Status append(const nlohmann::json& j, const std::string& where);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace zero::text
