// Sharded training checkpoints (docs/formats/checkpoint.md, DESIGN.md §6):
//
//   OUT/latest                          plain text: the tag of the newest complete checkpoint
//   OUT/<tag>/manifest.json             format version, world size, stage, dtypes, ShardLayout,
//                                       training state, model config, one xxHash per file
//   OUT/<tag>/rank_<r>.safetensors      rank r's fp32 master / exp_avg / exp_avg_sq shard
//
// Rank r's file always holds the real (non-padding) elements of ShardLayout shard r of every unit,
// whatever the stage: at stage 0 (every rank holds the whole padded unit) each rank writes only its
// shard slice, so every rank writes in parallel and the files are the same as at stages 1–3. A
// reader at any world size / stage fills its partition with offset reads of the overlapping files.
//
// The API works over plain data (no Engine): the trainer passes pointers to its partitions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/storage.h"
#include "model/param_layout.h"
#include "sharding/shard_layout.h"

namespace zero::checkpoint {

// 2: the manifest carries its own xxh3 (manifest_xxh3) and the run's optimizer. Version 1
// manifests are still read (without a manifest checksum to check).
inline constexpr int kFormatVersion = 2;
inline constexpr int kOldestReadableFormatVersion = 1;
inline constexpr const char* kFormatName = "zero.cpp-checkpoint";

// `checkpoint.tag_validation`: all ranks must save under the same tag.
enum class TagValidation { kIgnore, kWarn, kFail };
// "Ignore" / "Warn" / "Fail" (case-insensitive, as DeepSpeed).
StatusOr<TagValidation> parse_tag_validation(const std::string& text);

// One unit's partition on this rank: elements [begin, begin + numel) of the padded unit-flat
// buffer (the whole padded unit at stage 0, the rank's shard at stages 1–3).
struct UnitPartition {
  int64_t begin = 0;
  int64_t numel = 0;
  const float* master = nullptr;
  const float* exp_avg = nullptr;
  const float* exp_avg_sq = nullptr;
  // State that is not in memory (NVMe offload): when the pointers are null, the writer calls
  // read(dst_master, dst_exp_avg, dst_exp_avg_sq) with one non-null destination of numel floats
  // at a time, so a save holds one tensor of one unit at once, never the rank's whole state.
  std::function<Status(float* master, float* exp_avg, float* exp_avg_sq)> read;
};

struct SaveRequest {
  std::string out_dir;  // OUT: holds `latest` and the tag directories
  std::string tag;      // e.g. "global_step20" (default_tag)
  const model::ModelLayout* layout = nullptr;
  const sharding::ShardLayout* shard_layout = nullptr;  // world size == comm's
  int stage = 0;
  DType model_dtype = DType::kF32;
  // The optimizer whose moments the files hold (manifest "optimizer"; a resume under another
  // optimizer or other betas is refused, see LoadedCheckpoint::check_run).
  std::string optimizer_type = "adamw";  // lower-cased DeepSpeed name
  double beta1 = 0.9, beta2 = 0.999;
  std::vector<UnitPartition> partitions;  // one per unit
  // Training state stored verbatim in the manifest. Keys this layer reads: global_step (for
  // pruning order and info). The rest is the trainer's: optimizer_updates, schedule,
  // loss_scaler, sampler, rng, ...
  nlohmann::json state = nlohmann::json::object();
  nlohmann::json effective_config = nlohmann::json::object();  // the ds_config as resolved
  int save_total_limit = 0;  // > 0: keep only the newest K tags (pruned after publishing)
  TagValidation tag_validation = TagValidation::kWarn;
  // Each node has its own file system: the first rank of every node (local_rank 0) prepares,
  // publishes and prunes on its node; rank files stay where their rank runs.
  bool node_local_storage = false;
};

// "global_step<N>".
std::string default_tag(int64_t global_step);

// Outcome of a collective save (identical on every rank).
struct SaveResult {
  bool replaced = false;  // the tag existed (an earlier run's): this save replaced it atomically
  std::string tag_dir;
};

// Collective: every rank of `comm` calls it with the same out_dir / tag. Protocol:
//   1. tag validation (all-gather of tag hashes);
//   2. the leader creates OUT/<tag>.tmp/ (whether or not OUT/<tag> exists);
//   3. every rank writes rank_<r>.safetensors there, fsyncs it and hashes it (xxh3-64);
//   4. (size, hash, status) records are all-gathered; on any failure nobody publishes;
//   5. the leader writes manifest.json, fsyncs, renames <tag>.tmp -> <tag>, fsyncs OUT, rewrites
//      `latest` atomically, then prunes to save_total_limit. An existing OUT/<tag> (an earlier
//      run's, e.g. after resuming from an older tag) is replaced: the newer run owns the tag.
//      The two directories are swapped in one renameat2(RENAME_EXCHANGE), so OUT/<tag> always
//      names a complete checkpoint; the old one is then removed;
//   6. the leader's outcome is agreed on by all ranks.
// A crash at any point leaves the previous checkpoint and `latest` untouched.
StatusOr<SaveResult> save_checkpoint(Storage& storage, Communicator& comm,
                                     const SaveRequest& request);

// What a resumed run is, compared with what the checkpoint was saved under (check_run).
struct RunIdentity {
  std::string optimizer_type;  // lower-cased DeepSpeed name ("adamw", "adam", "lamb")
  double beta1 = 0.9, beta2 = 0.999;
  DType model_dtype = DType::kF32;
};

// One rank file of a checkpoint as the manifest lists it.
struct RankFile {
  std::string name;  // "rank_0.safetensors"
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  // Per unit: the real elements this file holds, unit-flat [begin, begin + numel).
  std::vector<std::pair<int64_t, int64_t>> ranges;
};

// An opened checkpoint. Rank files are opened (and checksummed) on first use. Thread-safe.
class LoadedCheckpoint {
 public:
  const std::string& tag_dir() const { return tag_dir_; }
  const std::string& tag() const { return tag_; }
  const nlohmann::json& manifest() const { return manifest_; }
  int world_size() const { return world_size_; }
  int stage() const { return stage_; }
  const nlohmann::json& state() const { return manifest_["state"]; }
  const nlohmann::json& model_config() const { return manifest_["model_config"]; }
  // The model's generation_config.json as saved (null when the model had none).
  nlohmann::json generation_config() const {
    return manifest_.value("generation_config", nlohmann::json());
  }
  // A multimodal model's HF directory, whose vision tower a save copies through ("" otherwise).
  std::string model_source_dir() const { return manifest_.value("model_source_dir", ""); }
  const std::vector<RankFile>& files() const { return files_; }
  // Unit names and real numels as saved.
  int num_units() const { return static_cast<int>(unit_numel_.size()); }
  int64_t unit_numel(int u) const { return unit_numel_[static_cast<size_t>(u)]; }
  const std::string& unit_name(int u) const { return unit_names_[static_cast<size_t>(u)]; }

