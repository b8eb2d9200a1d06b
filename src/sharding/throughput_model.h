// The step time of a ZeRO stage at N ranks, on paper: one rank's measured (or FLOP-derived)
// compute time plus each stage's collectives over a named interconnect (latency + bandwidth terms,
// ring / tree / shared-memory staging, ring within a node and across nodes), minus what
// overlap_comm hides. docs/scaling.md states every assumption; bench/scaling_check.sh checks it on
// CPU ranks.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zero::sharding {

// How a collective moves its bytes between the ranks of one level (within a node or across nodes).
enum class LinkAlgorithm {
  kRing,  // NCCL / MPI rings: all-reduce 2(p−1)/p·B/bw + 2(p−1)·α; RS, AG (p−1)/p·B/bw + (p−1)·α
  kTree,  // all-reduce over a (double binary) tree: 2·B/bw + 2·⌈log2 p⌉·α; RS / AG stay rings
  kAuto,  // the faster of ring and tree per all-reduce (what NCCL's tuner aims at)
  // ShmCollectives (src/comm/shm_collectives.cc): copy in → barrier → reduce own slice → barrier →
  // copy out, through one shared segment in 4 MiB slots; bw is one rank's copy bandwidth, α one
  // barrier. Not a ring: every rank copies the whole buffer in and out.
  kStaged,
};

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather };
inline constexpr int kNumCollectiveKinds = 3;
inline constexpr std::array<CollectiveKind, kNumCollectiveKinds> kCollectiveKinds = {
    CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather};
std::string_view collective_kind_name(CollectiveKind kind);
// all_reduce, reduce_scatter, all_gather (the names above, as comm_sweep_bench prints them).
std::optional<CollectiveKind> parse_collective_kind(std::string_view name);

// What one collective pays per byte and per algorithm step on a link.
struct LinkCost {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;  // per algorithm step (ring step, tree level, shm barrier)
};

// One level's link, per rank and per direction ("bus bandwidth" in nccl-tests' sense).
struct Link {
  std::string name;
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;  // per algorithm step (ring step, tree level, shm barrier)
  LinkAlgorithm algorithm = LinkAlgorithm::kRing;
  // The ranks' own cores move the bytes (shm, loopback TCP): comm time is slowed by
  // oversubscription like compute, and overlap_comm hides nothing by default (the comm thread
  // competes for the cores the compute uses).
  bool cpu_bound = false;
  // Reductions travel in fp32 whatever the dtype (MpiCommunicator widens 16-bit sums:
  // docs/comm.md).
  bool reduces_in_fp32 = false;
  // Measured per collective (a sweep fitted per kind: link_sweep.h), overriding bandwidth and
  // latency for that kind. One (bandwidth, latency) pair for all three is the named presets'
  // assumption; on CPU links the kinds differ by up to 3x at one payload
  // (bench/results/scaling_check.md: TCP at world 4, 64 MiB: all-reduce 167 ms, reduce-scatter 97,
  // all-gather 49).
  std::array<std::optional<LinkCost>, kNumCollectiveKinds> by_kind;

  // The cost `kind` pays: its own measured pair when there is one, else the link's.
  LinkCost cost(CollectiveKind kind) const;
};

// Named links: nvlink (H100 NVLink 4: 450 GB/s, 2 µs), infiniband (NDR 400 Gb/s per GPU: 50 GB/s,
// 5 µs), ethernet-100g (12.5 GB/s, 20 µs), ethernet-25g (3.125 GB/s, 30 µs), pcie (Gen5 x16
// peer-to-peer through the host: 25 GB/s, 10 µs), shm and tcp (this repository's CPU ranks on one
// host, calibrated by bench/scaling_check.sh: bench/results/scaling_check.md). NotFound names them.
StatusOr<Link> link_preset(std::string_view name);
std::vector<std::string> link_preset_names();
std::string_view link_algorithm_name(LinkAlgorithm algorithm);
StatusOr<LinkAlgorithm> parse_link_algorithm(std::string_view name);  // ring, tree, auto

struct Topology {
  int64_t gpus_per_node = 1;  // ranks per node
  int64_t num_nodes = 1;
  Link intra_node;  // between the ranks of one node
  Link inter_node;  // each rank's share of the network across nodes (one NIC per GPU)
  int64_t world_size() const { return gpus_per_node * num_nodes; }
};

// One collective's time on one level is linear in the link's two numbers:
//   seconds = bytes_per_bandwidth / bandwidth + latency_steps · latency.
// These are the two coefficients (the formulas in docs/scaling.md "One collective"; kAuto counts as
// the ring, its min() being the one non-linear case): what a sweep is fitted against.
struct CollectiveTerms {
  double bytes_per_bandwidth = 0;
  double latency_steps = 0;
};
// `calls` collectives of `kind` over `ranks` ranks moving `payload_bytes` in total. Zero terms for
// ranks <= 1. REQUIRES: calls >= 1.
CollectiveTerms collective_terms(CollectiveKind kind, double payload_bytes, int64_t calls,
                                 int64_t ranks, LinkAlgorithm algorithm);

