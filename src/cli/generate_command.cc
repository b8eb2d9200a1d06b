// `zero generate`: sample text from a trained model (HF directory or preset). With a byte-level
// vocabulary (256) the prompt is text and the output is printed as text; otherwise prompts and
// outputs are token ids.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "comm/self_communicator.h"
#include "model/model_config.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/model_source.h"

namespace zero::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_tokens;  // "1,2,3"
  runtime::SamplingOptions sampling;
  bool ignore_eos = false;
};

void print_token(int32_t token, void* ctx) {
  const bool bytes = *static_cast<bool*>(ctx);
  if (bytes) {
    std::fputc(static_cast<unsigned char>(token), stdout);
  } else {
    std::printf(" %d", token);
  }
  std::fflush(stdout);
}

int run_generate(GenerateArgs& a) {
  auto source = runtime::ModelSource::open(a.model, a.sampling.seed);
  if (!source.ok()) {
    std::fprintf(stderr, "error: --model %s: %s\n", a.model.c_str(),
                 source.status().message().c_str());
    return 2;
  }
  const model::ModelConfig& mc = (*source)->config();
  bool bytes = mc.vocab_size == 256;
  std::vector<int32_t> tokens;
  if (!a.prompt_tokens.empty()) {
    std::vector<int64_t> ids;
    const std::string err = parse_id_list(a.prompt_tokens, mc.vocab_size, "--prompt_tokens", &ids);
    if (!err.empty()) {
      std::fprintf(stderr, "error: %s\n", err.c_str());
      return 2;
    }
    for (int64_t id : ids) tokens.push_back(static_cast<int32_t>(id));
    bytes = false;
  } else if (bytes) {
    for (unsigned char ch : a.prompt) tokens.push_back(ch);
  } else if (!a.prompt.empty()) {
    std::fprintf(stderr,
                 "error: --prompt needs a byte-level model (vocab_size 256); this one has %lld "
                 "tokens: pass --prompt_tokens with ids from your tokenizer\n",
                 static_cast<long long>(mc.vocab_size));
    return 2;
  }
  if (tokens.empty()) tokens.push_back(bytes ? '\n' : 0);

  // The model's EOS ids (generation_config.json, else config.json): generation stops there.
  if (!a.ignore_eos) {
    const nlohmann::json gen = model::generation_config_to_json(mc);
    auto eos = gen.find("eos_token_id");
    if (eos != gen.end()) {
      for (const nlohmann::json& id : eos->is_array() ? *eos : nlohmann::json::array({*eos})) {
        if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < mc.vocab_size) {
          a.sampling.stop_tokens.push_back(id.get<int32_t>());
        }
      }
    }
  }

  // Inference on one rank: the engine holds the weights (stage 0, no optimizer steps taken).
  runtime::EngineOptions o;
  o.model_config = mc;
  SelfCommunicator self;
  auto engine = runtime::Engine::create(o, (*source)->init_fn(), &self);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().message().c_str());
    return 1;
  }
  if (bytes) {
    std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  } else {
    for (int32_t t : tokens) std::printf(" %d", t);
  }
  const bool stopped = runtime::generate((*engine)->model(), (*engine)->params(), tokens,
                                         a.sampling, print_token, &bytes);
  std::printf("\n");
  if (stopped) std::fprintf(stderr, "zero generate: stopped at the end-of-sequence token\n");
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* g = app.add_subcommand(
      "generate",
      "sample text from a trained model (through a key/value cache; past the model's context "
      "length, at most 4096 positions, the oldest half of the context is dropped)");
  g->add_option("--model", a->model, "HF model directory (e.g. OUTPUT_DIR/final) or preset:NAME")
      ->required();
  g->add_option("--prompt", a->prompt, "prompt text (byte-level models)");
  g->add_option("--prompt_tokens,--prompt-tokens", a->prompt_tokens,
                "prompt as comma-separated token ids");
  g->add_option("--max_new_tokens,--max-new-tokens", a->sampling.max_new_tokens,
                "tokens to generate (default 100)")
      ->check(int_at_least(0));
  g->add_option("--temperature", a->sampling.temperature,
                "softmax temperature; 0 = greedy (default 1)")
      ->check(real_at_least(0));
  g->add_option("--top_k,--top-k", a->sampling.top_k, "sample among the k most likely (0 = all)")
      ->check(int_at_least(0));
  g->add_option("--seed", a->sampling.seed, "sampling seed (default 1)")->check(int_at_least(0));
  g->add_flag("--ignore_eos,--ignore-eos", a->ignore_eos,
              "keep generating past the model's end-of-sequence token");
  g->callback([a, &exit_code] { exit_code = run_generate(*a); });
}

}  // namespace zero::cli