  // Ok if `layout` has the same units (names, sizes) and parameters (names, offsets, shapes) as
  // the checkpoint; otherwise INVALID_ARGUMENT saying what differs.
  Status check_compatible(const model::ModelLayout& layout) const;

  // Ok if the checkpoint's optimizer type, betas and model dtype equal the run's; otherwise
  // INVALID_ARGUMENT naming both values (moments of one optimizer are not another's state).
  // Version-1 manifests name the optimizer only in effective_config (checked when present).
  Status check_run(const RunIdentity& run) const;

  // Fills elements [begin, end) of unit u's padded flat buffer (zeros past the real elements)
  // from whichever rank files overlap, reading only those byte ranges. Null outputs are skipped.
  Status read_partition(int unit, int64_t begin, int64_t end, float* master, float* exp_avg,
                        float* exp_avg_sq) const;

  // Reads every file fully and compares sizes and checksums with the manifest.
  Status verify() const;

 private:
  friend StatusOr<std::unique_ptr<LoadedCheckpoint>> open_checkpoint(Storage&, const std::string&,
                                                                     const std::string&, bool);
  LoadedCheckpoint(Storage& storage) : storage_(&storage) {}
  StatusOr<const SafetensorsReader*> reader(size_t file) const;
  Status check_coverage() const;

  Storage* storage_;
  std::string tag_dir_;
  std::string tag_;
  nlohmann::json manifest_;
  int world_size_ = 0;
  int stage_ = 0;
  bool verify_on_open_ = true;
  std::vector<RankFile> files_;
  std::vector<int64_t> unit_numel_;
  std::vector<std::string> unit_names_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<SafetensorsReader>> readers_;  // guarded by mu_
};

// Opens `dir`: a directory holding `latest` (its tag, or `tag` when given) or a tag directory
// holding manifest.json. Parses and validates the manifest. With `verify_checksums`, each rank
// file is hashed in full the first time it is read (cost: one extra sequential read of it).
StatusOr<std::unique_ptr<LoadedCheckpoint>> open_checkpoint(Storage& storage,
                                                            const std::string& dir,
                                                            const std::string& tag = "",
                                                            bool verify_checksums = true);

// xxh3-64 of a whole file, streamed in 1 MiB reads.
StatusOr<uint64_t> hash_file(Storage& storage, const std::string& path);

// Writes the consolidated fp32 model in HF layout (config.json + safetensors, HF names, GPT-2
// Conv1D transposed, a tied head once under the embedding's name), one unit in memory at a time.
Status consolidate_to_hf(Storage& storage, const LoadedCheckpoint& ckpt, const std::string& out_dir,
                         uint64_t max_shard_bytes, DType dtype = DType::kF32);

// Collective 16-bit (or any dtype) model save from live partitions, gathered unit by unit (peak
// memory: one unit): stage3_gather_16bit_weights_on_model_save semantics. Rank 0 writes `out_dir`.
Status save_model_weights(Storage& storage, Communicator& comm, const std::string& out_dir,
                          const model::ModelLayout& layout,
                          const sharding::ShardLayout& shard_layout,
                          const std::vector<UnitPartition>& partitions, DType dtype,
                          uint64_t max_shard_bytes = 5ull << 30);

}  // namespace zero::checkpoint
