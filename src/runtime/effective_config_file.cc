// OUTPUT_DIR/ds_config.effective.json and the console summary (see effective_config_file.h).
#include "runtime/effective_config_file.h"

#include <fmt/format.h>

namespace zero::runtime {

namespace {

using config::Json;

std::string number_text(const Json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) return fmt::format("{:g}", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

bool enabled(const Json& json, const char* block) {
  const Json& b = json.contains(block) ? json[block] : Json();
  return b.is_object() && b.contains("enabled") && b["enabled"].is_boolean() &&
         b["enabled"].get<bool>();
}

std::string offload_device(const Json& zero, const char* key) {
  if (!zero.is_object() || !zero.contains(key) || !zero[key].is_object()) return "";
  const Json& d = zero[key].contains("device") ? zero[key]["device"] : Json();
  return d.is_string() && d.get<std::string>() != "none" ? d.get<std::string>() : "";
}

}  // namespace

void record_batch_triad(config::EffectiveConfig& effective, int64_t train_batch_size,
                        int64_t micro_batch_per_gpu, int64_t gradient_accumulation_steps) {
  const std::pair<const char*, int64_t> values[] = {
      {"train_batch_size", train_batch_size},
      {"train_micro_batch_size_per_gpu", micro_batch_per_gpu},
      {"gradient_accumulation_steps", gradient_accumulation_steps}};
  for (const auto& [key, value] : values) {
    const Json& cur = effective.json.contains(key) ? effective.json[key] : Json();
    const config::Origin origin = effective.origin(key);
    const bool written = cur.is_number_integer() && effective.origins.contains(key) &&
                         (origin == config::Origin::kFile || origin == config::Origin::kFlag);
    effective.json[key] = value;
    if (!written) effective.origins[key] = config::Origin::kDerived;
  }
}

Status write_effective_config(Storage& storage, const std::string& out_dir,
                              const config::EffectiveConfig& effective) {
  const std::string path = out_dir + "/" + kEffectiveConfigFile;
  const std::string tmp = path + ".tmp";
  const std::string text = effective.json.dump(2) + "\n";
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, storage.open_write(tmp));
  ZERO_RETURN_IF_ERROR(file->append(text.data(), text.size()));
  ZERO_RETURN_IF_ERROR(file->sync());
  ZERO_RETURN_IF_ERROR(file->close());
  // A reader sees the old file or the new one, never a half-written one.
  ZERO_RETURN_IF_ERROR(storage.rename(tmp, path));
  return ok_status();
}

std::string effective_config_summary(const config::EffectiveConfig& effective, int world_size,
                                     const OffloadOptions* placement) {
  const Json& j = effective.json;
  const Json& zero = j.contains("zero_optimization") ? j["zero_optimization"] : Json();
  std::string out = fmt::format("ZeRO stage {}", zero.is_object() && zero.contains("stage")
                                                     ? number_text(zero["stage"])
                                                     : std::string("0"));
  std::string opt_off = offload_device(zero, "offload_optimizer");
  std::string param_off = offload_device(zero, "offload_param");
  if (placement != nullptr) {
    opt_off = placement->optimizer == OptimizerOffload::kCpu    ? "cpu"
              : placement->optimizer == OptimizerOffload::kNvme ? "nvme"
                                                                : "";
    param_off = placement->param.device == sharding::ParamOffload::kCpu    ? "cpu"
                : placement->param.device == sharding::ParamOffload::kNvme ? "nvme"
                                                                           : "";
  }
  if (!opt_off.empty()) out += fmt::format(", optimizer on {}", opt_off);
  if (!param_off.empty()) out += fmt::format(", params on {}", param_off);
  out += enabled(j, "bf16") ? ", bf16" : enabled(j, "fp16") ? ", fp16" : ", fp32";
  if (j.contains("optimizer") && j["optimizer"].is_object()) {
    const Json& o = j["optimizer"];
    out += fmt::format(", {}", o.contains("type") ? number_text(o["type"]) : std::string("?"));
    if (o.contains("params") && o["params"].is_object() && o["params"].contains("lr")) {
      out += " lr " + number_text(o["params"]["lr"]);
    }
  }
  if (j.contains("scheduler") && j["scheduler"].is_object() && j["scheduler"].contains("type") &&
      j["scheduler"]["type"].is_string()) {
    out += ", " + number_text(j["scheduler"]["type"]);
  }
  auto triad = [&](const char* key) {
    return j.contains(key) ? number_text(j[key]) : std::string("?");
  };
  out += fmt::format(", train_batch_size {} (micro {} x accumulation {} x world {})",
                     triad("train_batch_size"), triad("train_micro_batch_size_per_gpu"),
                     triad("gradient_accumulation_steps"), world_size);
  if (j.contains("gradient_clipping"))
    out += ", gradient_clipping " + number_text(j["gradient_clipping"]);
  return out;
}

}  // namespace zero::runtime
