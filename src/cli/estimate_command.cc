// `zero estimate`: DeepSpeed's ZeRO-2/3 model-states memory tables from a parameter count or a
// model config (HF config.json or a preset), or with --throughput the step time per stage at N GPUs
// (estimate_throughput.h). See docs/estimate.md and docs/scaling.md.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/estimate_throughput.h"
#include "model/model_config.h"
#include "sharding/memory_estimate.h"

namespace zero::cli {
namespace {

struct EstimateArgs {
  std::string params;
  std::string largest_layer_params;
  std::string model;
  int64_t num_gpus_per_node = 1;
  int64_t num_nodes = 1;
  double additional_buffer_factor = 1.5;
  int stage = 0;  // 0: both tables, stage 2 then stage 3
  bool json = false;
};

// A parameter count: "2783959040", "2_783_959_040", or an integral float such as "13e9".
StatusOr<int64_t> parse_count(const std::string& flag, const std::string& text) {
  std::string digits;
  for (char ch : text) {
    if (ch != '_' && ch != ',') digits += ch;
  }
  if (digits.empty()) return invalid_argument("{}: expected a parameter count, got \"\"", flag);
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != digits.size() || !std::isfinite(value) || value != std::floor(value) || value < 0 ||
      value > 9e15) {
    return invalid_argument("{}: expected a non-negative integer count, got \"{}\"", flag, text);
  }
  if (digits.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<int64_t>(std::stoll(digits));  // exact even past 2^53
  }
  return static_cast<int64_t>(value);
}

struct ModelCounts {
  std::string name;
  int64_t total_params = 0;
  int64_t largest_layer_params = 0;
  model::ModelConfig config;
};

StatusOr<ModelCounts> counts_from_model(const std::string& spec) {
  StatusOr<model::ModelConfig> config = spec.starts_with("preset:")
                                            ? model::preset_model_config(spec.substr(7))
                                            : model::load_model_config(spec);
  if (!config.ok()) return config.status();
  model::ParamCounts counts = model::count_params(*config);
  return ModelCounts{spec, counts.total, counts.largest_layer, *config};
}

StatusOr<sharding::EstimateSetup> build_setup(const EstimateArgs& args,
                                              std::optional<ModelCounts>& model_counts) {
  sharding::EstimateSetup setup;
  setup.num_gpus_per_node = args.num_gpus_per_node;
  setup.num_nodes = args.num_nodes;
  setup.additional_buffer_factor = args.additional_buffer_factor;
  if (!args.model.empty()) {
    ZERO_ASSIGN_OR_RETURN(ModelCounts counts, counts_from_model(args.model));
    setup.total_params = counts.total_params;
    setup.largest_layer_params = counts.largest_layer_params;
    model_counts = counts;
  } else {
    ZERO_ASSIGN_OR_RETURN(setup.total_params, parse_count("--params", args.params));
  }
  if (!args.largest_layer_params.empty()) {  // explicit L overrides the model's
    ZERO_ASSIGN_OR_RETURN(setup.largest_layer_params,
                          parse_count("--largest_layer_params", args.largest_layer_params));
  }
  if (args.stage != 2 && setup.largest_layer_params == 0) {
    return invalid_argument(
        "--largest_layer_params: required for stage 3 with --params (or pass --stage 2)");
  }
  for (int stage : {2, 3}) {
    if (args.stage == 0 || args.stage == stage) {
      Status valid = sharding::validate_estimate_setup(setup, stage);
      if (!valid.ok() && model_counts) {
        return valid.with_context(
            fmt::format("--model {} ({} parameters)", args.model, setup.total_params));
      }
      ZERO_RETURN_IF_ERROR(valid);
    }
  }
  return setup;
}

Status run_estimate(const EstimateArgs& args) {
  std::optional<ModelCounts> model_counts;
  ZERO_ASSIGN_OR_RETURN(sharding::EstimateSetup setup, build_setup(args, model_counts));
  nlohmann::ordered_json rows_json = nlohmann::ordered_json::array();
  std::string text;
  if (model_counts) {
    text += fmt::format("Model {}: {} params (tied weights once), largest layer {} params.\n\n",
                        model_counts->name, model_counts->total_params,
                        model_counts->largest_layer_params);
  }
  for (int stage : {2, 3}) {
    if (args.stage != 0 && args.stage != stage) continue;
    std::vector<sharding::EstimateRow> rows = sharding::estimate_all_rows(setup, stage);
    for (const sharding::EstimateRow& row : rows) {
      rows_json.push_back(sharding::estimate_row_to_json(row));
    }
    if (args.stage == 0) {
      text += fmt::format("{}ZeRO stage {} (estimate_zero{}_model_states_mem_needs_all_cold):\n",
                          stage == 3 ? "\n" : "", stage, stage);
    }
    text += sharding::format_estimate_table(setup, stage, rows);
  }
  if (args.json) {
    // One row per line: readable, and still a single JSON array.
    std::string out = "[\n";
    for (size_t i = 0; i < rows_json.size(); ++i) {
      out += "  " + rows_json[i].dump() + (i + 1 < rows_json.size() ? ",\n" : "\n");
    }
    out += "]\n";
    std::fputs(out.c_str(), stdout);
  } else {
    std::fputs(text.c_str(), stdout);
  }
  return ok_status();
}

// --throughput: Ψ (and the config, for FLOPs and units) from --model or --params; stages 0-3
// unless --stage names one.
Status run_throughput(const EstimateArgs& args, const ThroughputFlags& flags, bool stage_given) {
  if (!args.largest_layer_params.empty()) {
    return invalid_argument("--largest_layer_params: only for the memory tables, not --throughput");
  }
  ThroughputModelSource source;
  if (!args.model.empty()) {
    ZERO_ASSIGN_OR_RETURN(ModelCounts counts, counts_from_model(args.model));
    source = ThroughputModelSource{counts.name, counts.total_params, counts.config};
  } else {
    ZERO_ASSIGN_OR_RETURN(source.total_params, parse_count("--params", args.params));
    if (source.total_params <= 0) return invalid_argument("--params: must be > 0");
    source.name = "--params";
  }
  const std::vector<int> stages =
      stage_given ? std::vector<int>{args.stage} : std::vector<int>{0, 1, 2, 3};
  return run_throughput_estimate(flags, source, args.num_gpus_per_node, args.num_nodes, stages,
                                 args.json);
}

}  // namespace

