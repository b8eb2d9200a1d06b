// DeepSpeed's model-states memory estimators. The arithmetic mirrors the Python expression by
// expression (int products stay exact, float products round the same way, int() truncates), so
// the byte counts and the 2-decimal GiB strings equal DeepSpeed's.
#include "sharding/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace zero::sharding {
namespace {

// Python's int(x) for a finite double: truncation toward zero.
int64_t py_int(double x) { return static_cast<int64_t>(std::trunc(x)); }

// Python's int(a / b) for ints: true division (correctly rounded; exact in double while a, b
// < 2^53, which validate_estimate_setup guarantees), then truncation.
int64_t py_int_div(int64_t a, int64_t b) {
  return py_int(static_cast<double>(a) / static_cast<double>(b));
}

// Python's `total * max(int_factor, float_factor) * buffer`: max() keeps the int unless the float
// is strictly larger; an int factor keeps the product exact before the float multiply.
double times_max(int64_t total, int64_t int_factor, double float_factor, double buffer) {
  if (float_factor > static_cast<double>(int_factor)) {
    return static_cast<double>(total) * float_factor * buffer;
  }
  return static_cast<double>(total * int_factor) * buffer;
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / 1073741824.0);
}

}  // namespace

Status validate_estimate_setup(const EstimateSetup& s, int stage) {
  if (stage != 2 && stage != 3) return invalid_argument("--stage: must be 2 or 3, got {}", stage);
  if (s.total_params <= 0 || s.total_params > kMaxEstimateParams) {
    return invalid_argument("--params: must be in [1, {}], got {}", kMaxEstimateParams,
                            s.total_params);
  }
  if (stage == 3 && (s.largest_layer_params <= 0 || s.largest_layer_params > s.total_params)) {
    return invalid_argument(
        "--largest_layer_params: must be in [1, total params = {}] for stage 3, got {}",
        s.total_params, s.largest_layer_params);
  }
  if (s.num_gpus_per_node < 1 || s.num_gpus_per_node > 1'000'000) {
    return invalid_argument("--num_gpus_per_node: must be in [1, 1000000], got {}",
                            s.num_gpus_per_node);
  }
  if (s.num_nodes < 1 || s.num_nodes > 1'000'000) {
    return invalid_argument("--num_nodes: must be in [1, 1000000], got {}", s.num_nodes);
  }
  if (!(s.additional_buffer_factor > 0) || s.additional_buffer_factor > 1000) {
    return invalid_argument("--additional_buffer_factor: must be in (0, 1000], got {}",
                            s.additional_buffer_factor);
  }
  // Every integer product must stay below 2^53 so that its conversion to double is exact, as the
  // same product is in Python (whose ints do not overflow).
  const int64_t total_gpus = s.num_nodes * s.num_gpus_per_node;
  const __int128 biggest = static_cast<__int128>(s.total_params) *
                           std::max<int64_t>({18, 4 * s.num_gpus_per_node, 4 * total_gpus});
  if (biggest >= (static_cast<__int128>(1) << 53)) {
    return invalid_argument(
        "--params {} with {} GPUs: byte counts would exceed 2^53 and lose exactness",
        s.total_params, total_gpus);
  }
  return ok_status();
}

EstimateRow estimate_zero2_row(const EstimateSetup& s, bool offload_optimizer) {
  const int64_t psi = s.total_params;
  const int64_t total_gpus = s.num_nodes * s.num_gpus_per_node;
  const double f = s.additional_buffer_factor;
  EstimateRow row;
  row.stage = 2;
  row.offload_optimizer = offload_optimizer;
  if (offload_optimizer) {
    row.gpu_bytes = 2 * psi;
    row.cpu_bytes = py_int(static_cast<double>(psi * std::max<int64_t>(4 * total_gpus, 16)) * f);
  } else {
    // 2 = 16-bit params; 18 = 16-bit grads 2 + fp32 grads 4 + fp32 params 4 + Adam moments 8.
    row.gpu_bytes = 2 * psi + py_int_div(18 * psi, total_gpus);
    row.cpu_bytes = py_int(static_cast<double>(psi * 4 * s.num_gpus_per_node) * f);
  }
  return row;
}

