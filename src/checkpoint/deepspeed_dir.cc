// DeepSpeed checkpoint directories: recognised and refused with the import / conversion commands.
#include "checkpoint/deepspeed_dir.h"

#include <algorithm>
#include <cctype>

namespace zero::checkpoint {
namespace {

std::string join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The model / optimizer state files of one tag directory (DeepSpeed's names, incl. the legacy
// "..._mp_rank_00optim_states.pt" without the underscore).
void scan_tag_dir(Storage& storage, const std::string& tag_dir, DeepSpeedCheckpoint& out) {
  auto entries = storage.list_dir(tag_dir);
  if (!entries.ok()) return;
  for (const std::string& name : *entries) {
    if (ends_with(name, "model_states.pt")) out.model_files.push_back(name);
    if (ends_with(name, "optim_states.pt")) out.optim_files.push_back(name);
  }
  std::sort(out.model_files.begin(), out.model_files.end());
  std::sort(out.optim_files.begin(), out.optim_files.end());
}

// `latest`, or `latest_universal` (ds_to_universal's tag file) in a directory without `latest`;
// "" when neither is there.
std::string latest_file(Storage& storage, const std::string& dir) {
  for (const char* name : {"latest", "latest_universal"})
    if (storage.file_exists(join(dir, name))) return name;
  return "";
}

}  // namespace

StatusOr<DeepSpeedCheckpoint> find_deepspeed_checkpoint(Storage& storage, const std::string& dir,
                                                        const std::string& tag) {
  DeepSpeedCheckpoint ds;
  if (storage.file_exists(join(dir, "manifest.json"))) return ds;  // ZeRO.cpp's own tag directory
  std::string tag_dir = dir;
  if (!tag.empty()) {
    ds.tag = tag;
    tag_dir = join(dir, tag);
  } else if (const std::string latest = latest_file(storage, dir); !latest.empty()) {
    ZERO_ASSIGN_OR_RETURN(std::string text,
                          read_file(storage, join(dir, latest), kMaxMetadataFileBytes));
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (!text.empty() && text.find('/') == std::string::npos) {
      ds.tag = text;
      tag_dir = join(dir, text);
    }
  }
  if (storage.file_exists(join(tag_dir, "manifest.json"))) return DeepSpeedCheckpoint{};
  scan_tag_dir(storage, tag_dir, ds);
  ds.has_zero_to_fp32 = storage.file_exists(join(dir, "zero_to_fp32.py"));
  if (ds.model_files.empty() && ds.optim_files.empty()) {
    // A save directory whose `latest` is missing: global_step* folders next to zero_to_fp32.py.
    if (!ds.has_zero_to_fp32) return DeepSpeedCheckpoint{};
    ds.tag.clear();
    tag_dir = dir;
  }
  ds.found = true;
  ds.tag_dir = tag_dir;
  return ds;
}

Status refuse_deepspeed_checkpoint(Storage& storage, const std::string& dir,
                                   const std::string& tag) {
  ZERO_ASSIGN_OR_RETURN(DeepSpeedCheckpoint ds, find_deepspeed_checkpoint(storage, dir, tag));
  if (!ds.found) return ok_status();
  std::string what;
  auto list = [&](const std::vector<std::string>& files, const char* kind) {
    if (files.empty()) return;
    if (!what.empty()) what += "; ";
    what += fmt::format("{} {} file{} ({}{})", files.size(), kind, files.size() == 1 ? "" : "s",
                        files.front(), files.size() > 1 ? ", ..." : "");
  };
  list(ds.model_files, "model-state");
  list(ds.optim_files, "ZeRO optimizer-state");
  if (ds.has_zero_to_fp32) what += (what.empty() ? "" : "; ") + std::string("zero_to_fp32.py");
  const std::string script =
      ds.has_zero_to_fp32 ? join(dir, "zero_to_fp32.py") : "zero_to_fp32.py (from DeepSpeed)";
  return invalid_argument(
      "{}: this is a DeepSpeed checkpoint, not a ZeRO.cpp one ({}{}). Import it, Adam moments "
      "and step included (ZeRO stages 1 to 3, Adam / AdamW): `zero ckpt import {} CKPT --model "
      "MODEL_DIR{}`, then resume with --resume_from_checkpoint CKPT (docs/formats/deepspeed.md). "
      "Or convert the weights only with DeepSpeed: `python {} {} OUT_DIR{} "
      "--safe_serialization`, copy the model's config.json (and tokenizer files) into OUT_DIR, "
      "then start from it with --model OUT_DIR (optimizer state and step count are not carried "
      "over)",
      dir, ds.tag.empty() ? "" : "tag " + ds.tag + ": ", what, dir,
      ds.tag.empty() ? "" : " --tag " + ds.tag, script, dir,
      ds.tag.empty() ? "" : " --tag " + ds.tag);
}

}  // namespace zero::checkpoint
