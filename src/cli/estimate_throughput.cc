// `zero estimate --throughput`: flags → sharding::ThroughputInputs / Topology, one row per stage.
#include "cli/estimate_throughput.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/flag_checks.h"
#include "core/storage.h"
#include "runtime/mfu.h"
#include "sharding/link_sweep.h"
#include "sharding/throughput_model.h"

namespace zero::cli {
namespace {

StatusOr<int> dtype_bytes_named(const std::string& flag, const std::string& name) {
  if (name == "bf16" || name == "fp16") return 2;
  if (name == "fp32") return 4;
  return invalid_argument("{}: expected bf16, fp16 or fp32, got \"{}\"", flag, name);
}

// What the flags say about one level's link: --interconnect or --network and their options.
struct LinkFlags {
  const std::string& flag;  // "--interconnect" or "--network"
  const std::string& name;
  const CLI::Option* gbs_option;
  double gbs;
  const CLI::Option* latency_option;
  double latency_us;
  const CLI::Option* sweep_option;
  const std::string& sweep_path;
};

// The link's cost per collective kind fitted to a comm_sweep_bench file (link_sweep.h); kinds the
// file lacks keep the link's pair, which a custom link then must have.
StatusOr<sharding::Link> apply_sweep(const LinkFlags& lf, sharding::Link link) {
  const std::string flag = lf.flag + "_sweep";
  // A sweep file is a few hundred lines; the limit only stops a wrong path (a dataset) early.
  StatusOr<std::string> text = read_file(*default_storage(), lf.sweep_path, uint64_t{16} << 20);
  if (!text.ok()) return invalid_argument("{}: {}", flag, text.status().message());
  StatusOr<std::vector<sharding::SweepSample>> samples =
      sharding::parse_sweep(*text, lf.sweep_path);
  if (!samples.ok()) return invalid_argument("{}: {}", flag, samples.status().message());
  StatusOr<sharding::Link> fitted = sharding::fit_link_to_sweep(link, *samples, lf.sweep_path);
  if (!fitted.ok()) return invalid_argument("{}: {}", flag, fitted.status().message());
  link = *std::move(fitted);
  if (link.bandwidth_bytes_per_s > 0) return link;
  for (sharding::CollectiveKind kind : sharding::kCollectiveKinds) {
    if (!link.by_kind[static_cast<size_t>(kind)]) {
      return invalid_argument(
          "{}: {} has no {} lines; give {}_gbs for the collectives it does not measure", flag,
          lf.sweep_path, sharding::collective_kind_name(kind), lf.flag);
    }
  }
  return link;
}

// A named link with the custom bandwidth / latency flags applied (`gbs` / `latency_us` when
// given; the values were range-checked at parse time), then the sweep file's per-kind costs.
StatusOr<sharding::Link> resolve_link(const LinkFlags& lf, const std::string& collective) {
  sharding::Link link;
  const bool sweep = lf.sweep_option->count() > 0;
  if (lf.name == "custom") {
    if (lf.gbs_option->count() == 0 && !sweep) {
      return invalid_argument(
          "{} custom: give its bandwidth with {}_gbs (GB/s per GPU) or measure it with {}_sweep",
          lf.flag, lf.flag, lf.flag);
    }
    link.name = "custom";
  } else {
    StatusOr<sharding::Link> preset = sharding::link_preset(lf.name);
    if (!preset.ok()) return invalid_argument("{}: {}", lf.flag, preset.status().message());
    link = *preset;
  }
  if (lf.gbs_option->count() > 0) link.bandwidth_bytes_per_s = lf.gbs * 1e9;
  if (lf.latency_option->count() > 0) link.latency_s = lf.latency_us * 1e-6;
  if (link.algorithm != sharding::LinkAlgorithm::kStaged) {  // shm's algorithm is its own
    ZERO_ASSIGN_OR_RETURN(link.algorithm, sharding::parse_link_algorithm(collective));
  }
  if (!sweep) return link;
  return apply_sweep(lf, std::move(link));
}

// One GPU's compute for one optimizer step, and how it was obtained (printed above the table).
struct Compute {
  double seconds = 0;
  std::string source;
};

StatusOr<Compute> resolve_compute(const ThroughputFlags& f, const ThroughputModelSource& model,
                                  DType dtype) {
  const bool from_flops = f.gpu_option->count() > 0 || f.peak_tflops_option->count() > 0;
  const bool measured = f.step_ms_option->count() > 0;
  if (measured && from_flops) {
    return invalid_argument(
        "--step_ms: give either the measured step time or --gpu/--peak_tflops "
        "with --mfu, not both");
  }
  if (measured) {
    if (f.mfu_option->count() > 0)
      return invalid_argument("--mfu: only with --gpu or --peak_tflops");
    return Compute{f.step_ms * 1e-3,
                   fmt::format("{:.2f} ms per step on one GPU (--step_ms)", f.step_ms)};
  }
  if (!from_flops) {
    return invalid_argument(
        "--throughput: needs one GPU's compute time: --step_ms MS (measured), or --gpu NAME "
        "(or --peak_tflops) with --mfu");
  }
  if (f.mfu_option->count() == 0) {
    return invalid_argument(
        "--mfu: required with --gpu / --peak_tflops (the model FLOPs "
        "utilization, in (0, 1])");
  }
  double peak = 0;
  std::string device;
  if (f.peak_tflops_option->count() > 0) {
    if (f.gpu_option->count() > 0) {
      return invalid_argument("--peak_tflops: give it or --gpu, not both");
    }
    peak = f.peak_tflops * 1e12;
    device = fmt::format("{:.1f} TFLOP/s peak", f.peak_tflops);
  } else {
    std::string upper = f.gpu;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    std::optional<double> known = runtime::peak_dense_flops(upper, dtype);
    if (upper.empty() || !known) {
      return invalid_argument(
          "--gpu: unknown GPU \"{}\" (h100, h200, a100; or --peak_tflops for another)", f.gpu);
    }
    peak = *known;
    device = fmt::format("{} {:.1f} TFLOP/s dense {}", upper, peak / 1e12, dtype_name(dtype));
  }
  const double flops_per_token = model.config
                                     ? runtime::train_flops_per_token(*model.config, f.seq_len)
                                     : 6.0 * static_cast<double>(model.total_params);
  const double tokens = static_cast<double>(f.micro_batch * f.seq_len * f.grad_accum);
  const double seconds = flops_per_token * tokens / (peak * f.mfu);
  return Compute{
      seconds, fmt::format("{:.2f} ms per step on one GPU = {:.3f} GFLOP/token ({}) x {} tokens / "
                           "({} x MFU {:.2f})",
                           1e3 * seconds, flops_per_token / 1e9,
                           model.config ? "6N + 12LCT" : "6N, no attention term with --params",
                           static_cast<int64_t>(tokens), device, f.mfu)};
}

// "tcp 1.2 GB/s 240 us ring", then the kinds measured apart: "; all_reduce 0.64 GB/s 496 us, ...".
std::string link_text(const sharding::Link& l) {
  std::string text =
      l.bandwidth_bytes_per_s > 0
          ? fmt::format("{} {:.4g} GB/s {:.4g} us {}", l.name, l.bandwidth_bytes_per_s / 1e9,
                        l.latency_s * 1e6, sharding::link_algorithm_name(l.algorithm))
          : fmt::format("{} {}", l.name, sharding::link_algorithm_name(l.algorithm));
  const char* separator = " (measured: ";
  for (sharding::CollectiveKind kind : sharding::kCollectiveKinds) {
    const std::optional<sharding::LinkCost>& cost = l.by_kind[static_cast<size_t>(kind)];
    if (!cost) continue;
    text +=
        fmt::format("{}{} {:.4g} GB/s {:.4g} us", separator, sharding::collective_kind_name(kind),
                    cost->bandwidth_bytes_per_s / 1e9, cost->latency_s * 1e6);
    separator = ", ";
  }
  if (separator[0] == ',') text += ")";
  return text;
}

}  // namespace

void add_throughput_flags(CLI::App* sub, ThroughputFlags& f) {
  sub->add_flag("--throughput", f.enabled,
                "instead of the memory tables: predicted step time and tokens/s per ZeRO stage at "
                "--num_gpus_per_node x --num_nodes GPUs (docs/scaling.md)");
  auto& o = f.options;
  auto add = [&](const std::string& name, auto& value, const std::string& help) {
    CLI::Option* option = sub->add_option(name, value, "throughput: " + help);
    o.push_back(option);
    return option;
  };
  f.step_ms_option = add("--step_ms", f.step_ms,
                         "one GPU's measured step (forward + backward of every micro-step + the "
                         "update) in ms")
                         ->check(real_at_least(0, true));
  add("--optimizer_ms", f.optimizer_ms,
      "the part of --step_ms that stages 1-3 shard: the update (Adam, norm, clipping, the cast "
      "of the new weights); default 0")
      ->check(real_at_least(0));
  add("--gradient_ms", f.gradient_ms,
      "the part of --step_ms that stages 2-3 shard: zeroing and accumulating the fp32 gradient "
      "accumulators; default 0")
      ->check(real_at_least(0));
  f.gpu_option = add("--gpu", f.gpu, "h100, h200 or a100 (dense peak), with --mfu");
  f.peak_tflops_option = add("--peak_tflops", f.peak_tflops, "dense peak TFLOP/s of another GPU")
                             ->check(real_at_least(0, true));
  f.mfu_option = add("--mfu", f.mfu, "model FLOPs utilization in (0, 1], with --gpu")
                     ->check(real_at_least(0, true, 1));
  add("--micro_batch", f.micro_batch, "train_micro_batch_size_per_gpu (default 1)")
      ->check(int_at_least(1, int64_t{1} << 20));
  add("--seq_len", f.seq_len, "tokens per sample (default 1024)")
      ->check(int_at_least(1, int64_t{1} << 24));
  add("--grad_accum", f.grad_accum, "gradient_accumulation_steps (default 1)")
      ->check(int_at_least(1, int64_t{1} << 20));
  add("--dtype", f.dtype, "model dtype bf16 (default), fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  f.communication_data_type_option = add("--communication_data_type", f.communication_data_type,
                                         "gradient reduction dtype (default: --dtype)")
                                         ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  add("--interconnect", f.interconnect,
      "link between the GPUs of a node: nvlink (default), pcie, infiniband, ethernet-100g, "
      "ethernet-25g, shm, tcp, custom");
  f.interconnect_gbs_option =
      add("--interconnect_gbs", f.interconnect_gbs, "that link's GB/s per GPU per direction")
          ->check(real_at_least(0, true));
  f.interconnect_latency_option =
      add("--interconnect_latency_us", f.interconnect_latency_us, "its latency per step in us")
          ->check(real_at_least(0));
  f.interconnect_sweep_option =
      add("--interconnect_sweep", f.interconnect_sweep,
          "a collective sweep on that link (bench/comm_sweep_bench's lines): bandwidth and latency "
          "fitted per collective");
  add("--network", f.network,
      "link across nodes, per GPU: infiniband (default), ethernet-100g, ethernet-25g, tcp, "
      "custom, ...");
  f.network_gbs_option =
      add("--network_gbs", f.network_gbs, "the network's GB/s per GPU per direction")
          ->check(real_at_least(0, true));
  f.network_latency_option =
      add("--network_latency_us", f.network_latency_us, "its latency per step in us")
          ->check(real_at_least(0));
  f.network_sweep_option = add("--network_sweep", f.network_sweep,
                               "a collective sweep across nodes, fitted per collective");
  add("--collective", f.collective, "all-reduce algorithm ring (default), tree or auto")
      ->check(CLI::IsMember({"ring", "tree", "auto"}));
  f.overlap_comm_option = add("--overlap_comm", f.overlap_comm,
                              "true or false (default: DeepSpeed's, true at stage 3 only)")
                              ->check(CLI::IsMember({"true", "false"}));
  f.overlap_efficiency_option =
      add("--overlap_efficiency", f.overlap_efficiency,
          "share of the overlappable comm hidden, 0-1 (default 1 on GPU links, 0 on shm/tcp)")
          ->check(real_at_least(0, false, 1));
  add("--oversubscription", f.oversubscription,
      "ranks x threads per rank / cores when ranks share hardware (default 1)")
      ->check(real_at_least(1, false, 1e6));
  f.collectives_per_pass_option =
      add("--collectives_per_pass", f.collectives_per_pass,
          "collectives per pass over the model (default: layers + 2 with --model, 1 with "
          "--params)")
          ->check(int_at_least(1, int64_t{1} << 20));
  add("--stage3_max_reuse_distance", f.stage3_max_reuse_distance,
      "stage 3 keeps min(params, this / 2) gathered between uses (default 1e9)")
      ->check(real_at_least(0));
}

Status check_throughput_flags_unused(const ThroughputFlags& f) {
  for (const CLI::Option* option : f.options) {
    if (option->count() > 0) {
      return invalid_argument("{}: only with --throughput", option->get_name());
    }
  }
  return ok_status();
}

Status run_throughput_estimate(const ThroughputFlags& f, const ThroughputModelSource& model,
                               int64_t num_gpus_per_node, int64_t num_nodes,
                               const std::vector<int>& stages, bool json) {
  if (num_gpus_per_node < 1) return invalid_argument("--num_gpus_per_node: must be >= 1");
  if (num_nodes < 1) return invalid_argument("--num_nodes: must be >= 1");
  if (f.micro_batch * f.seq_len * f.grad_accum > (int64_t{1} << 40)) {
    return invalid_argument("--micro_batch x --seq_len x --grad_accum: more than 2^40 tokens");
  }
  ZERO_ASSIGN_OR_RETURN(const int param_bytes, dtype_bytes_named("--dtype", f.dtype));
  const std::string comm_name =
      f.communication_data_type_option->count() > 0 ? f.communication_data_type : f.dtype;
  ZERO_ASSIGN_OR_RETURN(const int grad_bytes,
                        dtype_bytes_named("--communication_data_type", comm_name));
  const DType dtype = f.dtype == "fp32"   ? DType::kF32
                      : f.dtype == "fp16" ? DType::kF16
                                          : DType::kBF16;
  ZERO_ASSIGN_OR_RETURN(const Compute compute, resolve_compute(f, model, dtype));
  if ((f.optimizer_ms + f.gradient_ms) * 1e-3 > compute.seconds) {
    return invalid_argument(
        "--optimizer_ms + --gradient_ms: {:.2f} ms, more than the step's {:.2f} ms",
        f.optimizer_ms + f.gradient_ms, 1e3 * compute.seconds);
  }
  sharding::Topology topology;
  topology.gpus_per_node = num_gpus_per_node;
  topology.num_nodes = num_nodes;
  const std::string interconnect_flag = "--interconnect";
  const std::string network_flag = "--network";
  ZERO_ASSIGN_OR_RETURN(
      topology.intra_node,
      resolve_link(
          LinkFlags{interconnect_flag, f.interconnect, f.interconnect_gbs_option,
                    f.interconnect_gbs, f.interconnect_latency_option, f.interconnect_latency_us,
                    f.interconnect_sweep_option, f.interconnect_sweep},
          f.collective));
  ZERO_ASSIGN_OR_RETURN(
      topology.inter_node,
      resolve_link(LinkFlags{network_flag, f.network, f.network_gbs_option, f.network_gbs,
                             f.network_latency_option, f.network_latency_us, f.network_sweep_option,
                             f.network_sweep},
                   f.collective));
  const int64_t units = f.collectives_per_pass_option->count() > 0
                            ? f.collectives_per_pass
                            : (model.config ? model.config->num_layers + 2 : 1);
  const auto kept = static_cast<int64_t>(std::min(static_cast<double>(model.total_params),
                                                  std::floor(f.stage3_max_reuse_distance / 2)));

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::string table;
  for (int stage : stages) {
    sharding::ThroughputInputs in;
    in.stage = stage;
    in.total_params = model.total_params;
    in.param_bytes = param_bytes;
    in.grad_wire_bytes = grad_bytes;
    in.grad_accum = f.grad_accum;
    in.tokens_per_micro_batch = f.micro_batch * f.seq_len;
    in.compute_s = compute.seconds;
    in.optimizer_s = f.optimizer_ms * 1e-3;
    in.gradient_s = f.gradient_ms * 1e-3;
    in.oversubscription = f.oversubscription;
    in.overlap_comm = f.overlap_comm_option->count() > 0 ? f.overlap_comm == "true" : stage == 3;
    // Negative: the links' default (throughput_model.h).
    in.overlap_efficiency = f.overlap_efficiency_option->count() > 0 ? f.overlap_efficiency : -1;
    in.collectives_per_pass = units;
    in.stage3_kept_numel = kept;
    ZERO_RETURN_IF_ERROR(sharding::validate_throughput_inputs(in, topology));
    const sharding::ThroughputPrediction p = sharding::predict_step(in, topology);
    rows.push_back(sharding::prediction_to_json(in, p));
    table += fmt::format(
        "{:<5} {:<7} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>12.0f} {:>10.0f} {:>10.3f} "
        "{:>13.2f} {:>14.2f}\n",
        stage, in.overlap_comm ? "on" : "off", 1e3 * p.compute_s, 1e3 * p.comm_s,
        1e3 * p.exposed_comm_s, 1e3 * p.step_s, p.tokens_per_s, p.tokens_per_s_per_rank,
        p.scaling_efficiency, p.wire_bytes / (1 << 20), p.model_states_bytes / (1 << 30));
  }
  const int64_t world = topology.world_size();
  if (json) {
    nlohmann::ordered_json out = {{"model", model.name},
                                  {"params", model.total_params},
                                  {"num_gpus_per_node", num_gpus_per_node},
                                  {"num_nodes", num_nodes},
                                  {"micro_batch", f.micro_batch},
                                  {"seq_len", f.seq_len},
                                  {"grad_accum", f.grad_accum},
                                  {"dtype", f.dtype},
                                  {"communication_data_type", comm_name},
                                  {"compute_ms", 1e3 * compute.seconds},
                                  {"optimizer_ms", f.optimizer_ms},
                                  {"gradient_ms", f.gradient_ms},
                                  {"interconnect", link_text(topology.intra_node)},
                                  {"network", link_text(topology.inter_node)},
                                  {"collectives_per_pass", units},
                                  {"stage3_kept_params", kept},
                                  {"rows", rows}};
    std::printf("%s\n", out.dump().c_str());
    return ok_status();
  }
  std::string text = fmt::format(
      "Throughput model (docs/scaling.md): {}, {} params, {} GPUs ({} node{} x {}), micro {} x "
      "accum {} x T {} = {} tokens/step, {} (gradients in {})\n",
      model.name, model.total_params, world, num_nodes, num_nodes == 1 ? "" : "s",
      num_gpus_per_node, f.micro_batch, f.grad_accum, f.seq_len,
      f.micro_batch * f.grad_accum * f.seq_len * world, f.dtype, comm_name);
  text += fmt::format(
      "compute: {}; optimizer {:.2f} ms and gradient accumulators {:.2f} ms of it; "
      "oversubscription {:.3g}\n",
      compute.source, f.optimizer_ms, f.gradient_ms, f.oversubscription);
  text += fmt::format(
      "links: in node {}; across nodes {}; {} collectives per pass; stage 3 "
      "keeps {} params gathered\n",
      num_gpus_per_node > 1 ? link_text(topology.intra_node) : "(unused)",
      num_nodes > 1 ? link_text(topology.inter_node) : "(unused)", units, kept);
  text +=
      fmt::format("{:<5} {:<7} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>10} {:>13} {:>14}\n",
                  "stage", "overlap", "compute ms", "comm ms", "exposed ms", "step ms", "tokens/s",
                  "tok/s/GPU", "efficiency", "wire MiB/step", "states GiB/GPU");
  text += table;
  text +=
      "comm: every collective back to back; exposed: what overlap_comm did not hide; efficiency: "
      "tokens/s per GPU over one GPU's; wire: payload per rank per step (as zero bench step "
      "counts it); states: params + grads + Adam (ZeRO paper, 16 B/param mixed precision)\n";
  std::fputs(text.c_str(), stdout);
  return ok_status();
}

}  // namespace zero::cli
