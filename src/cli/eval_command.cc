// `zero eval`: the eval loss and perplexity of a saved model (HF directory, preset, or a sharded
// checkpoint: OUTPUT_DIR or one tag directory, read from its fp32 master weights) on a validation
// token file, the same numbers `zero train --validation_file` logs (runtime/evaluation.h). Prints
// one JSON line: {"eval_loss": .., "eval_ppl": .., "eval_tokens": ..}.
// `--device cuda` runs the forwards on the GPU's model; `--offload_param cpu|nvme` streams the
// blocks through a few GPU slots (ZeRO-Inference, cli/weight_stream_flags.h), each forward over
// --per_device_eval_batch_size samples reading every block once; the loss is the resident one's.
// Under a launcher with several ranks it is stage-3 inference, data-parallel: each rank holds a
// 1/N shard of every unit (CPU ranks: runtime/gathered_params.h) or block (GPU ranks:
// cli::place_partitioned_weights), evaluates its own samples of each round as zero train's
// evaluation does, and the loss sums are all-reduced; rank 0 alone prints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/weight_stream_flags.h"
#include "cli/world.h"
#include "comm/self_communicator.h"
#include "core/device.h"
#include "core/storage.h"
#include "data/token_dataset.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "runtime/evaluation.h"
#include "runtime/model_source.h"
#include "runtime/model_weights.h"
#include "runtime/train_data.h"

namespace zero::cli {
namespace {

struct EvalArgs {
  std::string model;
  std::string validation_file;
  std::string tag;
  std::optional<std::string> data_dtype;
  int64_t block_size = 0;
  int64_t per_device_eval_batch_size = 8;
  std::string device = "cpu";
  WeightStreamFlags stream;
};

int report(const Status& s, int code) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return code;
}

bool is_checkpoint(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(dir) / "latest", ec) ||
         std::filesystem::exists(std::filesystem::path(dir) / "manifest.json", ec);
}

// The ranks of the job: a world of one without a launcher (no MPI start-up), else MPI's. Several
// ranks shard the weights; the weight stream flags they take are check_ranks_stream_flags'.
StatusOr<World> join_world(const WeightStreamSettings& stream, Device device) {
  World world;
  if (launched_as_rank()) {
    ZERO_ASSIGN_OR_RETURN(world, make_world());
  } else {
    world.comm = std::make_unique<SelfCommunicator>();
  }
  ZERO_RETURN_IF_ERROR(
      check_ranks_stream_flags(stream, device, world.comm->world_size(), "zero eval"));
  if (world.comm->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
    return internal_error("cannot silence stdout");
  }
  return world;
}