EstimateRow estimate_zero3_row(const EstimateSetup& s, bool offload_optimizer, bool offload_param,
                               bool zero_init) {
  const int64_t psi = s.total_params;
  const int64_t layer = s.largest_layer_params;
  const int64_t gpus = s.num_gpus_per_node;
  const int64_t total_gpus = s.num_nodes * gpus;
  const double gpus_factor = 1.0 / static_cast<double>(s.num_nodes);
  const double f = s.additional_buffer_factor;
  // 16-bit gathered params + 16-bit grads of the largest layer.
  const int64_t largest_layer_bytes = 4 * layer;
  EstimateRow row;
  row.stage = 3;
  row.offload_optimizer = offload_optimizer;
  row.offload_param = offload_param;
  row.zero_init = zero_init;
  double cpu = 0;
  if (offload_optimizer) {
    if (offload_param) {
      row.gpu_bytes = largest_layer_bytes;
      cpu = zero_init ? static_cast<double>(psi * 18) * gpus_factor * f
                      : times_max(psi, 4 * gpus, 18 * gpus_factor, f);
    } else {
      row.gpu_bytes = largest_layer_bytes + py_int_div(2 * psi, total_gpus);
      cpu = zero_init ? static_cast<double>(psi * 16) * gpus_factor * f
                      : times_max(psi, 4 * gpus, 16 * gpus_factor, f);
    }
  } else {
    row.gpu_bytes = largest_layer_bytes + py_int_div(18 * psi, total_gpus);
    // With zero.Init each process materialises one fp32 layer on CPU; without, the whole model.
    cpu = zero_init ? static_cast<double>(layer * 4 * gpus) * f
                    : static_cast<double>(psi * 4 * gpus) * f;
  }
  row.cpu_bytes = py_int(cpu);
  return row;
}

std::vector<EstimateRow> estimate_all_rows(const EstimateSetup& s, int stage) {
  std::vector<EstimateRow> rows;
  for (bool offload_optimizer : {true, false}) {
    if (stage == 2) {
      rows.push_back(estimate_zero2_row(s, offload_optimizer));
      continue;
    }
    for (bool offload_param : {true, false}) {
      if (offload_param && !offload_optimizer) continue;
      for (bool zero_init : {true, false}) {
        rows.push_back(estimate_zero3_row(s, offload_optimizer, offload_param, zero_init));
      }
    }
  }
  return rows;
}

std::string format_estimate_table(const EstimateSetup& s, int stage,
                                  const std::vector<EstimateRow>& rows) {
  std::string out = "Estimated memory needed for params, optim states and gradients for a:\n";
  out += fmt::format("HW: Setup with {} {}, {} {} per node.\n", s.num_nodes,
                     s.num_nodes > 1 ? "nodes" : "node", s.num_gpus_per_node,
                     s.num_gpus_per_node > 1 ? "GPUs" : "GPU");
  // Python's int(total_params / 1e6): float division, then truncation.
  const int64_t total_m = py_int(static_cast<double>(s.total_params) / 1e6);
  if (stage == 2) {
    out += fmt::format("SW: Model with {}M total params.\n", total_m);
  } else {
    const int64_t layer_m = py_int(static_cast<double>(s.largest_layer_params) / 1e6);
    out += fmt::format("SW: Model with {}M total params, {}M largest layer params.\n", total_m,
                       layer_m);
  }
  out += "  per CPU  |  per GPU |   Options\n";
  for (const EstimateRow& row : rows) {
    // DeepSpeed pads "cpu" to the width of "none" (f'{OffloadDeviceEnum.cpu:4}').
    std::string options =
        fmt::format("offload_optimizer={}", row.offload_optimizer ? "cpu " : "none");
    if (stage == 3) {
      options = fmt::format("offload_param={}, {}, zero_init={}",
                            row.offload_param ? "cpu " : "none", options, row.zero_init ? 1 : 0);
    }
    out +=
        fmt::format(" {:>7}GB | {:>6}GB | {}\n", gib(row.cpu_bytes), gib(row.gpu_bytes), options);
  }
  return out;
}

nlohmann::ordered_json estimate_row_to_json(const EstimateRow& row) {
  nlohmann::ordered_json j;
  j["stage"] = row.stage;
  j["offload_optimizer"] = row.offload_optimizer ? "cpu" : "none";
  if (row.stage == 3) {
    j["offload_param"] = row.offload_param ? "cpu" : "none";
    j["zero_init"] = row.zero_init;
  }
  j["cpu_bytes"] = row.cpu_bytes;
  j["gpu_bytes"] = row.gpu_bytes;
  return j;
}

}  // namespace zero::sharding
