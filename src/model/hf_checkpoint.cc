// HF checkpoint reading and writing over the safetensors reader/writer.
#include "model/hf_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

namespace zero::model {

namespace {

bool is_ignored_buffer(const std::string& name) {
  auto ends_with = [&](const char* s) {
    size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return ends_with("attn.bias") || ends_with("attn.masked_bias") ||
         ends_with("rotary_emb.inv_freq");
}

// A multimodal checkpoint's tensors outside its language model (Gemma 3's vision tower and
// projector, in the published and in transformers' in-memory naming): copied through, not trained.
bool is_passthrough(const ModelConfig& c, const std::string& name) {
  if (c.multimodal_type.empty()) return false;
  for (const char* prefix : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                             "model.multi_modal_projector."}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// HF names a file may use for our parameter `name` (GPT-2 base checkpoints drop "transformer.";
// a multimodal checkpoint's language model is under language_model.* or model.language_model.*),
// the name written first.
std::vector<std::string> candidate_names(const ModelLayout& layout, const ParamSpec& p) {
  if (!p.hf_fused.empty()) return {p.hf_fused};
  const std::string& name = p.name;
  if (!layout.config().multimodal_type.empty()) {
    if (name.rfind("model.", 0) == 0) {
      return {"language_model." + name, "model.language_model." + name.substr(6)};
    }
    return {"language_model." + name, name};  // lm_head.weight
  }
  std::vector<std::string> c{name};
  const std::string pre = "transformer.";
  if (layout.config().arch == Arch::kGpt2 && name.rfind(pre, 0) == 0) {
    c.push_back(name.substr(pre.size()));
  }
  return c;
}

// The HF tensor's shape: the whole fused matrix for a part of one.
std::vector<int64_t> hf_shape(const ParamSpec& p) {
  if (!p.hf_fused.empty()) return {p.hf_fused_rows, p.shape[1]};
  std::vector<int64_t> s = p.shape.dims();
  if (p.hf_transposed) std::reverse(s.begin(), s.end());
  return s;
}

std::string join_path(const std::string& dir, const std::string& file) {
  if (dir.empty()) return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

// The safetensors files of an HF directory: model.safetensors, or the shards its index names.
StatusOr<std::vector<std::string>> weight_files(Storage& storage, const std::string& dir) {
  std::vector<std::string> files;
  const std::string single = join_path(dir, "model.safetensors");
  const std::string index = join_path(dir, "model.safetensors.index.json");
  if (storage.file_exists(single)) {
    files.push_back(single);
  } else if (storage.file_exists(index)) {
    ZERO_ASSIGN_OR_RETURN(std::string text, read_file(storage, index, kMaxMetadataFileBytes));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return invalid_argument("{}: not a safetensors index (no \"weight_map\" object)", index);
    }
    std::set<std::string> unique;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        return invalid_argument("{}: weight_map.{} is not a file name", index, name);
      unique.insert(file.get<std::string>());
    }
    for (const auto& f : unique) {
      if (f.find('/') != std::string::npos || f == "..") {
        return invalid_argument("{}: shard file name \"{}\" must be a plain file name", index, f);
      }
      files.push_back(join_path(dir, f));
    }
  } else {
    return not_found(
        "{}: no model.safetensors or model.safetensors.index.json (pickle .bin "
        "checkpoints are not read; convert them with `transformers` to safetensors)",
        dir);
  }
  return files;
}

}  // namespace

StatusOr<std::unique_ptr<HfWeightReader>> HfWeightReader::open(Storage& storage,
                                                               const std::string& dir,
                                                               const ModelLayout& layout) {
  std::unique_ptr<HfWeightReader> r(new HfWeightReader(layout));
  ZERO_ASSIGN_OR_RETURN(std::vector<std::string> files, weight_files(storage, dir));
  std::map<std::string, const SafetensorsReader*> by_name;
  for (const auto& f : files) {
    ZERO_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(storage, f));
    r->files_.push_back(std::make_unique<SafetensorsReader>(std::move(reader)));
    const SafetensorsReader* rp = r->files_.back().get();
    for (const auto& e : rp->tensors()) {
      if (by_name.count(e.name)) {
        return invalid_argument("{}: tensor {} also appears in {}", f, e.name,
                                by_name[e.name]->path());
      }
      by_name[e.name] = rp;
    }
  }

