// A link's cost per collective kind, fitted to a measured sweep of collective times against
// payload size (bench/comm_sweep_bench's lines): what `zero estimate --throughput
// --interconnect_sweep FILE` reads (docs/scaling.md "Links").
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sharding/throughput_model.h"

namespace zero::sharding {

// One measured collective: `seconds` per call of `kind` over `world` ranks moving `payload_bytes`
// (CommStats' accounting: all_reduce the buffer, reduce_scatter the input, all_gather the output).
struct SweepSample {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int64_t world = 0;
  double payload_bytes = 0;
  double seconds = 0;
};

// Parses comm_sweep_bench's output: one `sweep KIND WORLD PAYLOAD_BYTES MEDIAN_MS` line per
// sample; blank lines and lines starting with '#' are skipped. Anything else, a KIND other than
// all_reduce / reduce_scatter / all_gather, WORLD < 2, a payload or time that is not a finite
// number > 0, samples of different worlds, or no sample at all is refused, naming
// `source`:line.
StatusOr<std::vector<SweepSample>> parse_sweep(std::string_view text, std::string_view source);

// `base` with by_kind set for every kind the samples hold: bandwidth and latency fitted by least
// squares in seconds (so the large messages a step is made of weigh most) to
// collective_terms(kind, payload, 1, world, base.algorithm). A fit whose latency comes out
// negative (or a kind measured at one payload size) keeps latency 0 and fits the bandwidth alone.
// Kinds without samples keep base's pair. Refused (naming `source` and the kind) when no positive
// bandwidth fits. REQUIRES: samples from parse_sweep (one world, values > 0).
StatusOr<Link> fit_link_to_sweep(const Link& base, const std::vector<SweepSample>& samples,
                                 std::string_view source);

}  // namespace zero::sharding
