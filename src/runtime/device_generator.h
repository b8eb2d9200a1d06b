// `zero generate --device cuda`: generation with the device's model (the CUDA model) over weights
// held in host memory (the engine's working parameters). The weights are copied to the device once
// (on first use of each unit) and stay there; each new token runs through the device's key/value-
// cached decoder (model::CudaKvDecoder: one token's forward, runtime::generate_cached) or, for
// comparison, one whole forward over the window (runtime::generate_recompute); its logits are
// copied back, and sampling stays on the host with the CPU path's code and RNG. With a weight
// stream (ZeRO-Inference's offload_param, runtime/streamed_params.h) only the embeddings, final
// norm and head stay on the device and the blocks pass through a few device slots, copied once per
// forward whatever the batch; the tokens are the resident path's, bitwise (the same kernels read
// the same bytes). On several GPU ranks (stage-3 inference, WeightStreaming::world) the blocks are
// partitioned instead: each rank holds its 1/N shard of every block on its GPU and the weight
// stream's slots are filled by all-gathering the blocks, one block ahead of the one computing;
// every rank runs the same generation, so the tokens are one rank's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "device/backend.h"
#include "device/stream_collectives.h"
#include "model/cached_decoder.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/param_access.h"
#include "model/transformer.h"
#include "runtime/device_model.h"
#include "runtime/device_staging.h"
#include "runtime/generate.h"
#include "runtime/streamed_params.h"

namespace zero::runtime {

// The blocks streamed instead of resident (plan_weight_stream decides the slots), or partitioned
// over several GPU ranks.
struct WeightStreaming {
  ParamOffload offload = ParamOffload::kNone;    // kNone: every unit resident (or partitioned)
  int slots = 2;                                 // device block slots (>= 2, < the blocks)
  std::string nvme_path;                         // kNvme
  offload::AioConfig aio;                        // kNvme: the swapper's I/O settings
  offload::NvmeFaultHook* fault_hook = nullptr;  // kNvme, tests (StreamedParams::Options)
  // Elements of block unit u in the host weights' dtype (the host ParamAccess does not hold
  // them): the whole unit streamed, this rank's shard partitioned (StreamedParams::FillUnitFn).
  StreamedParams::FillUnitFn fill_block;
  // Stage-3 inference on several ranks: the world's communicator (not owned; outlives the
  // generator). With more than one rank each rank's generator runs on its GPU
  // (rank_cuda_device), holds its shard of every block there (offload kNone; cpu / nvme: in
  // pinned host memory / its own swap file under nvme_path) and gathers the blocks through
  // `slots` slots over a device communicator made from `world` (collective: every rank creates
  // its generator with the same settings, then runs the same generations, with the same prompts
  // and seeds, in the same order). Null or a world of one: one rank.
  Communicator* world = nullptr;
  DistBackend dist = DistBackend::kAuto;  // the gathers' transport (make_device_communicator)
};

class DeviceGenerator {
 public:
  // The model of `device` (make_device_model) on a fresh execution context of GPU 0. `host`: the
  // working parameters in host memory, e.g. Engine::params(); not owned, must outlive this and not
  // change while it is used (the device copies are made once). `cache_dtype`: the key/value
  // cache's on the GPU (bf16 for a 16-bit checkpoint: half the bytes; make_device_decoder).
  // `model_options`: the device model's (zero eval: activation checkpointing, which bounds a
  // forward's memory to one block's activations, the same values).
  // `streaming`: with offload cpu / nvme the blocks come from its fill_block into pinned memory or
  // the swap file (made now), with a world of several ranks this rank's shards into device memory;
  // `host` needs to hold the other units only.
  // Errors: no backend / GPU for `device`, or a model the device cannot run; the weight stream's
  // (pinned or device memory refused, the swap file); the device communicator's (naming the rank);
  // a device other than a GPU with a world of several ranks.
  static StatusOr<std::unique_ptr<DeviceGenerator>> create(
      Device device, const model::ModelConfig& config, model::ParamAccess& host,
      DType cache_dtype = DType::kF32, const WeightStreaming& streaming = {},
      const model::TransformerOptions& model_options = {});
  ~DeviceGenerator();

