// metrics.jsonl writer.
#include "runtime/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace zero::runtime {

namespace {
// JSON has no inf/NaN: print them as null (a skipped step's norm may be non-finite).
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  // Shortest round-trip form, always with a fraction or exponent so it reads back as a float.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string metrics_json_line(const StepMetrics& m) {
  return fmt::format(
      "{{\"step\": {}, \"loss\": {}, \"lr\": {}, \"grad_norm\": {}, \"loss_scale\": {}, "
      "\"skipped\": {}, \"tokens\": {}, \"elapsed_s\": {}}}",
      m.step, json_number(m.loss), json_number(m.lr), json_number(m.grad_norm),
      json_number(m.loss_scale), m.skipped ? "true" : "false", m.tokens, json_number(m.elapsed_s));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

Status MetricsWriter::open(const std::string& path, bool truncate) {
  if (file_) std::fclose(file_);
  path_ = path;
  file_ = std::fopen(path.c_str(), truncate ? "w" : "a");
  if (!file_) return io_error("{}: cannot open for writing: {}", path, std::strerror(errno));
  return ok_status();
}

Status MetricsWriter::write(const StepMetrics& m) {
  if (!file_) return failed_precondition("metrics writer is not open");
  std::string line = metrics_json_line(m);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return io_error("{}: write failed: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

}  // namespace zero::runtime
