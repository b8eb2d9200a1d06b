// Stage-3 inference on CPU ranks: each rank holds 1/N of every unit (its ZeRO-3 shard, fp32) and
// a unit is all-gathered when the model acquires it, so N ranks run a model none of them holds
// whole. Every rank runs the same forwards (the same prompts, the same sampling seed), so the
// gathers pair up and the tokens are those of one rank with the whole weights, bit for bit.
// With an NVMe path (--offload_param nvme on CPU ranks) the blocks' shards live in this rank's own
// swap file instead of host memory and are read one block ahead of the gather (ZeRO-Infinity).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/param_access.h"
#include "model/param_layout.h"
#include "offload/aio_config.h"
#include "offload/nvme_swapper.h"
#include "runtime/unit_init.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {

struct GatheredParamsOptions {
  // Empty: every shard in host memory. Otherwise the blocks' shards are written once into this
  // rank's swap file in a per-run directory under it (removed with the GatheredParams) and read
  // back into one of two staging buffers, the next block's read issued as a block is gathered.
  std::string nvme_path;
  offload::AioConfig aio;                        // the swapper's I/O settings
  offload::NvmeFaultHook* fault_hook = nullptr;  // tests: fails chosen I/O (not owned)
};

class GatheredParams final : public model::ParamAccess {
 public:
  using Options = GatheredParamsOptions;
  // Reads this rank's shard of every unit through `init` (unit-flat [begin, end), padding zero).
  // Errors: `init`'s; with nvme_path, the swap file's creation or writes (naming the path).
  static StatusOr<std::unique_ptr<GatheredParams>> create(const model::ModelLayout& layout,
                                                          Communicator& comm,
                                                          const UnitInitFn& init,
                                                          const Options& options = {});
  // Waits for a read still in flight (its staging buffer is freed with this).
  ~GatheredParams() override;
  GatheredParams(const GatheredParams&) = delete;
  GatheredParams& operator=(const GatheredParams&) = delete;

  // Gathers unit u from every rank (a collective: every rank acquires the same units in the same
  // order) into a buffer held until release(u). Acquires nest (the tied head inside the final
  // unit). A failed gather, or a failed read of this rank's shard from NVMe, ends the job
  // (Communicator::abort_job, after a line on stderr naming the rank and the unit or block): a
  // rank cannot compute on, and its peers would wait in the gather.
  model::ParamView acquire(int u) override;
  void release(int u) override;

  // Bytes of this rank's shards held in host memory (all of them; with NVMe, those of the units
  // that are not blocks).
  int64_t shard_bytes() const;
  // Host bytes of the NVMe staging buffers (0 without NVMe).
  int64_t staging_bytes() const;
  // Bytes of this rank's block shards in its swap file (0 without NVMe).
  int64_t nvme_bytes() const;
  // The per-run directory of the swap file, for tests and the plan line; empty without NVMe.
  std::string swap_dir() const;

 private:
  // A block's shard read back from the swap file (or on its way).
  struct Staging {
    std::vector<float> values;  // the largest block shard
    int layer = -1;             // the block it holds or is being read into it
    std::optional<offload::Ticket> read;
  };
  GatheredParams(const model::ModelLayout& layout, Communicator& comm)
      : shards_layout_(layout, comm.world_size(), comm.rank()), comm_(comm) {}
  Status store_on_nvme(const model::ModelLayout& layout, const Options& options);
  // This rank's shard of unit u: in host memory, or read back from NVMe (waited for here, the
  // next block's read issued).
  const float* shard_of(int u);
  // Issues the read of block `layer`'s shard into `s`.
  void start_read(int layer, Staging& s);
  // Says `what` failed (naming this rank) and ends the job.
  [[noreturn]] void fail(const std::string& what, const Status& s);

  sharding::ShardLayout shards_layout_;
  Communicator& comm_;
  std::vector<std::vector<float>>
      shards_;  // per unit, shard_numel fp32 values (NVMe: blocks empty)
  std::map<int, std::vector<float>> gathered_;  // acquired units, padded_numel each
  std::vector<std::vector<float>> spare_;       // released buffers, reused
  // NVMe: the blocks' shards in the swap file.
  std::vector<int> layer_of_unit_;     // -1 for units that are not blocks
  std::vector<int> block_unit_;        // per block
  std::vector<uint64_t> file_offset_;  // per block
  std::array<Staging, 2> staging_;     // before swapper_: a read in flight lands in one of these
  std::unique_ptr<offload::NvmeSwapper> swapper_;
};

}  // namespace zero::runtime