int run_eval(const EvalArgs& a) {
  const StatusOr<Device> device = parse_device_flag(a.device);
  if (!device.ok()) return report(device.status(), 2);
  auto stream = parse_weight_stream_flags(a.stream, *device);
  if (!stream.ok()) return report(stream.status(), 2);
  auto world = join_world(*stream, *device);
  if (!world.ok()) return report(world.status(), 2);
  Communicator& comm = *world->comm;
  const bool several = comm.world_size() > 1;
  // A rank that fails alone ends the job: its peers would wait in the next gather or reduction.
  auto fail = [&](const Status& s, int code) -> int {
    if (several) {
      std::fprintf(stderr, "[rank %d] error: %s\n", comm.rank(), s.to_string().c_str());
      comm.abort_job(code);
    }
    return report(s, code);
  };
  // The model: its config and a reader of any range of any unit.
  model::ModelConfig mc;
  runtime::UnitInitFn init;
  std::unique_ptr<runtime::ModelSource> source;
  std::unique_ptr<checkpoint::LoadedCheckpoint> ck;
  if (is_checkpoint(a.model)) {
    auto opened = checkpoint::open_checkpoint(*default_storage(), a.model, a.tag);
    if (!opened.ok()) return report(opened.status().with_context("--model " + a.model), 2);
    ck = std::move(*opened);
    auto config = model::model_config_from_json(ck->model_config(), ck->tag_dir());
    if (!config.ok()) return report(config.status(), 2);
    mc = *config;
    Status s = ck->check_compatible(model::ModelLayout(mc));
    if (!s.ok()) return report(s.with_context(ck->tag_dir()), 2);
    const checkpoint::LoadedCheckpoint* c = ck.get();
    init = [c](int u, int64_t begin, int64_t end, float* dst) {
      return c->read_partition(u, begin, end, dst, nullptr, nullptr);
    };
  } else {
    auto opened = runtime::ModelSource::open(a.model, 42);
    if (!opened.ok()) return report(opened.status().with_context("--model " + a.model), 2);
    source = std::move(*opened);
    mc = source->config();
    init = source->init_fn();
  }

  // fp32 weights, or with the ZeRO-Inference flags the checkpoint's dtype (a sharded checkpoint's
  // master weights are fp32). A budget too small for the weights alone is refused before the
  // device is probed.
  const DType dtype = stream->given && source != nullptr ? source->stored_dtype() : DType::kF32;
  if (auto early = plan_weights(*stream, *device, mc, dtype, 0, comm.world_size(), comm.rank());
      !early.ok()) {
    return report(early.status(), 2);
  }
  if (Status usable = check_device_usable(*device); !usable.ok()) return report(usable, 2);

  // Opened as zero train opens it: prepared data (mask, tokenizer check) or a token file, never
  // text read as ids.
  const int64_t block =
      a.block_size > 0 ? a.block_size : std::min<int64_t>(1024, mc.max_position_embeddings);
  auto data = runtime::open_train_data(
      *default_storage(),
      {a.validation_file, a.data_dtype, a.model, block, mc.vocab_size, "--validation_file"});
  if (!data.ok()) return report(data.status(), 2);

  // Forward only, over the weights alone (one copy, or one shard per rank; no training state),
  // reduced as zero train's evaluation reduces it. On a GPU the model keeps one block's
  // activations (activation checkpointing: the same forward values, a bounded slab).
  model::TransformerOptions model_options;
  model_options.activation_checkpointing = true;
  PlacedWeights placed;
  if (several && *device != Device::kCpu) {
    // The checkpoint's dtype on the GPUs (a sharded checkpoint's master weights are fp32); the
    // budgets are this rank's.
    const DType gpu_dtype = source != nullptr ? source->stored_dtype() : DType::kF32;
    const int64_t other = runtime::forward_scratch_bytes(mc, a.per_device_eval_batch_size,
                                                         data->block_size(), gpu_dtype);
    auto plan =
        plan_weights(*stream, *device, mc, gpu_dtype, other, comm.world_size(), comm.rank());
    if (!plan.ok()) return report(plan.status(), 2);
    if (stream->given && comm.rank() == 0) {
      std::fprintf(stderr, "zero eval: %s; %lld bytes of host memory for the weights\n",
                   plan->describe(*device).c_str(),
                   static_cast<long long>(planned_host_bytes(*plan, *device)));
    }
    auto p = place_partitioned_weights(comm, *plan, *stream, mc, gpu_dtype, init, DType::kF32,
                                       model_options);
    if (!p.ok()) return fail(p.status().with_context("--device " + a.device), 1);
    placed = std::move(*p);
  } else if (several) {
    auto p = place_cpu_shards(comm, *stream, mc, init);
    if (!p.ok()) return fail(p.status(), 1);
    placed = std::move(*p);
  } else {
    const int64_t B = a.per_device_eval_batch_size, T = data->block_size();
    const int64_t other =
        *device == Device::kCpu ? 0 : runtime::forward_scratch_bytes(mc, B, T, dtype);
    auto plan = plan_weights(*stream, *device, mc, dtype, other);
    if (!plan.ok()) return report(plan.status(), 2);
    if (stream->given) {
      std::fprintf(stderr, "zero eval: %s; %lld bytes of host memory for the weights\n",
                   plan->describe(*device).c_str(),
                   static_cast<long long>(planned_host_bytes(*plan, *device)));
    }
    auto p = place_weights(*plan, *stream, *device, mc, dtype, init, DType::kF32, model_options);
    if (!p.ok()) return report(p.status(), 1);
    placed = std::move(*p);
  }
  if (several && comm.rank() == 0) {
    const std::string held = placed.gathered != nullptr
                                 ? "unit (" + describe_cpu_shards(*placed.gathered) + ")"
                                 : "block on its GPU";
    std::fprintf(stderr,
                 "zero eval: %d ranks, each holding a 1/%d shard of every %s and evaluating its "
                 "own samples of each round (ZeRO stage-3 inference)\n",
                 comm.world_size(), comm.world_size(), held.c_str());
  }
  std::unique_ptr<model::Transformer> cpu_model;
  if (placed.on_device == nullptr) cpu_model = std::make_unique<model::Transformer>(mc);
  model::Model& forward_model =
      placed.on_device != nullptr ? placed.on_device->model() : *cpu_model;
  model::ParamAccess& params =
      placed.on_device != nullptr ? placed.on_device->params() : placed.cpu_params();
  // A failed block read: the loss is not trusted.
  auto r = runtime::evaluate_weights(*data, a.per_device_eval_batch_size, comm, forward_model,
                                     params, [&placed] { return placed.status(); });
  if (!r.ok()) return fail(r.status(), 1);
  nlohmann::json j = {{"eval_loss", r->loss}, {"eval_tokens", r->tokens}};
  j["eval_ppl"] = std::isfinite(r->perplexity) ? nlohmann::json(r->perplexity) : nlohmann::json();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* e = app.add_subcommand(
      "eval",
      "eval loss and perplexity of a model on a validation token file (the numbers zero train "
      "--validation_file logs; under a launcher with several ranks the weights are sharded over "
      "them and each evaluates its own samples)");
  e->add_option("--model", a->model,
                "HF model directory, preset:NAME, or a checkpoint (OUTPUT_DIR or a tag directory)")
      ->required();
  e->add_option("--validation_file,--validation-file", a->validation_file,
                "token file, as zero train's --train_file")
      ->required();
  e->add_option("--tag", a->tag, "checkpoint tag (default: `latest`)");
  e->add_option("--data_dtype,--data-dtype", a->data_dtype, "uint8 | uint16 | uint32");
  e->add_option("--block_size,--block-size", a->block_size,
                "tokens per sample (default: the model's context, at most 1024)")
      ->check(int_at_least(1));
  e->add_option("--per_device_eval_batch_size,--per-device-eval-batch-size",
                a->per_device_eval_batch_size, "samples per forward (default 8)")
      ->check(int_at_least(1));
  e->add_option("--device", a->device,
                "cpu (default) | cuda: the forwards on the GPU (with --offload_param, the blocks "
                "streamed through it)");
  add_weight_stream_flags(e, &a->stream);
  e->callback([a, &exit_code] { exit_code = run_eval(*a); });
}

}  // namespace zero::cli
