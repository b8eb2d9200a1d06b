// Step time = compute + exposed comm, per ZeRO stage (throughput_model.h; docs/scaling.md).
#include "sharding/throughput_model.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

namespace zero::sharding {
namespace {

// ShmCollectives' slot: a message larger than this runs as several chunks (a barrier or two each).
constexpr double kShmSlotBytes = 4.0 * (1 << 20);

struct NamedLink {
  const char* name;
  double gb_per_s;
  double latency_us;
  LinkAlgorithm algorithm;
  bool cpu_bound;
  bool reduces_in_fp32;
};

// GB = 1e9 bytes. Sources and the calibration of shm / tcp: docs/scaling.md "Links".
constexpr NamedLink kLinks[] = {
    {"nvlink", 450.0, 2.0, LinkAlgorithm::kRing, false, false},
    {"infiniband", 50.0, 5.0, LinkAlgorithm::kRing, false, false},
    {"ethernet-100g", 12.5, 20.0, LinkAlgorithm::kRing, false, false},
    {"ethernet-25g", 3.125, 30.0, LinkAlgorithm::kRing, false, false},
    {"pcie", 25.0, 10.0, LinkAlgorithm::kRing, false, false},
    // This machine's CPU ranks (2-core AMD EPYC, shared): the medians of 3 fits to world-2
    // collective sweeps at load 2.7-3.7, bench/results/scaling_check.md (2026-11-28). The fit,
    // weighted to large messages, does not resolve shm's barrier latency (median fit: 0).
    {"shm", 11.2, 0.0, LinkAlgorithm::kStaged, true, true},
    {"tcp", 1.2, 240.0, LinkAlgorithm::kRing, true, true},
};

double ceil_log2(int64_t p) { return std::ceil(std::log2(static_cast<double>(p))); }

// One level (p ranks over one link): `calls` collectives moving `bytes` in total.
double level_seconds(CollectiveKind kind, double bytes, int64_t calls, int64_t p,
                     const Link& link) {
  if (p <= 1 || bytes <= 0) return 0;
  const LinkCost cost = link.cost(kind);
  auto seconds = [&](LinkAlgorithm algorithm) {
    const CollectiveTerms t = collective_terms(kind, bytes, calls, p, algorithm);
    return t.bytes_per_bandwidth / cost.bandwidth_bytes_per_s + t.latency_steps * cost.latency_s;
  };
  if (kind == CollectiveKind::kAllReduce && link.algorithm == LinkAlgorithm::kAuto) {
    return std::min(seconds(LinkAlgorithm::kRing), seconds(LinkAlgorithm::kTree));
  }
  return seconds(link.algorithm);
}

double model_states_bytes(int stage, double psi, int param_bytes, int64_t world) {
  const double n = static_cast<double>(world);
  const double p = param_bytes * psi;  // 16-bit (or fp32) working parameters
  const double g = param_bytes * psi;  // gradients
  // Adam: fp32 master + m + v (K = 12); an fp32 model is its own master (K = 8).
  const double k = (param_bytes == 4 ? 8.0 : 12.0) * psi;
  switch (stage) {
    case 0: return p + g + k;
    case 1: return p + g + k / n;
    case 2: return p + (g + k) / n;
    default: return (p + g + k) / n;
  }
}

}  // namespace

StatusOr<Link> link_preset(std::string_view name) {
  for (const NamedLink& l : kLinks) {
    if (name == l.name) {
      // One pair for every collective: a preset knows no more (link_sweep.h measures them).
      return Link{l.name,      l.gb_per_s * 1e9, l.latency_us * 1e-6,
                  l.algorithm, l.cpu_bound,      l.reduces_in_fp32,
                  {}};
    }
  }
  return not_found("unknown link \"{}\" (known: {}, or custom with a bandwidth)", name,
                   fmt::join(link_preset_names(), ", "));
}

std::vector<std::string> link_preset_names() {
  std::vector<std::string> names;
  for (const NamedLink& l : kLinks) names.emplace_back(l.name);
  return names;
}

std::string_view link_algorithm_name(LinkAlgorithm algorithm) {
  switch (algorithm) {
    case LinkAlgorithm::kRing: return "ring";
    case LinkAlgorithm::kTree: return "tree";
    case LinkAlgorithm::kAuto: return "auto";
    case LinkAlgorithm::kStaged: return "staged";
  }
  return "?";
}

StatusOr<LinkAlgorithm> parse_link_algorithm(std::string_view name) {
  if (name == "ring") return LinkAlgorithm::kRing;
  if (name == "tree") return LinkAlgorithm::kTree;
  if (name == "auto") return LinkAlgorithm::kAuto;
  return invalid_argument("expected ring, tree or auto, got \"{}\"", name);
}

std::string_view collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
  }
  return "?";
}

