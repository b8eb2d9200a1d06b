// Memory honesty: before the engine allocates anything, what one rank will need in host memory and
// in NVMe swap space (the arithmetic of `zero estimate` applied to this layout, plus our buffers
// and the activations of the planned micro-batch), checked against what the machine has. A
// shortfall is an error naming the amount, the resource and the setting to change — never an
// unexplained OOM kill halfway through loading.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/status.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {

struct EngineOptions;

// One rank's needs, in bytes, by class.
struct MemoryNeeds {
  int64_t parameters = 0;       // working parameters: full units (stages 0–2), shards + gathered
                                // units + NVMe staging (stage 3)
  int64_t gradients = 0;        // fp32 accumulators and in-flight unit buffers
  int64_t master_weights = 0;   // fp32 master weights kept in RAM (or their staging)
  int64_t optimizer_state = 0;  // Adam moments kept in RAM (or their staging)
  int64_t activations = 0;      // the planned micro-batch (0 when not known)
  int64_t step_batches = 0;     // one step's micro-batches of tokens and targets, held at once
                                // (INT64_MAX when the count overflows)
  // The sum, saturating at INT64_MAX (absurd batch settings must read as "too much", not wrap).
  int64_t ram() const {
    return checked_sum(
               {parameters, gradients, master_weights, optimizer_state, activations, step_batches})
        .value_or(INT64_MAX);
  }
  // Swap files, per directory (the optimizer's and the parameters' may differ).
  struct Swap {
    std::string key;   // "zero_optimization.offload_optimizer.nvme_path" / "...offload_param..."
    std::string path;  // the directory
    int64_t bytes = 0;
  };
  std::vector<Swap> swap;
};

// What the machine offers (a seam: tests inject small numbers).
struct HostResources {
  int64_t available_ram_bytes = 0;  // MemAvailable (/proc/meminfo) or the cgroup limit if lower
  // Free bytes of the file system holding `path` (or its nearest existing parent).
  std::function<StatusOr<int64_t>(const std::string& path)> free_disk_bytes;
};
HostResources probe_host_resources();

// `micro_batch` and `seq_len` (0: unknown) size the activations.
MemoryNeeds plan_memory(const EngineOptions& options, const sharding::ShardLayout& layout,
                        int64_t micro_batch, int64_t seq_len);

// RESOURCE_EXHAUSTED when `ranks_on_node` ranks each needing `needs` do not fit `have`: names the
// shortfall, the biggest consumers and the setting that would reduce them.
Status check_memory(const MemoryNeeds& needs, int ranks_on_node, const HostResources& have);

}  // namespace zero::runtime