  std::set<std::string> used;
  for (const auto& unit : layout.units()) {
    for (const auto& p : unit.params) {
      const SafetensorsEntry* found = nullptr;
      const SafetensorsReader* where = nullptr;
      for (const auto& cand : candidate_names(layout, p)) {
        auto it = by_name.find(cand);
        if (it != by_name.end()) {
          where = it->second;
          found = where->find(cand);
          break;
        }
      }
      if (!found) return not_found("{}: missing tensor {}", dir, candidate_names(layout, p)[0]);
      if (!to_dtype(found->dtype)) {
        return invalid_argument("{}: tensor {} has dtype {}; weights must be F32, BF16 or F16",
                                where->path(), found->name, safetensors_dtype_name(found->dtype));
      }
      if (found->shape != hf_shape(p)) {
        return invalid_argument("{}: tensor {} has shape [{}], the model config says [{}]",
                                where->path(), found->name, fmt::join(found->shape, ", "),
                                fmt::join(hf_shape(p), ", "));
      }
      r->sources_[p.name] = Source{where, found->name, p.hf_row_offset * p.shape.dim(-1)};
      used.insert(found->name);
    }
  }
  // Anything else must be a known buffer or a tied head duplicate.
  for (const auto& [name, reader] : by_name) {
    if (used.count(name) || is_ignored_buffer(name) || is_passthrough(layout.config(), name)) {
      continue;
    }
    if (layout.config().tie_word_embeddings &&
        (name == "lm_head.weight" || name == "language_model.lm_head.weight")) {
      continue;
    }
    return invalid_argument(
        "{}: unexpected tensor {} (not part of a {} model with this config.json; wrong config?)",
        reader->path(), name, layout.config().model_type);
  }
  return r;
}

Status HfWeightReader::read_param(const ParamSpec& p, std::vector<float>& out) const {
  const Source& src = sources_.at(p.name);
  out.resize(static_cast<size_t>(p.numel()));
  if (!p.hf_transposed) {
    return src.reader->read_range_f32(src.tensor_name, src.elem_offset, p.numel(), out.data());
  }
  std::vector<float> tmp(out.size());
  ZERO_RETURN_IF_ERROR(src.reader->read_f32(src.tensor_name, tmp.data(), p.numel()));
  const int64_t rows = p.shape[0],
                cols = p.shape[1];  // ours (out, in); HF (in, out) = (cols, rows)
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t o = 0; o < rows; ++o)
      out[static_cast<size_t>(o * cols + i)] = tmp[static_cast<size_t>(i * rows + o)];
  return ok_status();
}

DType HfWeightReader::stored_dtype() const {
  std::optional<SafetensorsDType> common;
  for (const auto& [name, src] : sources_) {
    const SafetensorsEntry* e = src.reader->find(src.tensor_name);
    if (e == nullptr) return DType::kF32;
    if (common && *common != e->dtype) return DType::kF32;
    common = e->dtype;
  }
  if (common == SafetensorsDType::kBF16) return DType::kBF16;
  if (common == SafetensorsDType::kF16) return DType::kF16;
  return DType::kF32;
}

Status HfWeightReader::read_unit_range(int u, int64_t begin, int64_t end, float* dst) const {
  const UnitSpec& unit = layout_.unit(u);
  std::fill(dst, dst + (end - begin), 0.0f);
  std::vector<float> buf;
  for (const auto& p : unit.params) {
    int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    if (lo >= hi) continue;
    const Source& src = sources_.at(p.name);
    if (!p.hf_transposed) {
      ZERO_RETURN_IF_ERROR(src.reader->read_range_f32(
          src.tensor_name, src.elem_offset + lo - p.offset, hi - lo, dst + (lo - begin)));
      continue;
    }
    ZERO_RETURN_IF_ERROR(read_param(p, buf));
    std::memcpy(dst + (lo - begin), buf.data() + (lo - p.offset),
                static_cast<size_t>(hi - lo) * sizeof(float));
  }
  return ok_status();
}

StatusOr<uint64_t> parse_size_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return invalid_argument("size \"{}\": expected a number like 5GB or 500MB", text);
  const std::string number = text.substr(0, i);
  if (std::count(number.begin(), number.end(), '.') > 1) {
    return invalid_argument("size \"{}\": expected a number like 5GB or 500MB", text);
  }
  double value = std::stod(number);
  std::string unit = text.substr(i);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  else if (unit == "KIB")
    mult = 1024.0;
  else if (unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else
    return invalid_argument("size \"{}\": unknown unit \"{}\" (B, KB, MB, GB, TB, KiB, MiB, GiB)",
                            text, unit);
  const double bytes = value * mult;
  if (!(bytes >= 1)) return invalid_argument("size \"{}\": must be at least 1 byte", text);
  if (bytes >= 9.2e18) return invalid_argument("size \"{}\": too large", text);
  return static_cast<uint64_t>(bytes);
}

