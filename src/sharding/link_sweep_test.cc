// Tests for the sweep parser (errors name file:line) and the per-kind least-squares fit: samples
// made from known link costs with collective_terms' formulas are fitted back to those costs.
#include "sharding/link_sweep.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

namespace zero::sharding {
namespace {

// comm_sweep_bench lines for `kind` at `world` from a known (bandwidth, latency), fp32 payloads of
// 256 KiB to 64 MiB.
std::string sweep_lines(CollectiveKind kind, int64_t world, LinkAlgorithm algorithm,
                        LinkCost cost) {
  std::string text;
  for (double kib : {256.0, 1024.0, 4096.0, 16384.0, 65536.0}) {
    const double bytes = kib * 1024;
    const CollectiveTerms t = collective_terms(kind, bytes, 1, world, algorithm);
    const double ms = 1e3 * (t.bytes_per_bandwidth / cost.bandwidth_bytes_per_s +
                             t.latency_steps * cost.latency_s);
    text +=
        fmt::format("sweep {} {} {:.0f} {:.9f}\n", collective_kind_name(kind), world, bytes, ms);
  }
  return text;
}

TEST(LinkSweep, FitRecoversEachKindsBandwidthAndLatency) {
  for (LinkAlgorithm algorithm : {LinkAlgorithm::kRing, LinkAlgorithm::kStaged}) {
    const std::string text =
        "# tcp, world 4\n\n" +
        sweep_lines(CollectiveKind::kAllReduce, 4, algorithm, {0.6e9, 480e-6}) +
        sweep_lines(CollectiveKind::kReduceScatter, 4, algorithm, {0.5e9, 700e-6}) +
        sweep_lines(CollectiveKind::kAllGather, 4, algorithm, {1.1e9, 370e-6});
    StatusOr<std::vector<SweepSample>> samples = parse_sweep(text, "tcp4.txt");
    ASSERT_TRUE(samples.ok()) << samples.status().to_string();
    EXPECT_EQ(samples->size(), 15u);
    Link base{"tcp", 1.2e9, 240e-6, algorithm, true, true, {}};
    StatusOr<Link> link = fit_link_to_sweep(base, *samples, "tcp4.txt");
    ASSERT_TRUE(link.ok()) << link.status().to_string();
    const double want[3][2] = {{0.6e9, 480e-6}, {0.5e9, 700e-6}, {1.1e9, 370e-6}};
    for (CollectiveKind kind : kCollectiveKinds) {
      const LinkCost cost = link->cost(kind);
      const auto i = static_cast<size_t>(kind);
      EXPECT_NEAR(cost.bandwidth_bytes_per_s, want[i][0], want[i][0] * 1e-6)
          << collective_kind_name(kind) << " " << link_algorithm_name(algorithm);
      EXPECT_NEAR(cost.latency_s, want[i][1], want[i][1] * 1e-4) << collective_kind_name(kind);
    }
    EXPECT_EQ(link->bandwidth_bytes_per_s, 1.2e9);  // the link's own pair stays
  }
}

TEST(LinkSweep, MissingKindsKeepTheLinkAndNegativeLatencyFallsBackToBandwidthAlone) {
  // Ring all_gather at world 2 (1/2·B / bw): 1 GB/s exactly plus a noisy small message that a
  // two-parameter fit would explain with a negative latency.
  const std::string text =
      "sweep all_gather 2 1000000 0.5\n"
      "sweep all_gather 2 2000000 1.0\n"
      "sweep all_gather 2 1000 0.0001\n";
  StatusOr<std::vector<SweepSample>> samples = parse_sweep(text, "ag.txt");
  ASSERT_TRUE(samples.ok());
  Link base{"custom", 3e9, 5e-6, LinkAlgorithm::kRing, false, false, {}};
  StatusOr<Link> link = fit_link_to_sweep(base, *samples, "ag.txt");
  ASSERT_TRUE(link.ok());
  const LinkCost ag = link->cost(CollectiveKind::kAllGather);
  EXPECT_EQ(ag.latency_s, 0.0);
  // Least squares of t = (B/2)·x through the origin: x = Σ a·t / Σ a².
  const double a[] = {5e5, 1e6, 500}, t[] = {5e-4, 1e-3, 1e-7};
  const double x =
      (a[0] * t[0] + a[1] * t[1] + a[2] * t[2]) / (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
  EXPECT_NEAR(ag.bandwidth_bytes_per_s, 1 / x, 1e-3);
  EXPECT_EQ(link->cost(CollectiveKind::kAllReduce).bandwidth_bytes_per_s, 3e9);
  EXPECT_FALSE(link->by_kind[static_cast<size_t>(CollectiveKind::kReduceScatter)].has_value());
}

TEST(LinkSweep, BadLinesAreRefusedNamingFileAndLine) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"sweep all_reduce 2 100 1\nhello\n", "s.txt:2: expected \"sweep KIND WORLD"},
      {"sweep broadcast 2 100 1\n", "s.txt:1: unknown collective \"broadcast\""},
      {"sweep all_reduce 1 100 1\n", "s.txt:1: WORLD must be an integer >= 2, got \"1\""},
      {"sweep all_reduce 2.5 100 1\n", "s.txt:1: WORLD must be an integer"},
      {"sweep all_reduce 2 -100 1\n", "s.txt:1: PAYLOAD_BYTES and MEDIAN_MS must be finite"},
      {"sweep all_reduce 2 100 nan\n", "s.txt:1: PAYLOAD_BYTES and MEDIAN_MS must be finite"},
      {"sweep all_reduce 2 100 1 extra\n", "s.txt:1: expected"},
      {"sweep all_reduce 2 100 1\nsweep all_reduce 4 100 1\n", "s.txt:2: world 4 after world 2"},
      {"# nothing\n\n", "s.txt: no \"sweep\" lines"},
  };
  for (const Case& c : cases) {
    StatusOr<std::vector<SweepSample>> samples = parse_sweep(c.text, "s.txt");
    ASSERT_FALSE(samples.ok()) << c.text;
    EXPECT_NE(samples.status().message().find(c.want), std::string::npos)
        << samples.status().message();
  }
}

}  // namespace
}  // namespace zero::sharding
