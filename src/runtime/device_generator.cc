// DeviceGenerator (device_generator.h).
#include "runtime/device_generator.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/device.h"
#include "runtime/device_model.h"
#include "runtime/token_agreement.h"

namespace zero::runtime {

// The device copy of every unit, made on the unit's first acquire and kept: StagedParams uploads
// on every acquire (training's parameters change each step); generation's never change.
class DeviceGenerator::ResidentParams final : public model::ParamAccess {
 public:
  ResidentParams(StagedParams& staged, int num_units)
      : staged_(staged), views_(static_cast<size_t>(num_units)) {}

  model::ParamView acquire(int u) override {
    std::optional<model::ParamView>& view = views_[static_cast<size_t>(u)];
    if (!view) {
      view = staged_.acquire(u);
      // Waits for the upload (the host unit may be released), not for the kernels reading it.
      staged_.release(u);
    }
    return *view;
  }
  void release(int) override {}

 private:
  StagedParams& staged_;
  std::vector<std::optional<model::ParamView>> views_;
};

// Several ranks: each step's weight stream status agreed before its tokens are (agree_on_status),
// then the caller's sync. A failed shard read on one rank corrupts the block every rank gathered,
// and a rank that stopped alone would leave its peers in the next gather: every rank ends at that
// step with an error instead.
class DeviceGenerator::AgreedStreamSync final : public TokenSync {
 public:
  AgreedStreamSync(Communicator& world, const StreamedParams& stream, TokenSync* inner)
      : world_(world), stream_(stream), inner_(inner) {}
  Status agree(std::span<int32_t> tokens) override {
    ZERO_RETURN_IF_ERROR(agree_on_status(world_, stream_.status()));
    return inner_ != nullptr ? inner_->agree(tokens) : ok_status();
  }
  TokenSync* inner() const { return inner_; }

 private:
  Communicator& world_;
  const StreamedParams& stream_;
  TokenSync* inner_;
};

namespace {

// generate()'s one sequence run as a batch: its tokens to on_token, whether a stop token ended it.
class OneSequenceObserver final : public BatchObserver {
 public:
  OneSequenceObserver(void (*on_token)(int32_t, void*), void* ctx)
      : on_token_(on_token), ctx_(ctx) {}
  bool on_token(int64_t, int32_t token) override {
    if (on_token_ != nullptr) on_token_(token, ctx_);
    return false;
  }
  Status on_finish(int64_t, FinishReason reason) override {
    stopped_ = reason == FinishReason::kEos;
    return ok_status();
  }
  bool stopped() const { return stopped_; }

