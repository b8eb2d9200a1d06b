// Sweep lines → samples → a per-kind least-squares fit of the link model (link_sweep.h).
#include "sharding/link_sweep.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace zero::sharding {
namespace {

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

// A finite number > 0, or nothing.
std::optional<double> positive_number(std::string_view field) {
  const std::string text(field);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v) || !(v > 0)) return std::nullopt;
  return v;
}

}  // namespace

StatusOr<std::vector<SweepSample>> parse_sweep(std::string_view text, std::string_view source) {
  std::vector<SweepSample> samples;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    const std::vector<std::string_view> f = split_fields(line);
    if (f.empty() || f[0].front() == '#') continue;
    if (f.size() != 5 || f[0] != "sweep") {
      return invalid_argument(
          "{}:{}: expected \"sweep KIND WORLD PAYLOAD_BYTES MEDIAN_MS\" (comm_sweep_bench's "
          "lines), got \"{}\"",
          source, line_no, line);
    }
    const std::optional<CollectiveKind> kind = parse_collective_kind(f[1]);
    if (!kind) {
      return invalid_argument(
          "{}:{}: unknown collective \"{}\" (all_reduce, reduce_scatter, "
          "all_gather)",
          source, line_no, f[1]);
    }
    const std::optional<double> world = positive_number(f[2]);
    if (!world || *world < 2 || *world != std::floor(*world) || *world > 1e6) {
      return invalid_argument("{}:{}: WORLD must be an integer >= 2, got \"{}\"", source, line_no,
                              f[2]);
    }
    const std::optional<double> bytes = positive_number(f[3]);
    const std::optional<double> ms = positive_number(f[4]);
    if (!bytes || !ms) {
      return invalid_argument(
          "{}:{}: PAYLOAD_BYTES and MEDIAN_MS must be finite numbers > 0, got "
          "\"{}\" and \"{}\"",
          source, line_no, f[3], f[4]);
    }
    const auto w = static_cast<int64_t>(*world);
    if (!samples.empty() && samples.front().world != w) {
      return invalid_argument(
          "{}:{}: world {} after world {}: one sweep file holds one world (the fit's formulas "
          "depend on it)",
          source, line_no, w, samples.front().world);
    }
    samples.push_back(SweepSample{*kind, w, *bytes, *ms * 1e-3});
  }
  if (samples.empty()) return invalid_argument("{}: no \"sweep\" lines", source);
  return samples;
}

StatusOr<Link> fit_link_to_sweep(const Link& base, const std::vector<SweepSample>& samples,
                                 std::string_view source) {
  Link link = base;
  // kAuto's all-reduce is min(ring, tree): fitted as the ring (collective_terms' convention).
  for (CollectiveKind kind : kCollectiveKinds) {
    // Normal equations of t = a·x + b·α over this kind's samples, x = 1 / bandwidth.
    double aa = 0, ab = 0, bb = 0, at = 0, bt = 0;
    int count = 0;
    double first_payload = 0;
    bool several_sizes = false;
    for (const SweepSample& s : samples) {
      if (s.kind != kind) continue;
      const CollectiveTerms terms =
          collective_terms(kind, s.payload_bytes, 1, s.world, base.algorithm);
      const double a = terms.bytes_per_bandwidth;
      const double b = terms.latency_steps;
      aa += a * a;
      ab += a * b;
      bb += b * b;
      at += a * s.seconds;
      bt += b * s.seconds;
      if (count == 0) first_payload = s.payload_bytes;
      several_sizes = several_sizes || s.payload_bytes != first_payload;
      ++count;
    }
    if (count == 0) continue;
    double x = 0;
    double alpha = 0;
    const double det = aa * bb - ab * ab;
    if (several_sizes && det > 1e-12 * aa * bb) {
      x = (at * bb - bt * ab) / det;
      alpha = (aa * bt - ab * at) / det;
    }
    if (!(alpha > 0) || !(x > 0)) {  // latency cannot be negative: the bandwidth alone
      alpha = 0;
      x = at / aa;
    }
    if (!(x > 0) || !std::isfinite(x)) {
      return invalid_argument("{}: {}: no positive bandwidth fits the samples", source,
                              collective_kind_name(kind));
    }
    link.by_kind[static_cast<size_t>(kind)] = LinkCost{1.0 / x, alpha};
  }
  return link;
}

}  // namespace zero::sharding
