// Parsing and validation of the ds_config `aio` block.
#include "offload/aio_config.h"

#include <string>

#include <spdlog/spdlog.h>

namespace zero::offload {
namespace {

constexpr uint64_t kMaxBlockSizeBytes = uint64_t{1}
                                        << 30;  // io_uring caps one fixed buffer at 1 GiB

// Reads an integer key into `out` if present. JSON numbers like 1e6 arrive as doubles: accept them
// when integral, as DeepSpeed (Python int()) does.
Status read_int(const nlohmann::json& block, const char* key, int64_t* out) {
  auto it = block.find(key);
  if (it == block.end() || it->is_null()) return ok_status();
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return ok_status();
  }
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (v == static_cast<double>(static_cast<int64_t>(v))) {
      *out = static_cast<int64_t>(v);
      return ok_status();
    }
  }
  return invalid_argument("aio.{} must be an integer, got {}", key, it->dump());
}

Status read_bool(const nlohmann::json& block, const char* key, bool* out) {
  auto it = block.find(key);
  if (it == block.end() || it->is_null()) return ok_status();
  if (!it->is_boolean())
    return invalid_argument("aio.{} must be true or false, got {}", key, it->dump());
  *out = it->get<bool>();
  return ok_status();
}

}  // namespace

Status validate_aio_config(const AioConfig& config) {
  if (config.use_gds) {
    return unimplemented(
        "aio.use_gds: cuFile/GDS is not available in this build; set use_gds to false (NVMe I/O "
        "then "
        "goes through pinned host buffers)");
  }
  if (config.block_size_bytes == 0 || config.block_size_bytes % kDirectIoAlignBytes != 0 ||
      config.block_size_bytes > kMaxBlockSizeBytes) {
    return invalid_argument(
        "aio.block_size must be a positive multiple of {} bytes (O_DIRECT alignment) and at most "
        "{} "
        "bytes, got {}",
        kDirectIoAlignBytes, kMaxBlockSizeBytes, config.block_size_bytes);
  }
  if (config.queue_depth < 1 || config.queue_depth > 4096) {
    return invalid_argument("aio.queue_depth must be in [1, 4096], got {}", config.queue_depth);
  }
  if (config.intra_op_parallelism < 1 || config.intra_op_parallelism > 256) {
    return invalid_argument("aio.intra_op_parallelism must be in [1, 256], got {}",
                            config.intra_op_parallelism);
  }
  return ok_status();
}

StatusOr<AioConfig> parse_aio_config(const nlohmann::json& aio_block) {
  AioConfig config;
  if (aio_block.is_null()) return config;
  if (!aio_block.is_object()) {
    return invalid_argument("aio must be an object, got {}", aio_block.dump());
  }
  for (const auto& [key, value] : aio_block.items()) {
    if (key == "thread_count") {
      // DeepSpeed renamed it and now ignores it silently (PR #7056); we ignore it loudly.
      spdlog::warn(
          "aio.thread_count is deprecated and ignored (renamed intra_op_parallelism); use "
          "\"intra_op_parallelism\": {}",
          value.dump());
      continue;
    }
    if (key != "block_size" && key != "queue_depth" && key != "intra_op_parallelism" &&
        key != "single_submit" && key != "overlap_events" && key != "use_gds") {
      return invalid_argument(
          "unknown key aio.{} (known: block_size, queue_depth, intra_op_parallelism, "
          "single_submit, overlap_events, use_gds)",
          key);
    }
  }
  int64_t block_size = static_cast<int64_t>(config.block_size_bytes);
  int64_t queue_depth = config.queue_depth;
  int64_t parallelism = config.intra_op_parallelism;
  ZERO_RETURN_IF_ERROR(read_int(aio_block, "block_size", &block_size));
  ZERO_RETURN_IF_ERROR(read_int(aio_block, "queue_depth", &queue_depth));
  ZERO_RETURN_IF_ERROR(read_int(aio_block, "intra_op_parallelism", &parallelism));
  ZERO_RETURN_IF_ERROR(read_bool(aio_block, "single_submit", &config.single_submit));
  ZERO_RETURN_IF_ERROR(read_bool(aio_block, "overlap_events", &config.overlap_events));
  ZERO_RETURN_IF_ERROR(read_bool(aio_block, "use_gds", &config.use_gds));
  if (block_size <= 0)
    return invalid_argument("aio.block_size must be positive, got {}", block_size);
  if (queue_depth < 1 || queue_depth > 4096 || parallelism < 1 || parallelism > 256) {
    // Narrowing below would hide the value; report it before converting.
    if (queue_depth < 1 || queue_depth > 4096) {
      return invalid_argument("aio.queue_depth must be in [1, 4096], got {}", queue_depth);
    }
    return invalid_argument("aio.intra_op_parallelism must be in [1, 256], got {}", parallelism);
  }
  config.block_size_bytes = static_cast<uint64_t>(block_size);
  config.queue_depth = static_cast<int>(queue_depth);
  config.intra_op_parallelism = static_cast<int>(parallelism);
  ZERO_RETURN_IF_ERROR(validate_aio_config(config));
  return config;
}

nlohmann::json aio_config_to_json(const AioConfig& config) {
  return nlohmann::json{{"block_size", config.block_size_bytes},
                        {"queue_depth", config.queue_depth},
                        {"intra_op_parallelism", config.intra_op_parallelism},
                        {"single_submit", config.single_submit},
                        {"overlap_events", config.overlap_events},
                        {"use_gds", config.use_gds}};
}

}  // namespace zero::offload