  // How each new token's logits are computed.
  enum class Decoding {
    kCached,     // runtime::generate_cached over the device's key/value cache
    kRecompute,  // runtime::generate_recompute: a whole forward over the window per token
  };
  // As runtime::generate on the device model. kCached makes (or grows) the cache to
  // generation_cache_capacity on first use. Errors: the cache does not fit on the device; a
  // block's NVMe read or gather failed. On several ranks each step first agrees on every rank's
  // weight stream status (runtime::agree_on_status), so a failed read on one rank ends every
  // rank at that step with an error (the gathered block was wrong on all of them); kRecompute
  // (a comparison baseline) checks the status at its end only.
  StatusOr<bool> generate(std::vector<int32_t>& tokens, const SamplingOptions& options,
                          Decoding decoding = Decoding::kCached,
                          void (*on_token)(int32_t token, void* ctx) = nullptr,
                          void* ctx = nullptr);
  // As runtime::generate_batch on the device model: up to `slots` sequences at once in one
  // key/value cache (made, or remade when it is too small or has other slots, for
  // batch_cache_capacity), one forward per step for all of them. Errors: the cache does not fit;
  // a block's NVMe read failed (no sequence finishes after it: its output is not trusted; on
  // several ranks on any rank, agreed each step as for generate).
  Status generate_batch(std::vector<BatchSequence>& seqs, int64_t slots, BatchObserver& observer);
  model::Model& model() { return *model_; }
  // The device's parameters (resident, or the weight stream), e.g. for forward_loss_sum.
  model::ParamAccess& params();
  // The weight stream (streamed or partitioned blocks), or null when every unit is resident.
  const StreamedParams* streamed() const { return streamed_.get(); }
  // The transport of the partitioned blocks' gathers ("NCCL", "staged through pinned host memory"),
  // empty on one rank.
  std::string gather_transport() const;
  // The weight stream's first error (OK when resident).
  Status status() const { return streamed_ != nullptr ? streamed_->status() : ok_status(); }
  // Device bytes of the weights, the model's buffers of the last forward and the key/value cache.
  int64_t device_bytes() const;

 private:
  class ResidentParams;
  class AgreedStreamSync;
  DeviceGenerator() = default;
  // Makes decoder_ (anew unless the present one has `slots` and at least `capacity` positions).
  Status ensure_decoder(int64_t capacity, int64_t slots);
  // exec_ and model_ on this rank's GPU (the world's rank_cuda_device; GPU 0 without a world).
  Status build_context_and_model(Device device, const model::ModelConfig& config,
                                 const WeightStreaming& streaming,
                                 const model::TransformerOptions& model_options);
  // Several ranks: the device communicator, its stream-ordered gathers and the partitioned
  // weight stream.
  Status build_partitioned(model::ParamAccess& host, const WeightStreaming& streaming);

  // Declaration order is destruction order reversed: the parameter adapters go first (the staging
  // waits for the compute stream, the partitioned stream for its gathers), then the gathers'
  // communicator, then the model, then the streams they ran on.
  std::unique_ptr<device::ExecutionContext> exec_;
  std::unique_ptr<model::Model> model_;
  Communicator* world_ = nullptr;              // several ranks: the job's (not owned)
  std::unique_ptr<Communicator> device_comm_;  // several ranks: the gathers' communicator
  std::unique_ptr<device::StreamCollectives> gathers_;
  std::unique_ptr<model::CachedDecoder> decoder_;  // made on the first cached generate
  int64_t decoder_slots_ = 0;                      // the slots decoder_ was asked for
  DType cache_dtype_ = DType::kF32;
  std::unique_ptr<StagedParams> staged_;
  std::unique_ptr<ResidentParams> resident_;
  std::unique_ptr<StreamedParams> streamed_;  // instead of staged_ / resident_
};

}  // namespace zero::runtime