std::optional<CollectiveKind> parse_collective_kind(std::string_view name) {
  for (CollectiveKind kind : kCollectiveKinds) {
    if (name == collective_kind_name(kind)) return kind;
  }
  return std::nullopt;
}

LinkCost Link::cost(CollectiveKind kind) const {
  const std::optional<LinkCost>& own = by_kind[static_cast<size_t>(kind)];
  return own ? *own : LinkCost{bandwidth_bytes_per_s, latency_s};
}

CollectiveTerms collective_terms(CollectiveKind kind, double bytes, int64_t calls, int64_t p,
                                 LinkAlgorithm algorithm) {
  if (p <= 1 || bytes <= 0) return {};
  const double pm1 = static_cast<double>(p - 1);
  const double share = pm1 / static_cast<double>(p);  // (p−1)/p
  const double n_calls = static_cast<double>(calls);
  if (algorithm == LinkAlgorithm::kStaged) {
    // Copy-equivalents per byte of payload, per rank: a memcpy counts 1, an fp32 add (2 reads, 1
    // write) 1.5. all_reduce: copy in + add (p−1) slices of B/p + copy out; reduce_scatter: copy
    // in the (p−1) blocks peers read + add p−1 blocks of B/p; all_gather: own block into the slot
    // and into its place in the output (the coordinator gathers from a separate shard) + the
    // (p−1) others out. Barriers: 2 per 4 MiB chunk of fp32 for all_reduce, 1 per chunk else.
    const double per_call = bytes / n_calls;
    switch (kind) {
      case CollectiveKind::kAllReduce:
        return {(2.0 + 1.5 * share) * bytes, n_calls * 2.0 * std::ceil(per_call / kShmSlotBytes)};
      case CollectiveKind::kReduceScatter:
        return {2.5 * share * bytes, n_calls * std::ceil(per_call / kShmSlotBytes)};
      case CollectiveKind::kAllGather:
        return {(1.0 + 1.0 / static_cast<double>(p)) * bytes,
                n_calls * std::ceil(per_call / static_cast<double>(p) / kShmSlotBytes)};
    }
  }
  if (kind == CollectiveKind::kAllReduce) {
    if (algorithm == LinkAlgorithm::kTree) return {2.0 * bytes, n_calls * 2.0 * ceil_log2(p)};
    return {2.0 * share * bytes, n_calls * 2.0 * pm1};  // ring (auto: level_seconds takes the min)
  }
  // NCCL has no tree reduce-scatter / all-gather: rings at every setting.
  return {share * bytes, n_calls * pm1};
}

double collective_seconds(CollectiveKind kind, double payload_bytes, int64_t calls,
                          const Topology& t) {
  const int64_t g = t.gpus_per_node;
  const int64_t n = t.num_nodes;
  if (n == 1) return level_seconds(kind, payload_bytes, calls, g, t.intra_node);
  if (g == 1) return level_seconds(kind, payload_bytes, calls, n, t.inter_node);
  // Two levels: every rank's NIC carries the 1/g piece its in-node ring step left it.
  const double piece = payload_bytes / static_cast<double>(g);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return level_seconds(CollectiveKind::kReduceScatter, payload_bytes, calls, g, t.intra_node) +
             level_seconds(CollectiveKind::kAllReduce, piece, calls, n, t.inter_node) +
             level_seconds(CollectiveKind::kAllGather, payload_bytes, calls, g, t.intra_node);
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      return level_seconds(kind, payload_bytes, calls, g, t.intra_node) +
             level_seconds(kind, piece, calls, n, t.inter_node);
  }
  return 0;
}

