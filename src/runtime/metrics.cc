// metrics.jsonl writer.
#include "runtime/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "core/storage.h"

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
  std::string tail;
  if (m.eval_loss) tail += fmt::format(", \"eval_loss\": {}", json_number(*m.eval_loss));
  if (m.eval_ppl) tail += fmt::format(", \"eval_ppl\": {}", json_number(*m.eval_ppl));
  // Added fields go after the original ones (readers of the first set are unaffected).
  auto add_real = [&tail](const char* key, const std::optional<double>& v) {
    if (v) tail += fmt::format(", \"{}\": {}", key, json_number(*v));
  };
  auto add_int = [&tail](const char* key, const std::optional<int64_t>& v) {
    if (v) tail += fmt::format(", \"{}\": {}", key, *v);
  };
  add_real("step_s", m.step_s);
  add_real("tokens_per_s", m.tokens_per_s);
  add_real("mfu", m.mfu);
  add_int("gpu_memory_used_bytes", m.gpu_memory_used_bytes);
  add_int("gpu_memory_peak_bytes", m.gpu_memory_peak_bytes);
  add_int("host_rss_bytes", m.host_rss_bytes);
  add_int("host_rss_peak_bytes", m.host_rss_peak_bytes);
  return fmt::format(
      "{{\"step\": {}, \"loss\": {}, \"lr\": {}, \"grad_norm\": {}, \"loss_scale\": {}, "
      "\"skipped\": {}, \"tokens\": {}, \"elapsed_s\": {}{}}}",
      m.step, json_number(m.loss), json_number(m.lr), json_number(m.grad_norm),
      json_number(m.loss_scale), m.skipped ? "true" : "false", m.tokens, json_number(m.elapsed_s),
      tail);
}

std::string eval_on_start_json_line(double eval_loss, double eval_ppl) {
  return fmt::format("{{\"step\": 0, \"eval_loss\": {}, \"eval_ppl\": {}}}", json_number(eval_loss),
                     json_number(eval_ppl));
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

Status MetricsWriter::write(const StepMetrics& m) { return write_line(metrics_json_line(m)); }

Status MetricsWriter::write_line(const std::string& text) {
  if (!file_) return failed_precondition("metrics writer is not open");
  std::string line = text + '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return io_error("{}: write failed: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

Status MetricsWriter::sync() {
  if (!file_) return ok_status();
  if (std::fflush(file_) != 0 || ::fdatasync(::fileno(file_)) != 0) {
    return io_error("{}: sync failed: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

StatusOr<MetricsTruncation> truncate_metrics(const std::string& path, int64_t last_step) {
  MetricsTruncation out;
  if (!std::filesystem::exists(path)) {
    out.steps_missing = last_step;
    out.first_missing = last_step > 0 ? 1 : 0;
    return out;
  }
  ZERO_ASSIGN_OR_RETURN(std::string text, read_file(*default_storage(), path));
  std::map<int64_t, std::string> by_step;  // the last line written for each step
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") ||
        !j["step"].is_number_integer()) {
      continue;  // a torn line from a crash
    }
    const int64_t step = j["step"].get<int64_t>();
    if (step >= 0 && step <= last_step) by_step[step] = std::move(line);
  }
  std::string kept;
  for (const auto& [step, line] : by_step) kept += line + "\n";
  out.lines_kept = static_cast<int64_t>(by_step.size()) - static_cast<int64_t>(by_step.count(0));
  out.steps_missing = last_step - out.lines_kept;
  for (int64_t s = 1; s <= last_step && out.steps_missing > 0; ++s) {
    if (!by_step.count(s)) {
      out.first_missing = s;
      break;
    }
  }
  ZERO_RETURN_IF_ERROR(write_file_atomically(*default_storage(), path, kept));
  return out;
}

}  // namespace zero::runtime
