#include "text/post_processor.h"

#include <nlohmann/json.hpp>

namespace zero::text {

Status PostProcessor::append(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  const std::string what = where + ": post_processor " + type;
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) {
      return invalid_argument("{} has no \"processors\" list", what);
    }
    for (const auto& child : j["processors"]) ZERO_RETURN_IF_ERROR(append(child, where));
    return ok_status();
  }
  if (type == "ByteLevel") return ok_status();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // {"cls": ["<s>", 0], "sep": ["</s>", 2]}
    for (const char* key : {"cls", "sep"}) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 ||
          !j[key][1].is_number_integer()) {
        return invalid_argument("{}: \"{}\" must be [token, id]", what, key);
      }
    }
    if (!prefix_.empty() || !suffix_.empty()) {
      return unimplemented("{}: a second processor that adds special tokens", what);
    }
    prefix_.push_back(j["cls"][1].get<int32_t>());
    suffix_.push_back(j["sep"][1].get<int32_t>());
    return ok_status();
  }
  if (type == "TemplateProcessing") {
    if (!j.contains("single") || !j["single"].is_array()) {
      return invalid_argument("{} has no \"single\" template list", what);
    }
    if (!prefix_.empty() || !suffix_.empty()) {
      return unimplemented("{}: a second processor that adds special tokens", what);
    }
    const nlohmann::json specials = j.value("special_tokens", nlohmann::json::object());
    bool seen_sequence = false;
    for (const auto& item : j["single"]) {
      if (item.contains("Sequence")) {
        if (item["Sequence"].value("id", "A") != "A" || seen_sequence) {
          return invalid_argument("{}: the single template must hold $A once: {}", what,
                                  j["single"].dump());
        }
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", "");
        if (!specials.contains(name) || !specials[name].contains("ids") ||
            !specials[name]["ids"].is_array()) {
          return invalid_argument("{}: special token {:?} is not in \"special_tokens\"", what,
                                  name);
        }
        for (const auto& id : specials[name]["ids"]) {
          (seen_sequence ? suffix_ : prefix_).push_back(id.get<int32_t>());
        }
      } else {
        return invalid_argument("{}: unknown template item {}", what, item.dump());
      }
    }
    return ok_status();
  }
  return unimplemented(
      "{}: post_processor type {:?} is not supported (supported: TemplateProcessing, ByteLevel, "
      "RobertaProcessing, BertProcessing, Sequence)",
      where, type.empty() ? j.dump() : type);
}

StatusOr<PostProcessor> PostProcessor::from_json(const nlohmann::json& j,
                                                 const std::string& where) {
  PostProcessor p;
  if (!j.is_null()) ZERO_RETURN_IF_ERROR(p.append(j, where));
  return p;
}

void PostProcessor::add_special_tokens(std::vector<int32_t>* ids) const {
  if (!prefix_.empty()) ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
  ids->insert(ids->end(), suffix_.begin(), suffix_.end());
}

}  // namespace zero::text