 private:
  void (*on_token_)(int32_t, void*);
  void* ctx_;
  bool stopped_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceGenerator>> DeviceGenerator::create(
    Device device, const model::ModelConfig& config, model::ParamAccess& host, DType cache_dtype,
    const WeightStreaming& streaming, const model::TransformerOptions& model_options) {
  std::unique_ptr<DeviceGenerator> g(new DeviceGenerator());
  g->cache_dtype_ = cache_dtype;
  ZERO_RETURN_IF_ERROR(g->build_context_and_model(device, config, streaming, model_options));
  const model::ModelLayout& layout = g->model_->layout();
  const int num_units = layout.num_units();
  if (streaming.world != nullptr && streaming.world->world_size() > 1) {
    ZERO_RETURN_IF_ERROR(g->build_partitioned(host, streaming));
    return g;
  }
  if (streaming.offload != ParamOffload::kNone) {
    StreamedParams::Options o;
    o.offload = streaming.offload;
    o.slots = streaming.slots;
    o.nvme_path = streaming.nvme_path;
    o.fault_hook = streaming.fault_hook;
    o.aio = streaming.aio;
    // The blocks in the dtype of the units the host holds.
    o.dtype = host.acquire(layout.embedding_unit()).dtype;
    host.release(layout.embedding_unit());
    ZERO_ASSIGN_OR_RETURN(g->streamed_,
                          StreamedParams::create(layout, host, streaming.fill_block, *g->exec_, o));
    return g;
  }
  g->staged_ = std::make_unique<StagedParams>(host, *g->exec_, num_units);
  g->resident_ = std::make_unique<ResidentParams>(*g->staged_, num_units);
  return g;
}

Status DeviceGenerator::build_context_and_model(Device device, const model::ModelConfig& config,
                                                const WeightStreaming& streaming,
                                                const model::TransformerOptions& model_options) {
  device::StreamOptions so;
  if (streaming.world != nullptr && device == Device::kCuda) {
    so.cuda_device = rank_cuda_device(*streaming.world, probe_cuda().device_count);
  }
  ZERO_ASSIGN_OR_RETURN(exec_, device::ExecutionContext::create(device, so));
  ZERO_ASSIGN_OR_RETURN(model_, make_device_model(config, model_options, *exec_));
  return ok_status();
}

Status DeviceGenerator::build_partitioned(model::ParamAccess& host,
                                          const WeightStreaming& streaming) {
  Communicator& world = *streaming.world;
  world_ = &world;
  if (exec_->device() != Device::kCuda) {
    // The CPU model computes on the calling thread, not on the context's streams the gathers are
    // ordered on; CPU ranks gather through runtime::GatheredParams.
    return invalid_argument("blocks partitioned over {} ranks need GPU ranks, not --device {}",
                            world.world_size(), device_name(exec_->device()));
  }
  const int device_count = probe_cuda().device_count;
  // Collective: every rank makes its communicator here (the same settings, the same build).
  auto comm = make_device_communicator(world, *exec_, streaming.dist, device_count);
  if (!comm.ok()) return comm.status().with_context(fmt::format("rank {}", world.rank()));
  device_comm_ = std::move(*comm);
  ZERO_ASSIGN_OR_RETURN(gathers_, device::make_stream_collectives(*device_comm_, *exec_));
  const model::ModelLayout& layout = model_->layout();
  StreamedParams::Options o;
  // kNone: this rank's shards on its GPU; cpu / nvme: in pinned host memory / its own swap file
  // (ZeRO-Infinity), copied up before each gather.
  o.offload = streaming.offload;
  o.nvme_path = streaming.nvme_path;
  o.aio = streaming.aio;
  o.fault_hook = streaming.fault_hook;
  o.slots = streaming.slots;
  o.gather = gathers_.get();
  // The blocks in the dtype of the units the host holds.
  o.dtype = host.acquire(layout.embedding_unit()).dtype;
  host.release(layout.embedding_unit());
  ZERO_ASSIGN_OR_RETURN(streamed_,
                        StreamedParams::create(layout, host, streaming.fill_block, *exec_, o));
  return ok_status();
}

std::string DeviceGenerator::gather_transport() const {
  if (device_comm_ == nullptr) return "";
  return device_comm_->backend_name() == "nccl" ? "NCCL" : "staged through pinned host memory";
}

model::ParamAccess& DeviceGenerator::params() {
  if (streamed_ != nullptr) return *streamed_;
  return *resident_;
}

DeviceGenerator::~DeviceGenerator() = default;

StatusOr<bool> DeviceGenerator::generate(std::vector<int32_t>& tokens,
                                         const SamplingOptions& options, Decoding decoding,
                                         void (*on_token)(int32_t, void*), void* ctx) {
  if (world_ != nullptr && decoding == Decoding::kCached) {
    // Several ranks: a batch of one, whose steps agree on the ranks' weight stream status
    // (generate_batch); the same reads and sampling as generate_cached.
    std::vector<BatchSequence> one(1);
    one[0].tokens = std::move(tokens);
    one[0].options = options;
    OneSequenceObserver observer(on_token, ctx);
    const Status s = generate_batch(one, 1, observer);
    tokens = std::move(one[0].tokens);
    ZERO_RETURN_IF_ERROR(s);
    return observer.stopped();
  }
  if (decoding == Decoding::kRecompute) {
    const bool stopped = generate_recompute(*model_, params(), tokens, options, on_token, ctx);
    ZERO_RETURN_IF_ERROR(status());
    return stopped;
  }
  const model::ModelConfig& c = model_->layout().config();
  const int64_t capacity =
      generation_cache_capacity(c, static_cast<int64_t>(tokens.size()), options);
  ZERO_RETURN_IF_ERROR(ensure_decoder(capacity, 1));
  const bool stopped = generate_cached(*decoder_, c, params(), tokens, options, on_token, ctx);
  ZERO_RETURN_IF_ERROR(status());
  return stopped;
}

Status DeviceGenerator::generate_batch(std::vector<BatchSequence>& seqs, int64_t slots,
                                       BatchObserver& observer) {
  const model::ModelConfig& c = model_->layout().config();
  slots = std::clamp<int64_t>(slots, 1, std::max<int64_t>(1, static_cast<int64_t>(seqs.size())));
  ZERO_RETURN_IF_ERROR(ensure_decoder(batch_cache_capacity(c, seqs), slots));
  if (streamed_ == nullptr) return generate_batch_cached(*decoder_, c, params(), seqs, observer);
  if (world_ != nullptr) {
    // The status agreed each step (the batch agrees through its first sequence's sync): an
    // observer checking this rank's alone could end it a step before its peers.
    AgreedStreamSync agreed(*world_, *streamed_, seqs.empty() ? nullptr : seqs[0].options.sync);
    for (BatchSequence& seq : seqs) seq.options.sync = &agreed;
    Status s = generate_batch_cached(*decoder_, c, params(), seqs, observer);
    for (BatchSequence& seq : seqs) seq.options.sync = agreed.inner();
    ZERO_RETURN_IF_ERROR(s);
    return status();
  }
  StreamCheckedObserver checked(streamed_.get(), observer);
  ZERO_RETURN_IF_ERROR(generate_batch_cached(*decoder_, c, params(), seqs, checked));
  return status();
}

Status DeviceGenerator::ensure_decoder(int64_t capacity, int64_t slots) {
  if (decoder_ != nullptr && decoder_->capacity() >= capacity && decoder_slots_ == slots) {
    return ok_status();
  }
  decoder_.reset();  // the old cache's memory first
  ZERO_ASSIGN_OR_RETURN(decoder_,
                        make_device_decoder(*model_, capacity, *exec_, slots, cache_dtype_));
  decoder_slots_ = slots;
  return ok_status();
}

int64_t DeviceGenerator::device_bytes() const {
  return (streamed_ != nullptr ? streamed_->device_bytes() : staged_->device_bytes()) +
         model_->buffer_bytes() + (decoder_ != nullptr ? decoder_->device_bytes() : 0);
}

}  // namespace zero::runtime