void add_estimate_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EstimateArgs>();
  auto throughput = std::make_shared<ThroughputFlags>();
  CLI::App* sub = app.add_subcommand(
      "estimate",
      "ZeRO model-states memory estimator: DeepSpeed's estimate_zero2/zero3 tables (params, "
      "gradients and optimizer states only; no activations, buffers or CUDA context). \"GB\" in "
      "the table is GiB (2^30 bytes), printed as GB like DeepSpeed does.");
  auto* params = sub->add_option("--params", args->params,
                                 "total parameter count Ψ (tied weights once), e.g. 2783959040 "
                                 "or 13e9");
  auto* model = sub->add_option("--model", args->model,
                                "count Ψ and L from a model: DIR (with config.json), a "
                                "config.json path, or preset:NAME (gpt2 and Llama-family)");
  params->excludes(model);
  sub->add_option("--largest_layer_params", args->largest_layer_params,
                  "L: parameters of the largest single module (e.g. the token embedding); "
                  "required for stage 3 with --params, accepted and unused for stage 2; "
                  "overrides the model's L with --model");
  sub->add_option("--num_gpus_per_node", args->num_gpus_per_node, "GPUs per node")
      ->capture_default_str();
  sub->add_option("--num_nodes", args->num_nodes, "number of nodes")->capture_default_str();
  auto* buffer_factor =
      sub->add_option("--additional_buffer_factor", args->additional_buffer_factor,
                      "safety factor applied to the CPU numbers")
          ->capture_default_str();
  auto* stage = sub->add_option("--stage", args->stage,
                                "2 or 3; without it both tables are printed (stage 2, then stage "
                                "3); 0-3 with --throughput (default: all four)")
                    ->check(CLI::IsMember({0, 1, 2, 3}));
  sub->add_flag("--json", args->json,
                "print only a JSON array of rows {stage, offload_optimizer, [offload_param, "
                "zero_init (stage 3)], cpu_bytes, gpu_bytes} (bytes, not GiB); with --throughput "
                "one JSON object");
  add_throughput_flags(sub, *throughput);
  sub->callback([args, throughput, &exit_code, params, model, stage, buffer_factor] {
    if (params->count() == 0 && model->count() == 0) {
      std::fprintf(stderr, "error: zero estimate: pass --params N or --model DIR|preset:NAME\n");
      exit_code = 2;
      return;
    }
    Status status;
    if (throughput->enabled) {
      status = buffer_factor->count() > 0
                   ? invalid_argument(
                         "--additional_buffer_factor: only for the memory tables, "
                         "not --throughput")
                   : run_throughput(*args, *throughput, stage->count() > 0);
    } else if (stage->count() > 0 && args->stage < 2) {
      status = invalid_argument(
          "--stage: the memory tables are for stage 2 or 3 (0-3 with "
          "--throughput), got {}",
          args->stage);
    } else {
      status = check_throughput_flags_unused(*throughput);
      if (status.ok()) status = run_estimate(*args);
    }
    if (!status.ok()) {
      std::fprintf(stderr, "error: zero estimate: %s\n", status.message().c_str());
      exit_code = status.code() == StatusCode::kInvalidArgument ||
                          status.code() == StatusCode::kNotFound ||
                          status.code() == StatusCode::kUnimplemented
                      ? 2
                      : 1;
      return;
    }
    exit_code = 0;
  });
}

}  // namespace zero::cli