Status validate_throughput_inputs(const ThroughputInputs& in, const Topology& t) {
  if (in.stage < 0 || in.stage > 3) return invalid_argument("stage: 0-3, got {}", in.stage);
  if (in.total_params <= 0) return invalid_argument("params: must be > 0");
  for (int bytes : {in.param_bytes, in.grad_wire_bytes}) {
    if (bytes != 2 && bytes != 4) return invalid_argument("dtype bytes: 2 or 4, got {}", bytes);
  }
  if (in.grad_accum < 1) return invalid_argument("grad_accum: must be >= 1");
  if (in.tokens_per_micro_batch < 1) return invalid_argument("tokens per micro-batch: >= 1");
  if (!(in.compute_s > 0) || !std::isfinite(in.compute_s)) {
    return invalid_argument("compute time: must be > 0");
  }
  if (!(in.optimizer_s >= 0) || !(in.gradient_s >= 0) ||
      in.optimizer_s + in.gradient_s > in.compute_s) {
    return invalid_argument(
        "optimizer time {} ms + gradient time {} ms: each >= 0, together at most the step's "
        "compute time {} ms",
        1e3 * in.optimizer_s, 1e3 * in.gradient_s, 1e3 * in.compute_s);
  }
  if (!(in.oversubscription >= 1) || !std::isfinite(in.oversubscription)) {
    return invalid_argument("oversubscription: must be >= 1");
  }
  if (!(in.overlap_efficiency <= 1)) return invalid_argument("overlap efficiency: must be <= 1");
  if (in.collectives_per_pass < 1) return invalid_argument("collectives per pass: >= 1");
  if (in.stage3_kept_numel < 0 || in.stage3_kept_numel > in.total_params) {
    return invalid_argument("stage-3 kept parameters: must be in [0, params]");
  }
  if (t.gpus_per_node < 1 || t.num_nodes < 1) return invalid_argument("GPU counts: >= 1");
  for (const Link* link : {&t.intra_node, &t.inter_node}) {
    for (CollectiveKind kind : kCollectiveKinds) {
      const LinkCost cost = link->cost(kind);
      const std::string_view what =
          link->by_kind[static_cast<size_t>(kind)] ? collective_kind_name(kind) : "";
      if (!(cost.bandwidth_bytes_per_s > 0) || !std::isfinite(cost.bandwidth_bytes_per_s)) {
        return invalid_argument("{}: {}{}bandwidth must be > 0", link->name, what,
                                what.empty() ? "" : " ");
      }
      if (!(cost.latency_s >= 0) || !std::isfinite(cost.latency_s)) {
        return invalid_argument("{}: {}{}latency must be >= 0", link->name, what,
                                what.empty() ? "" : " ");
      }
    }
  }
  return ok_status();
}