// Seconds for `calls` collectives of `kind` moving `payload_bytes` in total, payload as CommStats
// counts it (all_reduce: the buffer; reduce_scatter: the input, world × block; all_gather: the
// output). Hierarchical when num_nodes > 1 and gpus_per_node > 1: all-reduce = reduce-scatter in
// the node + all-reduce of the 1/g piece across nodes + all-gather in the node; reduce-scatter and
// all-gather = their in-node ring + the 1/g piece's ring across nodes. Oversubscription is the
// caller's (ThroughputInputs). 0 at world 1. REQUIRES: calls >= 1, links' bandwidths > 0.
double collective_seconds(CollectiveKind kind, double payload_bytes, int64_t calls,
                          const Topology& topology);

struct ThroughputInputs {
  int stage = 0;             // 0-3
  int64_t total_params = 0;  // Ψ
  int param_bytes = 2;       // model dtype: what gathers move (2 for bf16/fp16, 4 for fp32)
  int grad_wire_bytes = 2;   // communication_data_type: what gradient reductions move
  int64_t grad_accum = 1;    // micro-steps per optimizer step (k)
  int64_t tokens_per_micro_batch = 0;  // one rank's micro_batch × seq_len
  // One rank's compute for one optimizer step (k micro-steps forward + backward + the update) at
  // world 1, no communication. Two parts of it are per-parameter work that ZeRO shards (measured
  // over all Ψ at world 1; docs/scaling.md "Compute"):
  //   optimizer_s  the update (Adam over master and moments, the norm, the cast of the new
  //                weights into the working copy): Ψ/N at stages 1-3
  //   gradient_s   the fp32 gradient accumulators (zeroed each step, accumulated each
  //                micro-step): Ψ/N at stages 2-3, where only the own shard is kept
  // Everything else (forward, backward, the micro-step gradient buffers) costs the same at any N.
  double compute_s = 0;
  double optimizer_s = 0;
  double gradient_s = 0;
  // Ranks time-share hardware: ranks × threads per rank / cores (CPU ranks), or ranks per GPU.
  // Compute (and comm over a cpu_bound link) takes this many times longer. >= 1.
  double oversubscription = 1;
  bool overlap_comm = false;
  // Fraction of the overlappable comm that overlap_comm hides, capped by the compute it overlaps
  // (forward gathers behind the forward third, gradient reductions and backward gathers behind
  // the backward two thirds of a micro-step). Negative: the links' default (1 for GPU links, 0 for
  // cpu_bound ones).
  double overlap_efficiency = -1;
  // Collectives issued per pass over the model (units or buckets): the latency term's count.
  int64_t collectives_per_pass = 1;
  // Stage 3: parameters that stay gathered from their forward use to their backward use and on
  // into the next micro-step (ParamCoordinator keeps a unit reused within
  // stage3_max_reuse_distance elements while the live total stays under
  // stage3_max_live_parameters); 0 re-gathers everything, DeepSpeed's 3kΨ. <= total_params.
  int64_t stage3_kept_numel = 0;
};

// One kind of collective in a step.
struct CommPhase {
  std::string name;  // e.g. "gradient all-reduce", "forward all-gather"
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int64_t calls = 0;         // per optimizer step
  double payload_bytes = 0;  // per step, CommStats' accounting (the bench's wire MiB/step)
  double seconds = 0;
  bool overlappable = false;  // issued while compute still runs (overlap_comm on)
};

struct ThroughputPrediction {
  int64_t world_size = 1;
  double compute_s = 0;  // one rank's compute at this world (optimizer sharded, oversubscribed)
  double comm_s = 0;     // every collective of the step, back to back
  double exposed_comm_s = 0;   // comm_s minus what overlap_comm hid
  double step_s = 0;           // compute_s + exposed_comm_s
  double wire_bytes = 0;       // payload per rank per step (sum of the phases)
  double tokens_per_step = 0;  // global
  double tokens_per_s = 0;     // global
  double tokens_per_s_per_rank = 0;
  // tokens/s per rank at N over tokens/s at world 1 (same stage: no comm, whole optimizer).
  double scaling_efficiency = 0;
  double model_states_bytes = 0;  // per rank: ZeRO paper's 2Ψ + 2Ψ + 12Ψ, sharded per stage
  std::vector<CommPhase> phases;
};

// Checks the ranges, naming the input (stage 0-3, Ψ > 0, bytes 2 or 4, k >= 1, tokens >= 1,
// 0 < compute, optimizer >= 0, gradient >= 0, optimizer + gradient <= compute, oversubscription >=
// 1, overlap_efficiency <= 1, collectives_per_pass >= 1, 0 <= stage3_kept_numel <= Ψ, link
// bandwidths > 0 and latencies >= 0, per-kind ones too; topology counts >= 1).
Status validate_throughput_inputs(const ThroughputInputs& inputs, const Topology& topology);

// REQUIRES: validate_throughput_inputs(inputs, topology).ok().
ThroughputPrediction predict_step(const ThroughputInputs& inputs, const Topology& topology);

nlohmann::ordered_json prediction_to_json(const ThroughputInputs& inputs,
                                          const ThroughputPrediction& prediction);

}  // namespace zero::sharding