Status save_hf_model(Storage& storage, const std::string& dir, const ModelLayout& layout,
                     const std::function<const float*(int u)>& unit_values,
                     const HfSaveOptions& options) {
  ZERO_RETURN_IF_ERROR(storage.make_dirs(dir));
  const SafetensorsDType st_dtype = to_safetensors_dtype(options.dtype);
  const size_t elem_bytes = dtype_bytes(options.dtype);

  // Assign parameters to shards in layout order, each shard at most max_shard_bytes (a parameter
  // larger than the limit gets a shard of its own, as HF does).
  // A parameter of ours, or (a multimodal checkpoint) a tensor copied through from the directory
  // the model was read from, bytes and dtype unchanged.
  struct Item {
    int unit = -1;
    const ParamSpec* param = nullptr;
    const SafetensorsReader* source = nullptr;
    const SafetensorsEntry* entry = nullptr;
  };
  std::vector<std::vector<Item>> shards(1);
  uint64_t shard_bytes = 0;
  auto place = [&](Item item, uint64_t bytes) {
    if (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(item);
    shard_bytes += bytes;
  };
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& p : layout.unit(u).params) {
      // A fused matrix (Phi-3) is written whole with its first part, from the unit's contiguous
      // rows of all its parts.
      if (p.hf_row_offset > 0) continue;
      const int64_t numel = p.hf_fused.empty() ? p.numel() : p.hf_fused_rows * p.shape[1];
      place({.unit = u, .param = &p}, static_cast<uint64_t>(numel) * elem_bytes);
    }
  }
  std::vector<std::unique_ptr<SafetensorsReader>> sources;
  if (!layout.config().multimodal_type.empty()) {
    const std::string& from = layout.config().source_dir;
    auto files = weight_files(storage, from);
    if (from.empty() || !files.ok()) {
      return not_found(
          "saving the {} model: its vision tower and projector are copied from the directory "
          "the model was read from ({}), which {}",
          layout.config().multimodal_type, from.empty() ? "is not known" : from,
          from.empty() ? "this run did not record" : files.status().message());
    }
    for (const std::string& f : *files) {
      ZERO_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(storage, f));
      sources.push_back(std::make_unique<SafetensorsReader>(std::move(reader)));
      for (const SafetensorsEntry& e : sources.back()->tensors()) {
        if (!is_passthrough(layout.config(), e.name)) continue;
        place({.source = sources.back().get(), .entry = &e}, e.nbytes());
      }
    }
  }

  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_bytes = 0;
  const size_t n = shards.size();
  for (size_t s = 0; s < n; ++s) {
    std::string file =
        n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n);
    SafetensorsWriter writer;
    writer.set_metadata("format", "pt");
    for (const Item& item : shards[s]) {
      if (item.entry != nullptr) {
        const SafetensorsEntry& e = *item.entry;
        weight_map[e.name] = file;
        total_bytes += e.nbytes();
        ZERO_RETURN_IF_ERROR(writer.add_streamed(
            e.name, e.dtype, e.shape, [&e, src = item.source](WritableFile& f) -> Status {
              std::vector<std::byte> bytes(e.nbytes());
              ZERO_RETURN_IF_ERROR(src->read(e.name, bytes.data(), bytes.size()));
              return f.append(bytes.data(), bytes.size());
            }));
        continue;
      }
      const ParamSpec& p = *item.param;
      const int unit = item.unit;
      const std::string hf_name = candidate_names(layout, p)[0];
      const int64_t numel = p.hf_fused.empty() ? p.numel() : p.hf_fused_rows * p.shape[1];
      weight_map[hf_name] = file;
      total_bytes += static_cast<uint64_t>(numel) * elem_bytes;
      ZERO_RETURN_IF_ERROR(writer.add_streamed(
          hf_name, st_dtype, hf_shape(p), [&, unit, numel, pp = &p](WritableFile& f) -> Status {
            const float* src = unit_values(unit) + pp->offset;
            std::vector<float> tmp;
            if (pp->hf_transposed) {
              const int64_t rows = pp->shape[0], cols = pp->shape[1];
              tmp.resize(static_cast<size_t>(pp->numel()));
              for (int64_t o = 0; o < rows; ++o)
                for (int64_t i = 0; i < cols; ++i)
                  tmp[static_cast<size_t>(i * rows + o)] = src[o * cols + i];
              src = tmp.data();
            }
            std::vector<std::byte> bytes(static_cast<size_t>(numel) * elem_bytes);
            convert_from_f32(src, bytes.data(), options.dtype, static_cast<size_t>(numel));
            return f.append(bytes.data(), bytes.size());
          }));
    }
    const std::string path = join_path(dir, file);
    const std::string tmp_path = path + ".tmp";
    ZERO_RETURN_IF_ERROR(writer.write(storage, tmp_path, /*sync=*/true));
    ZERO_RETURN_IF_ERROR(storage.rename(tmp_path, path));
  }
  if (n > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                            {"weight_map", weight_map}};
    ZERO_RETURN_IF_ERROR(write_file_atomically(
        storage, join_path(dir, "model.safetensors.index.json"), index.dump(2) + "\n"));
  }
  const char* dtype_name = options.dtype == DType::kF32    ? "float32"
                           : options.dtype == DType::kBF16 ? "bfloat16"
                                                           : "float16";
  nlohmann::json config = model_config_to_json(layout.config(), dtype_name);
  ZERO_RETURN_IF_ERROR(
      write_file_atomically(storage, join_path(dir, "config.json"), config.dump(2) + "\n"));
  ZERO_RETURN_IF_ERROR(
      write_file_atomically(storage, join_path(dir, "generation_config.json"),
                            generation_config_to_json(layout.config()).dump(2) + "\n"));
  return storage.sync_dir(dir);
}

}  // namespace zero::model