ThroughputPrediction predict_step(const ThroughputInputs& in, const Topology& t) {
  ThroughputPrediction out;
  const int64_t world = t.world_size();
  out.world_size = world;
  const double psi = static_cast<double>(in.total_params);
  const int64_t k = in.grad_accum;
  const double kd = static_cast<double>(k);
  // The links this world uses: one level, or both.
  std::vector<const Link*> used;
  if (t.gpus_per_node > 1) used.push_back(&t.intra_node);
  if (t.num_nodes > 1) used.push_back(&t.inter_node);
  bool cpu_bound = false;
  bool fp32_reductions = false;
  for (const Link* l : used) {
    cpu_bound = cpu_bound || l->cpu_bound;
    fp32_reductions = fp32_reductions || l->reduces_in_fp32;
  }
  const double grad_bytes = psi * (fp32_reductions ? 4 : in.grad_wire_bytes);
  const double param_bytes = psi * in.param_bytes;

  // Compute: forward + backward as measured; the update shrinks to Ψ/N at stages 1-3, the
  // gradient accumulators' work at stages 2-3.
  const double n = static_cast<double>(world);
  const double fwd_bwd_s = in.compute_s - in.optimizer_s - in.gradient_s;
  const double optimizer_s = in.stage >= 1 ? in.optimizer_s / n : in.optimizer_s;
  const double gradient_s = in.stage >= 2 ? in.gradient_s / n : in.gradient_s;
  out.compute_s = (fwd_bwd_s + optimizer_s + gradient_s) * in.oversubscription;

  // The stage's collectives per optimizer step (docs/design.md §4, as ZeRO.cpp issues them).
  const int64_t cpp = in.collectives_per_pass;
  enum Window { kNone, kForward, kBackward, kLastBackward };
  struct Planned {
    CommPhase phase;
    Window window;
  };
  std::vector<Planned> plan;
  auto add = [&](const char* name, CollectiveKind kind, int64_t passes, double bytes_per_pass,
                 Window window) {
    plan.push_back({CommPhase{name, kind, passes * cpp,
                              static_cast<double>(passes) * bytes_per_pass, 0, window != kNone},
                    window});
  };
  if (world > 1) {
    switch (in.stage) {
      case 0:  // one all-reduce of the accumulated gradients, during the last backward
        add("gradient all-reduce", CollectiveKind::kAllReduce, 1, grad_bytes, kLastBackward);
        break;
      case 1:  // reduce-scatter at the boundary, then the updated shards gathered
        add("gradient reduce-scatter", CollectiveKind::kReduceScatter, 1, grad_bytes,
            kLastBackward);
        add("parameter all-gather", CollectiveKind::kAllGather, 1, param_bytes, kNone);
        break;
      case 2:  // reduce-scatter every micro-step
        add("gradient reduce-scatter", CollectiveKind::kReduceScatter, k, grad_bytes, kBackward);
        add("parameter all-gather", CollectiveKind::kAllGather, 1, param_bytes, kNone);
        break;
      default: {  // stage 3: gathers for forward and backward, a reduce-scatter every micro-step
        // The first forward gathers everything (the update changed every shard); what stays
        // gathered is not gathered again in backward nor in the next micro-step's forward.
        const double regathered =
            (psi - static_cast<double>(in.stage3_kept_numel)) * in.param_bytes;
        add("forward all-gather", CollectiveKind::kAllGather, k,
            (param_bytes + (kd - 1) * regathered) / kd, kForward);
        if (regathered > 0) {
          add("backward all-gather", CollectiveKind::kAllGather, k, regathered, kBackward);
        }
        add("gradient reduce-scatter", CollectiveKind::kReduceScatter, k, grad_bytes, kBackward);
        break;
      }
    }
  }
  const double comm_scale = cpu_bound ? in.oversubscription : 1.0;
  double overlappable_forward = 0;
  double overlappable_backward = 0;
  bool last_backward_only = false;
  for (Planned& p : plan) {
    p.phase.seconds =
        collective_seconds(p.phase.kind, p.phase.payload_bytes, p.phase.calls, t) * comm_scale;
    out.comm_s += p.phase.seconds;
    out.wire_bytes += p.phase.payload_bytes;
    if (p.window == kForward) overlappable_forward += p.phase.seconds;
    if (p.window == kBackward || p.window == kLastBackward)
      overlappable_backward += p.phase.seconds;
    if (p.window == kLastBackward) last_backward_only = true;
    out.phases.push_back(p.phase);
  }
  // overlap_comm: comm issued during compute hides behind it, up to the compute it overlaps
  // (forward = 1/3, backward = 2/3 of forward + backward; stages 0-1 reduce during the last
  // micro-step's backward only).
  double hidden = 0;
  if (in.overlap_comm) {
    const double efficiency =
        in.overlap_efficiency >= 0 ? in.overlap_efficiency : (cpu_bound ? 0.0 : 1.0);
    const double fwd_bwd = fwd_bwd_s * in.oversubscription;
    const double forward_window = fwd_bwd / 3.0;
    const double backward_window = 2.0 * fwd_bwd / 3.0 / (last_backward_only ? kd : 1.0);
    hidden = std::min(efficiency * overlappable_forward, forward_window) +
             std::min(efficiency * overlappable_backward, backward_window);
  }
  out.exposed_comm_s = std::max(0.0, out.comm_s - hidden);  // rounding only: hidden <= comm
  out.step_s = out.compute_s + out.exposed_comm_s;
  out.tokens_per_step =
      static_cast<double>(in.tokens_per_micro_batch) * kd * static_cast<double>(world);
  out.tokens_per_s = out.tokens_per_step / out.step_s;
  out.tokens_per_s_per_rank = out.tokens_per_s / static_cast<double>(world);
  out.scaling_efficiency = in.compute_s / out.step_s;
  out.model_states_bytes = model_states_bytes(in.stage, psi, in.param_bytes, world);
  return out;
}

nlohmann::ordered_json prediction_to_json(const ThroughputInputs& in,
                                          const ThroughputPrediction& p) {
  nlohmann::ordered_json phases = nlohmann::ordered_json::array();
  for (const CommPhase& ph : p.phases) {
    phases.push_back({{"name", ph.name},
                      {"collective", collective_kind_name(ph.kind)},
                      {"calls", ph.calls},
                      {"payload_bytes", ph.payload_bytes},
                      {"ms", 1e3 * ph.seconds},
                      {"overlappable", ph.overlappable}});
  }
  return {{"stage", in.stage},
          {"overlap_comm", in.overlap_comm},
          {"world_size", p.world_size},
          {"compute_ms", 1e3 * p.compute_s},
          {"comm_ms", 1e3 * p.comm_s},
          {"exposed_comm_ms", 1e3 * p.exposed_comm_s},
          {"step_ms", 1e3 * p.step_s},
          {"tokens_per_step", p.tokens_per_step},
          {"tokens_per_s", p.tokens_per_s},
          {"tokens_per_s_per_gpu", p.tokens_per_s_per_rank},
          {"scaling_efficiency", p.scaling_efficiency},
          {"wire_bytes", p.wire_bytes},
          {"model_states_bytes", p.model_states_bytes},
          {"phases", phases}};
}

}  // namespace zero::sharding
