// Model weights out of checkpoints and live partitions, in HF layout, one unit in memory at a time.
#include <cstring>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "model/hf_checkpoint.h"

namespace zero::checkpoint {

Status consolidate_to_hf(Storage& storage, const LoadedCheckpoint& ckpt, const std::string& out_dir,
                         uint64_t max_shard_bytes, DType dtype) {
  ZERO_ASSIGN_OR_RETURN(
      model::ModelConfig config,
      model::model_config_from_json(ckpt.model_config(), ckpt.tag_dir() + "/manifest.json"));
  config.generation_config = ckpt.generation_config();
  config.source_dir = ckpt.model_source_dir();
  model::ModelLayout layout(config);
  ZERO_RETURN_IF_ERROR(ckpt.check_compatible(layout));
  // Checksums and completeness first, so a bad shard fails before any output is written.
  ZERO_RETURN_IF_ERROR(ckpt.verify());
  // save_hf_model asks for units in layout order; keeping the last one makes it one read per unit.
  int cached = -1;
  std::vector<float> unit;
  Status read_error;
  auto values = [&](int u) -> const float* {
    if (u != cached) {
      unit.assign(static_cast<size_t>(ckpt.unit_numel(u)), 0.0f);
      unit.shrink_to_fit();
      Status s = ckpt.read_partition(u, 0, ckpt.unit_numel(u), unit.data(), nullptr, nullptr);
      if (!s.ok() && read_error.ok()) read_error = s;
      cached = u;
    }
    return unit.data();
  };
  model::HfSaveOptions options;
  options.dtype = dtype;
  options.max_shard_bytes = max_shard_bytes;
  Status s = model::save_hf_model(storage, out_dir, layout, values, options);
  if (!read_error.ok()) {
    return read_error.with_context("consolidating into " + out_dir + " (output incomplete)");
  }
  return s;
}

Status save_model_weights(Storage& storage, Communicator& comm, const std::string& out_dir,
                          const model::ModelLayout& layout,
                          const sharding::ShardLayout& shard_layout,
                          const std::vector<UnitPartition>& partitions, DType dtype,
                          uint64_t max_shard_bytes) {
  if (static_cast<int>(partitions.size()) != layout.num_units()) {
    return invalid_argument("model save: {} partitions for {} units", partitions.size(),
                            layout.num_units());
  }
  const int rank = comm.rank();
  // Whether unit u must be gathered (its partition is a shard) or is held whole (stage 0). The
  // decision depends only on the layout and the stage, so it is the same on every rank.
  auto whole = [&](int u) {
    return partitions[static_cast<size_t>(u)].numel >= shard_layout.unit(u).padded_numel;
  };
  // save_hf_model asks for units in its own order (file by file, tensors sorted by name), so rank 0
  // announces each unit it needs with a broadcast, then every rank joins that unit's gather; -1
  // ends the loop. Rank 0 keeps only the last gathered unit: peak memory is one unit.
  std::vector<float> buf;
  int cached = -1;
  Status gather_error;
  auto gather = [&](int u) -> Status {
    const UnitPartition& p = partitions[static_cast<size_t>(u)];
    if (whole(u)) return ok_status();
    const int64_t shard = shard_layout.unit(u).shard_numel;
    if (p.numel != shard || p.begin != shard_layout.shard_begin(u, rank)) {
      return invalid_argument("model save: unit {} partition is not this rank's shard", u);
    }
    buf.resize(static_cast<size_t>(shard_layout.unit(u).padded_numel));
    const float* src = p.master;
    std::vector<float> local;
    Status read_status;
    if (src == nullptr && p.read) {
      // Offloaded (NVMe): read this unit's master shard; on an error still join the gather, so
      // the other ranks are not left waiting, and report it afterwards.
      local.assign(static_cast<size_t>(shard), 0.0f);
      read_status = p.read(local.data(), nullptr, nullptr);
      src = local.data();
    }
    Status g = comm.all_gather(src, buf.data(), static_cast<size_t>(shard), DType::kF32);
    return read_status.ok() ? g : read_status;
  };
  auto announce = [&](int32_t u) -> Status {
    float word;
    std::memcpy(&word, &u, sizeof word);
    return comm.broadcast(&word, 1, DType::kF32, 0);  // bytes move verbatim
  };
  Status s;
  if (rank == 0) {
    auto values = [&](int u) -> const float* {
      if (u != cached && !whole(u)) {
        Status g = announce(u);
        if (g.ok()) g = gather(u);
        if (!g.ok() && gather_error.ok()) gather_error = g;
        cached = u;
      }
      return whole(u) ? partitions[static_cast<size_t>(u)].master : buf.data();
    };
    model::HfSaveOptions options;
    options.dtype = dtype;
    options.max_shard_bytes = max_shard_bytes;
    s = model::save_hf_model(storage, out_dir, layout, values, options);
    if (s.ok()) s = gather_error;
    Status end = announce(-1);
    if (s.ok()) s = end;
  } else {
    for (;;) {
      float word = 0;
      ZERO_RETURN_IF_ERROR(comm.broadcast(&word, 1, DType::kF32, 0));
      int32_t u;
      std::memcpy(&u, &word, sizeof u);
      if (u < 0) break;
      if (u >= layout.num_units()) return internal_error("model save: rank 0 announced unit {}", u);
      ZERO_RETURN_IF_ERROR(gather(u));
    }
  }
  // Everyone learns rank 0's outcome (a 1-float broadcast of the status code).
  float code = s.ok() ? 0.0f : 1.0f;
  ZERO_RETURN_IF_ERROR(comm.broadcast(&code, 1, DType::kF32, 0));
  if (!s.ok()) return s;
  if (code != 0.0f) return io_error("model save into {} failed on rank 0", out_dir);
  return ok_status();
}

}  // namespace zero::checkpoint
