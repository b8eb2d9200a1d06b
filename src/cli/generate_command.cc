// `zero generate`: sample text from a trained model (HF directory or preset). A model directory
// with a tokenizer (tokenizer.json or tokenizer.model) takes the prompt as text, encoded with the
// tokenizer's BOS as HF's tokenizer(prompt) would, and prints the continuation as text while it is
// generated; a byte-level vocabulary (256) without one does the same with bytes; otherwise prompts
// and outputs are token ids. `--chat MESSAGE` renders one user turn through the tokenizer's chat
// template with the generation prompt, as transformers' apply_chat_template(messages,
// add_generation_prompt=True), prints the reply alone and stops at the template's end of turn.
// `--device cuda` runs the forwards on the GPU's model (runtime/device_generator.h) through its
// key/value cache (--no_kv_cache: a whole forward per token); sampling stays on the host either
// way. The speed goes to stderr at the end: new tokens per second, and the first token's latency
// (the prompt's prefill) apart from the decode steps after it.
// `--prompts_file F.jsonl` generates for many prompts at once, batched (runtime::generate_batch:
// up to --batch_size sequences through one forward per step), each line's result written to
// --output as its sequence finishes (cli/completion_writer.h).
// `--offload_param cpu|nvme` (ZeRO-Inference, cli/weight_stream_flags.h) streams the blocks through
// a few GPU slots (or, --device cpu with nvme, host slots) and `--max_gpu_memory` plans the GPU's
// memory within a budget; the placement goes to stderr in one line.
// Under a launcher with several ranks it is stage-3 inference: each rank holds a shard of the
// weights and gathers them as the model uses them (CPU ranks: runtime/gathered_params.h; GPU
// ranks, one GPU each: the blocks partitioned over the GPUs and all-gathered one block ahead,
// runtime/device_generator.h); every rank generates alike and rank 0 alone prints and writes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/completion_writer.h"
#include "cli/flag_checks.h"
#include "cli/weight_stream_flags.h"
#include "cli/world.h"
#include "core/device.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "runtime/device_generator.h"
#include "runtime/generate.h"
#include "runtime/model_source.h"
#include "runtime/model_weights.h"
#include "runtime/prompts_file.h"
#include "runtime/token_agreement.h"
#include "text/chat_template.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"

namespace zero::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_tokens;  // "1,2,3"
  std::string chat;           // one user message
  // Which of --prompt / --prompt_tokens / --chat were given (an empty --prompt counts).
  bool has_prompt = false, has_prompt_tokens = false, has_chat = false;
  runtime::SamplingOptions sampling;
  bool ignore_eos = false;
  std::string device = "cpu";
  bool no_kv_cache = false;
  std::string prompts_file;  // JSONL, one prompt a line (batch mode)
  std::string output;        // batch mode's JSONL results; "-" or empty: stdout
  int64_t batch_size = 8;    // sequences at once in batch mode
  WeightStreamFlags stream;  // --offload_param, --nvme_path, --max_gpu_memory, --max_host_memory
};

// Where generated tokens go: decoded text (tokenizer), raw bytes (byte-level) or ids.
struct Printer {
  bool bytes = false;
  std::optional<text::StreamDecoder> stream;
  Status status;  // the first decode error
  // The speed report: when generation started, when the first new token came, how many came.
  std::chrono::steady_clock::time_point start, first;
  int64_t new_tokens = 0;
};

void print_token(int32_t token, void* ctx) {
  Printer& p = *static_cast<Printer*>(ctx);
  if (p.new_tokens++ == 0) p.first = std::chrono::steady_clock::now();
  if (p.stream) {
    auto piece = p.stream->push(token);
    if (!piece.ok()) {
      if (p.status.ok()) p.status = piece.status();
      return;
    }
    std::fwrite(piece->data(), 1, piece->size(), stdout);
  } else if (p.bytes) {
    std::fputc(static_cast<unsigned char>(token), stdout);
  } else {
    std::printf(" %d", token);
  }
  std::fflush(stdout);
}

// The model directory's tokenizer, or nullopt when it has none (presets, ids-only models).
StatusOr<std::optional<text::Tokenizer>> open_tokenizer(const std::string& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model, ec) || (!fs::exists(fs::path(model) / "tokenizer.json", ec) &&
                                       !fs::exists(fs::path(model) / "tokenizer.model", ec))) {
    return std::optional<text::Tokenizer>();
  }
  ZERO_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::load(model));
  return std::optional<text::Tokenizer>(std::move(tok));
}

// The ids of `message` as one user turn of `tok`'s chat template followed by the generation
// prompt (HF: apply_chat_template([{"role": "user", ...}], add_generation_prompt=True,
// tokenize=True), which encodes the text without the tokenizer's special tokens: the template
// places BOS itself). Adds the template's end-of-turn token to `stop_tokens` when the tokenizer has
// it.
StatusOr<std::vector<int32_t>> chat_prompt_ids(const text::Tokenizer& tok,
                                               const std::string& message,
                                               std::vector<int32_t>* stop_tokens) {
  ZERO_ASSIGN_OR_RETURN(text::ChatTemplate chat, text::ChatTemplate::for_tokenizer(tok));
  ZERO_ASSIGN_OR_RETURN(std::vector<text::ChatSegment> segments,
                        chat.render({{"user", message}}, /*add_generation_prompt=*/true));
  std::string rendered;
  for (const text::ChatSegment& seg : segments) rendered += seg.text;
  if (auto end_of_turn = chat.end_of_turn_token()) {
    if (auto id = tok.token_to_id(*end_of_turn)) stop_tokens->push_back(*id);
  }
  return tok.encode(rendered, /*add_special_tokens=*/false);
}

// One `zero generate` run's state, filled in by the steps below in order. Members are destroyed
// in reverse: the generators before the communicator, the printer's stream decoder (which reads
// the tokenizer) before the tokenizer.
struct Generation {
  // Several ranks (mpirun / zero launch): stage-3 inference, each rank holding a shard of every
  // unit (CPU ranks) or block (GPU ranks); every rank runs the same generation, rank 0 (the lead)
  // alone prints and writes.
  World world;
  // Several ranks: every step's new tokens made rank 0's (a.sampling.sync), so no rank's tie broken
  // differently splits the ranks' forwards.
  std::unique_ptr<runtime::TokenAgreement> agreement;
  bool lead = true;
  Device device = Device::kCpu;
  std::unique_ptr<runtime::ModelSource> source;
  const model::ModelConfig* config = nullptr;  // source's
  std::optional<text::Tokenizer> tokenizer;    // the model directory's, if it has one
  Printer printer;
  std::vector<int32_t> tokens;       // the prompt; generation appends the new tokens
  int64_t prompt_tokens = 0;         // the prompt's length
  std::vector<int32_t> end_of_turn;  // --chat: the template's end-of-turn token, if any
  WeightStreamSettings stream;       // the ZeRO-Inference flags
  PlacedWeights placed;              // host weights, device or stream
  runtime::DeviceGenerator* on_device = nullptr;  // --device cuda: placed.on_device
  std::unique_ptr<model::Transformer> model;      // the CPU model (--device cpu)
  bool stopped = false;                           // at a stop token
  std::chrono::steady_clock::time_point end;
};

// Each step returns the exit code to end with after printing its error, or 0 to go on.

// Stage-3 inference: a world of several ranks.
bool several_ranks(const Generation& g) {
  return g.world.comm != nullptr && g.world.comm->world_size() > 1;
}

// A failure on one of several GPU ranks ends the whole job: its peers would otherwise wait in the
// next gather until the collective timeout. Returns `code` on one rank.
int end_ranks(Generation& g, int code) {
  if (several_ranks(g) && g.device != Device::kCpu) g.world.comm->abort_job(code);
  return code;
}

// The prompt flags exclude each other; the device and the ZeRO-Inference flags must be known.
// Before anything is printed.
int check_flags(const GenerateArgs& a, Generation& g) {
  const bool batch = !a.prompts_file.empty();
  if (a.has_chat + a.has_prompt + a.has_prompt_tokens > 1) {
    std::fprintf(stderr,
                 "error: --chat, --prompt and --prompt_tokens exclude each other: give one\n");
    return 2;
  }
  if (batch && a.has_chat + a.has_prompt + a.has_prompt_tokens > 0) {
    std::fprintf(stderr,
                 "error: --prompts_file excludes --chat, --prompt and --prompt_tokens (each line "
                 "holds its prompt)\n");
    return 2;
  }
  if (!batch && !a.output.empty()) {
    std::fprintf(stderr,
                 "error: --output is for --prompts_file (the single prompt streams to "
                 "stdout)\n");
    return 2;
  }
  if (batch && a.no_kv_cache) {
    std::fprintf(stderr, "error: --no_kv_cache is for a single prompt, not --prompts_file\n");
    return 2;
  }
  const StatusOr<Device> device = parse_device_flag(a.device);
  if (!device.ok()) {
    std::fprintf(stderr, "error: %s\n", device.status().message().c_str());
    return 2;
  }
  g.device = *device;
  auto stream = parse_weight_stream_flags(a.stream, g.device);
  if (!stream.ok()) {
    std::fprintf(stderr, "error: %s\n", stream.status().message().c_str());
    return 2;
  }
  g.stream = *stream;
  return 0;
}

// The weights' dtype on g.device: a GPU holds an fp32 copy unless the ZeRO-Inference flags are
// given or the blocks are partitioned over several GPU ranks (then the checkpoint's dtype: half
// the bytes to hold, stream and gather for bf16); the CPU the checkpoint's dtype (its model widens
// each unit exactly as it reads it).
DType weights_dtype(const Generation& g) {
  return g.device == Device::kCpu || g.stream.given || several_ranks(g) ? g.source->stored_dtype()
                                                                        : DType::kF32;
}

// A budget too small for the weights alone (two block slots beside the resident units, nothing
// counted for the cache yet) is refused before the device is probed; then the device must be
// usable.
int check_budget_and_device(const Generation& g) {
  const int world_size = several_ranks(g) ? g.world.comm->world_size() : 1;
  const int rank = several_ranks(g) ? g.world.comm->rank() : 0;
  auto plan = plan_weights(g.stream, g.device, *g.config, weights_dtype(g), 0, world_size, rank);
  if (!plan.ok()) {
    std::fprintf(stderr, "error: %s\n", plan.status().message().c_str());
    return 2;
  }
  const Status usable = check_device_usable(g.device);
  if (!usable.ok()) {
    std::fprintf(stderr, "error: %s\n", usable.message().c_str());
    return 2;
  }
  return 0;
}

// The model's config and weights source, and its tokenizer (no larger than the vocabulary).
int open_model(const GenerateArgs& a, Generation& g) {
  auto source = runtime::ModelSource::open(a.model, a.sampling.seed);
  if (!source.ok()) {
    std::fprintf(stderr, "error: --model %s: %s\n", a.model.c_str(),
                 source.status().message().c_str());
    return 2;
  }
  g.source = std::move(*source);
  g.config = &g.source->config();
  const model::ModelConfig& mc = *g.config;
  auto tokenizer = open_tokenizer(a.model);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: --model %s: %s\n", a.model.c_str(),
                 tokenizer.status().message().c_str());
    return 2;
  }
  g.tokenizer = std::move(*tokenizer);
  if (g.tokenizer && g.tokenizer->vocab_size() > mc.vocab_size) {
    std::fprintf(stderr,
                 "error: --model %s: the tokenizer (%s) has %lld tokens, more than the model's "
                 "vocab_size %lld\n",
                 a.model.c_str(), g.tokenizer->source().c_str(),
                 static_cast<long long>(g.tokenizer->vocab_size()),
                 static_cast<long long>(mc.vocab_size));
    return 2;
  }
  return 0;
}

// A text prompt's ids as HF's tokenizer(prompt): the special prefix (BOS) the tokenizer adds, not
// its suffix (an EOS after the prompt would ask the model to start a new document). An empty
// prompt starts from BOS (else EOS: GPT-2's <|endoftext|> plays both parts).
StatusOr<std::vector<int32_t>> encode_text(const text::Tokenizer& tok, const std::string& prompt) {
  std::vector<int32_t> tokens = tok.special_prefix_ids();
  ZERO_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(prompt, /*add_special_tokens=*/false));
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  if (tokens.empty() && tok.bos_id()) tokens.push_back(*tok.bos_id());
  if (tokens.empty() && tok.eos_id()) tokens.push_back(*tok.eos_id());
  return tokens;
}

// The prompt's token ids from --chat, --prompt_tokens or --prompt, and how the output is printed
// (decoded text, bytes or ids).
int encode_prompt(const GenerateArgs& a, Generation& g) {
  const model::ModelConfig& mc = *g.config;
  Printer& printer = g.printer;
  std::vector<int32_t>& tokens = g.tokens;
  printer.bytes = !g.tokenizer && mc.vocab_size == 256;
  if (a.has_chat) {
    if (!g.tokenizer) {
      std::fprintf(stderr,
                   "error: --chat needs the model directory's tokenizer (tokenizer.json or "
                   "tokenizer.model, with a chat_template in tokenizer_config.json); --model %s "
                   "has none\n",
                   a.model.c_str());
      return 2;
    }
    auto ids = chat_prompt_ids(*g.tokenizer, a.chat, &g.end_of_turn);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: --chat: %s\n", ids.status().message().c_str());
      return 2;
    }
    tokens = std::move(*ids);
    printer.stream.emplace(*g.tokenizer, tokens);
  } else if (!a.prompt_tokens.empty()) {
    std::vector<int64_t> ids;
    const std::string err = parse_id_list(a.prompt_tokens, mc.vocab_size, "--prompt_tokens", &ids);
    if (!err.empty()) {
      std::fprintf(stderr, "error: %s\n", err.c_str());
      return 2;
    }
    for (int64_t id : ids) tokens.push_back(static_cast<int32_t>(id));
    printer.bytes = false;
  } else if (g.tokenizer) {
    auto ids = encode_text(*g.tokenizer, a.prompt);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: --prompt: %s\n", ids.status().message().c_str());
      return 2;
    }
    tokens = std::move(*ids);
    printer.stream.emplace(*g.tokenizer, tokens);
  } else if (printer.bytes) {
    for (unsigned char ch : a.prompt) tokens.push_back(ch);
  } else if (!a.prompt.empty()) {
    std::fprintf(stderr,
                 "error: --prompt needs a tokenizer (tokenizer.json or tokenizer.model in the "
                 "model directory) or a byte-level model (vocab_size 256); this one has %lld "
                 "tokens and no tokenizer: pass --prompt_tokens with ids from your tokenizer\n",
                 static_cast<long long>(mc.vocab_size));
    return 2;
  }
  if (tokens.empty()) tokens.push_back(printer.bytes ? '\n' : 0);
  return 0;
}

// The ids generation stops at, into a.sampling.stop_tokens (none with --ignore_eos): the model's
// EOS ids (generation_config.json, else config.json), else the tokenizer's; with --chat also the
// template's end of turn, said on stderr.
void add_stop_tokens(GenerateArgs& a, const Generation& g) {
  if (a.ignore_eos) return;
  const model::ModelConfig& mc = *g.config;
  const nlohmann::json gen = model::generation_config_to_json(mc);
  auto eos = gen.find("eos_token_id");
  if (eos != gen.end()) {
    for (const nlohmann::json& id : eos->is_array() ? *eos : nlohmann::json::array({*eos})) {
      if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < mc.vocab_size) {
        a.sampling.stop_tokens.push_back(id.get<int32_t>());
      }
    }
  }
  // A model config without one (e.g. a small model trained from scratch): the tokenizer's EOS
  // (tokenizer_config.json's eos_token), when the prompt is text. A chat turn also ends there
  // (Mistral's and Zephyr's templates close replies with eos_token).
  auto& stop = a.sampling.stop_tokens;
  const bool text_prompts = g.printer.stream || (!a.prompts_file.empty() && g.tokenizer);
  if ((stop.empty() || a.has_chat) && text_prompts && g.tokenizer->eos_id() &&
      std::find(stop.begin(), stop.end(), *g.tokenizer->eos_id()) == stop.end()) {
    stop.push_back(*g.tokenizer->eos_id());
  }
  stop.insert(stop.end(), g.end_of_turn.begin(), g.end_of_turn.end());
  if (a.has_chat) {
    std::string ids;
    for (int32_t id : stop) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    if (g.lead)
      std::fprintf(stderr, "zero generate: the reply stops at token id%s %s%s\n",
                   stop.size() == 1 ? "" : "s", ids.empty() ? "(none)" : ids.c_str(),
                   g.end_of_turn.empty() ? "" : " (end of turn and end of sequence)");
  }
}

// The key/value cache's dtype on a GPU: a 16-bit checkpoint's keys and values are cached in bf16
// (half the cache's bytes; its tokens may then differ from the CPU's, which caches fp32, beyond
// float ties).
DType gpu_cache_dtype(const Generation& g) {
  return g.source->stored_dtype() != DType::kF32 ? DType::kBF16 : DType::kF32;
}

// The lead's line on where the model runs: the GPU and how each token is computed.
void say_device(const GenerateArgs& a, const Generation& g) {
  if (!g.lead) return;
  std::fprintf(stderr, "zero generate: on %s; %s\n", probe_cuda().description.c_str(),
               a.no_kv_cache ? "a whole forward per token (--no_kv_cache)"
               : gpu_cache_dtype(g) == DType::kBF16
                   ? "a bf16 key/value cache on the GPU (16-bit checkpoint)"
                   : "a key/value cache on the GPU");
}

// Stage-3 inference on several GPU ranks: each rank holds its shard of every block on its GPU, in
// pinned host memory or its own swap file (offload_param; in the checkpoint's dtype) and the
// embeddings, final norm and head whole; the blocks are gathered one or more ahead of the one
// computing, as many slots as --max_gpu_memory holds beside `other_bytes` (the cache and scratch)
// per rank (cli::plan_weights with the world, cli::place_partitioned_weights). Collective.
int load_partitioned_weights(const GenerateArgs& a, Generation& g, int64_t other_bytes) {
  Communicator& comm = *g.world.comm;
  const DType dtype = weights_dtype(g);
  // Every rank plans alike (the shards are equally long), so every rank refuses alike.
  auto plan = plan_weights(g.stream, g.device, *g.config, dtype, other_bytes, comm.world_size(),
                           comm.rank());
  if (!plan.ok()) {
    std::fprintf(stderr, "error: %s\n", plan.status().message().c_str());
    return 2;
  }
  auto placed = place_partitioned_weights(comm, *plan, g.stream, *g.config, dtype,
                                          g.source->init_fn(), gpu_cache_dtype(g), {});
  if (!placed.ok()) {
    std::fprintf(stderr, "[rank %d] error: --device %s: %s\n", comm.rank(), a.device.c_str(),
                 placed.status().message().c_str());
    return end_ranks(g, 1);
  }
  g.placed = std::move(*placed);
  g.on_device = g.placed.on_device.get();
  if (g.lead) {
    std::fprintf(stderr,
                 "zero generate: %d GPU ranks, gathering over %s (ZeRO stage-3 inference); %s; "
                 "%lld bytes of host memory for the weights per rank\n",
                 comm.world_size(), g.on_device->gather_transport().c_str(),
                 plan->describe(g.device).c_str(),
                 static_cast<long long>(planned_host_bytes(*plan, g.device)));
  }
  say_device(a, g);
  return 0;
}

// Inference on one rank: the weights once, in host memory, in the dtype they are stored in (a
// bf16 checkpoint stays bf16 on the CPU; the CPU model widens each unit as it reads it, so the
// tokens are those of an fp32 copy). A device model gets a copy of them, from fp32 host values
// unless the ZeRO-Inference flags are given (weights_dtype). Planned first (plan_weights) for
// appends of up to `rows` rows over `slots` sequences of `capacity` positions each, the plan said
// in one line on stderr when the flags are given.
int load_weights(const GenerateArgs& a, Generation& g, int64_t capacity, int64_t slots,
                 int64_t rows) {
  if (several_ranks(g) && g.device == Device::kCpu) {
    // Stage-3 inference: this rank reads only its shard of each unit (the blocks' into its swap
    // file with --offload_param nvme); units are gathered per use.
    auto placed = place_cpu_shards(*g.world.comm, g.stream, *g.config, g.source->init_fn());
    if (!placed.ok()) {
      std::fprintf(stderr, "[rank %d] error: %s\n", g.world.comm->rank(),
                   placed.status().message().c_str());
      return 1;
    }
    g.placed = std::move(*placed);
    if (g.lead) {
      std::fprintf(stderr,
                   "zero generate: %d ranks, each holding a 1/%d shard of every unit (%s) and "
                   "gathering each unit as the model uses it (ZeRO stage-3 inference)\n",
                   g.world.comm->world_size(), g.world.comm->world_size(),
                   describe_cpu_shards(*g.placed.gathered).c_str());
    }
    g.model = std::make_unique<model::Transformer>(*g.config);
    return 0;
  }
  const DType dtype = weights_dtype(g);
  const DType cache_dtype = gpu_cache_dtype(g);
  const int64_t other =
      g.device == Device::kCpu
          ? 0
          : runtime::kv_cache_bytes(*g.config, a.no_kv_cache ? 0 : capacity, slots, cache_dtype) +
                runtime::decode_scratch_bytes(*g.config, rows, slots, dtype);
  if (several_ranks(g)) return load_partitioned_weights(a, g, other);
  auto plan = plan_weights(g.stream, g.device, *g.config, dtype, other);
  if (!plan.ok()) {
    std::fprintf(stderr, "error: %s\n", plan.status().message().c_str());
    return 2;
  }
  if (g.stream.given) {
    std::fprintf(stderr, "zero generate: %s; %lld bytes of host memory for the weights\n",
                 plan->describe(g.device).c_str(),
                 static_cast<long long>(planned_host_bytes(*plan, g.device)));
  }
  auto placed =
      place_weights(*plan, g.stream, g.device, *g.config, dtype, g.source->init_fn(), cache_dtype);
  if (!placed.ok()) {
    std::fprintf(stderr, "error: %s%s\n",
                 g.device == Device::kCpu ? "" : ("--device " + a.device + ": ").c_str(),
                 placed.status().message().c_str());
    return 1;
  }
  g.placed = std::move(*placed);
  if (g.device != Device::kCpu) {
    g.on_device = g.placed.on_device.get();
    say_device(a, g);
  } else if (a.no_kv_cache) {
    std::fprintf(stderr, "error: --no_kv_cache is for --device cuda (the CPU always caches)\n");
    return 2;
  } else {
    g.model = std::make_unique<model::Transformer>(*g.config);
  }
  return 0;
}

// Prints the prompt (not a chat turn's rendered template: the reply alone), then every new token
// as it comes, on the device or the CPU; the rest of the decoded text at the end.
int generate_tokens(const GenerateArgs& a, Generation& g) {
  Printer& printer = g.printer;
  if (a.has_chat) {
    // The reply alone: the rendered template is not echoed.
  } else if (printer.stream || printer.bytes) {
    std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  } else {
    for (int32_t t : g.tokens) std::printf(" %d", t);
  }
  std::fflush(stdout);
  g.prompt_tokens = static_cast<int64_t>(g.tokens.size());
  printer.start = std::chrono::steady_clock::now();
  if (g.on_device) {
    const auto decoding = a.no_kv_cache ? runtime::DeviceGenerator::Decoding::kRecompute
                                        : runtime::DeviceGenerator::Decoding::kCached;
    auto done = g.on_device->generate(g.tokens, a.sampling, decoding, print_token, &printer);
    if (!done.ok()) {
      std::fprintf(stderr, "\nerror: --device %s: %s\n", a.device.c_str(),
                   done.status().message().c_str());
      return end_ranks(g, 1);
    }
    g.stopped = *done;
  } else {
    g.stopped = runtime::generate(*g.model, g.placed.cpu_params(), g.tokens, a.sampling,
                                  print_token, &printer);
    if (Status s = g.placed.status(); !s.ok()) {
      std::fprintf(stderr, "\nerror: %s\n", s.message().c_str());
      return 1;
    }
  }
  g.end = std::chrono::steady_clock::now();
  if (printer.stream && printer.status.ok()) {
    auto rest = printer.stream->flush();
    if (rest.ok()) std::fwrite(rest->data(), 1, rest->size(), stdout);
    if (!rest.ok()) printer.status = rest.status();
  }
  std::printf("\n");
  return 0;
}

// The speed line on stderr: new tokens per second, the first token's latency (the prompt's
// prefill) apart from the decode steps after it.
void report_speed(const Generation& g) {
  // Why: the speed line goes to stderr after the output's last line, also when both are one pipe.
  std::fflush(stdout);
  const Printer& printer = g.printer;
  if (printer.new_tokens == 0 || !g.lead) return;
  using Seconds = std::chrono::duration<double>;
  const double total_s = Seconds(g.end - printer.start).count();
  const double first_s = Seconds(printer.first - printer.start).count();
  const double after_s = total_s - first_s;
  std::fprintf(stderr,
               "zero generate: %lld new tokens in %.3f s, %.1f tokens/s (the first after %.3f s "
               "with the %lld-token prompt, then %.1f tokens/s)\n",
               static_cast<long long>(printer.new_tokens), total_s,
               static_cast<double>(printer.new_tokens) / total_s, first_s,
               static_cast<long long>(g.prompt_tokens),
               printer.new_tokens > 1 && after_s > 0
                   ? static_cast<double>(printer.new_tokens - 1) / after_s
                   : 0.0);
}

// --prompts_file: every line read, checked and encoded (before the weights are loaded), the output
// file created, then the batch generated with each line written as its sequence finishes.
int generate_prompts_file(GenerateArgs& a, Generation& g) {
  const model::ModelConfig& mc = *g.config;
  const bool bytes = !g.tokenizer && mc.vocab_size == 256;
  runtime::EncodePromptFn encode;
  if (g.tokenizer) {
    encode = [&g](const std::string& text) { return encode_text(*g.tokenizer, text); };
  } else if (bytes) {
    encode = [](const std::string& text) -> StatusOr<std::vector<int32_t>> {
      std::vector<int32_t> ids(text.begin(), text.end());
      for (int32_t& id : ids) id = static_cast<unsigned char>(id);
      if (ids.empty()) ids.push_back('\n');
      return ids;
    };
  }
  add_stop_tokens(a, g);
  auto batch = runtime::read_prompts_file(a.prompts_file, mc, a.sampling, encode);
  if (!batch.ok()) {
    std::fprintf(stderr, "error: --prompts_file %s\n", batch.status().message().c_str());
    return 2;
  }
  using Text = CompletionWriter::Text;
  const Text text = g.tokenizer ? Text::kTokenizer : (bytes ? Text::kBytes : Text::kNone);
  // The lead writes the output; the other ranks' lines (the same) go to their stdout, /dev/null.
  auto writer = CompletionWriter::open(a.output.empty() || !g.lead ? "-" : a.output, *batch, text,
                                       g.tokenizer ? &*g.tokenizer : nullptr);
  if (!writer.ok()) {
    std::fprintf(stderr, "error: %s\n", writer.status().message().c_str());
    return 2;
  }
  std::vector<runtime::BatchSequence>& seqs = batch->sequences;
  // The plan's shape: the largest cache a slot needs, the sequences at once, and at most every
  // running prompt's prefill in one append.
  const int64_t capacity = runtime::batch_cache_capacity(mc, seqs);
  const int64_t slots = std::clamp<int64_t>(a.batch_size, 1, static_cast<int64_t>(seqs.size()));
  int64_t rows = 0;
  for (const runtime::BatchSequence& s : seqs) {
    rows += std::min<int64_t>(static_cast<int64_t>(s.tokens.size()), capacity);
  }
  rows = std::clamp<int64_t>(rows, 1, slots * capacity);
  if (int code = load_weights(a, g, capacity, slots, rows)) return code;
  const auto start = std::chrono::steady_clock::now();
  // The CPU model over a weight stream: no line finishes after a failed read.
  runtime::StreamCheckedObserver checked(g.placed.cpu_stream.get(), **writer);
  const Status done = g.on_device ? g.on_device->generate_batch(seqs, a.batch_size, **writer)
                                  : runtime::generate_batch(*g.model, g.placed.cpu_params(), seqs,
                                                            a.batch_size, checked);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (g.lead)
    std::fprintf(
        stderr,
        "zero generate: %lld of %zu prompts done, %lld new tokens in %.3f s, %.1f tokens/s "
        "(up to %lld sequences at once)\n",
        static_cast<long long>((*writer)->lines_written()), seqs.size(),
        static_cast<long long>((*writer)->new_tokens()), seconds,
        static_cast<double>((*writer)->new_tokens()) / std::max(seconds, 1e-9),
        static_cast<long long>(std::min<int64_t>(a.batch_size, static_cast<int64_t>(seqs.size()))));
  if (!done.ok()) {
    std::fprintf(stderr, "error: %s (%lld finished lines were written before it)\n",
                 done.message().c_str(), static_cast<long long>((*writer)->lines_written()));
    return end_ranks(g, 1);
  }
  if (!(*writer)->decode_status().ok()) {
    std::fprintf(stderr, "error: decoding the output: %s\n",
                 (*writer)->decode_status().message().c_str());
    return 1;
  }
  return 0;
}

// Under a launcher (mpirun, zero launch) with several ranks: stage-3 inference on CPU ranks or on
// GPU ranks (one GPU each; ranks that share a GPU gather through pinned host memory). The ranks
// other than 0 compute the same tokens and print nothing on stdout. GPU ranks take the weight
// stream flags, CPU ranks --offload_param nvme (check_ranks_stream_flags).
int join_world(Generation& g) {
  if (!launched_as_rank()) return 0;
  auto world = make_world();
  if (!world.ok()) {
    std::fprintf(stderr, "error: %s\n", world.status().message().c_str());
    return 1;
  }
  g.world = std::move(*world);
  if (g.world.comm->world_size() == 1) return 0;
  if (Status s =
          check_ranks_stream_flags(g.stream, g.device, g.world.comm->world_size(), "zero generate");
      !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 2;
  }
  g.lead = g.world.comm->rank() == 0;
  if (!g.lead && std::freopen("/dev/null", "w", stdout) == nullptr) {
    std::fprintf(stderr, "[rank %d] error: cannot silence stdout\n", g.world.comm->rank());
    return 1;
  }
  return 0;
}

int run_generate_steps(GenerateArgs& a, Generation& g) {
  if (int code = check_flags(a, g)) return code;
  if (int code = join_world(g)) return code;
  if (g.world.comm != nullptr && g.world.comm->world_size() > 1) {
    g.agreement = std::make_unique<runtime::TokenAgreement>(*g.world.comm);
    a.sampling.sync = g.agreement.get();  // --prompts_file lines copy it
  }
  if (int code = open_model(a, g)) return code;
  if (int code = check_budget_and_device(g)) return code;
  if (!a.prompts_file.empty()) return generate_prompts_file(a, g);
  if (int code = encode_prompt(a, g)) return code;
  add_stop_tokens(a, g);
  const int64_t prompt = static_cast<int64_t>(g.tokens.size());
  const int64_t capacity = runtime::generation_cache_capacity(*g.config, prompt, a.sampling);
  if (int code = load_weights(a, g, capacity, 1, std::min(prompt, capacity))) return code;
  if (int code = generate_tokens(a, g)) return code;
  report_speed(g);
  if (!g.printer.status.ok()) {
    std::fprintf(stderr, "error: decoding the output: %s\n", g.printer.status.message().c_str());
    return 1;
  }
  if (g.stopped && g.lead) {
    std::fprintf(stderr, "zero generate: stopped at the %s token\n",
                 a.has_chat ? "end-of-turn / end-of-sequence" : "end-of-sequence");
  }
  return 0;
}

// The generation, then (several ranks) each rank whose own picks were not rank 0's says so.
int run_generate(GenerateArgs& a) {
  Generation g;
  const int code = run_generate_steps(a, g);
  if (g.agreement != nullptr && !g.agreement->report().empty()) {
    std::fprintf(stderr, "%s\n", g.agreement->report().c_str());
  }
  return code;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* g = app.add_subcommand(
      "generate",
      "sample text from a trained model (through a key/value cache, on the CPU or with --device "
      "cuda on the GPU; past the model's context length, at most 4096 positions, the oldest half "
      "of the context is dropped and the newest half re-read)");
  g->add_option("--model", a->model, "HF model directory (e.g. OUTPUT_DIR/final) or preset:NAME")
      ->required();
  CLI::Option* prompt =
      g->add_option("--prompt", a->prompt, "prompt text (models with a tokenizer, or byte-level)");
  CLI::Option* prompt_tokens = g->add_option("--prompt_tokens,--prompt-tokens", a->prompt_tokens,
                                             "prompt as comma-separated token ids");
  CLI::Option* chat = g->add_option(
      "--chat", a->chat,
      "one user message, rendered with the chat template of the model's tokenizer_config.json "
      "(ChatML, Llama-3, Mistral [INST], Zephyr) and the assistant's turn header; prints the "
      "reply");
  g->add_option("--max_new_tokens,--max-new-tokens", a->sampling.max_new_tokens,
                "tokens to generate (default 100)")
      ->check(int_at_least(0));
  g->add_option("--temperature", a->sampling.temperature,
                "softmax temperature; 0 = greedy (default 1)")
      ->check(real_at_least(0));
  g->add_option("--top_k,--top-k", a->sampling.top_k, "sample among the k most likely (0 = all)")
      ->check(int_at_least(0));
  g->add_option("--top_p,--top-p", a->sampling.top_p,
                "nucleus sampling: among the fewest most likely tokens whose probability sums to "
                "at least p (default 1 = off)")
      ->check(real_at_least(0, /*exclusive=*/true, 1));
  g->add_option("--repetition_penalty,--repetition-penalty", a->sampling.repetition_penalty,
                "HF's repetition penalty: the logits of tokens already in the sequence divided by "
                "it when positive, multiplied when negative (default 1 = off)")
      ->check(real_at_least(0, /*exclusive=*/true));
  g->add_option("--seed", a->sampling.seed,
                "sampling seed (default 1); --prompts_file line i samples with seed + i * "
                "0x9E3779B97F4A7C15 unless the line has its own")
      ->check(int_at_least(0));
  g->add_option("--context_limit,--context-limit", a->sampling.context_limit,
                "positions of context kept (the key/value cache's size); when full, the oldest "
                "half is dropped and the rest re-read (default 0: max_position_embeddings, at "
                "most 4096; never more than max_position_embeddings)")
      ->check(int_at_least(0));
  g->add_flag("--ignore_eos,--ignore-eos", a->ignore_eos,
              "keep generating past the model's end-of-sequence token");
  g->add_option("--device", a->device,
                "cpu (default) | cuda: the forwards on the GPU, through a key/value cache in GPU "
                "memory; same tokens as the CPU for the same seed and settings, up to float "
                "ties. Under a launcher with several ranks, one GPU per rank, each holding a "
                "shard of every block (ZeRO stage-3 inference)");
  g->add_flag("--no_kv_cache,--no-kv-cache", a->no_kv_cache,
              "with --device cuda: a whole forward over the window per new token instead of the "
              "key/value cache (the baseline the cache's speed is compared with)");
  g->add_option("--prompts_file,--prompts-file", a->prompts_file,
                "JSONL, one prompt a line: {\"prompt\": TEXT} or {\"prompt_tokens\": [IDS]}, with "
                "optional per-line max_new_tokens, temperature, top_k, top_p, repetition_penalty, "
                "seed, stop (strings) and id; generated in batches, one JSON line per prompt to "
                "--output as each finishes (docs/formats/generate.md)");
  g->add_option("--output", a->output,
                "with --prompts_file: the JSONL results, written line by line (default: stdout)");
  g->add_option("--batch_size,--batch-size", a->batch_size,
                "with --prompts_file: sequences generated at once, through one forward per step "
                "(default 8; a finished one's place goes to the next prompt)")
      ->check(int_at_least(1));
  add_weight_stream_flags(g, &a->stream);
  g->callback([a, prompt, prompt_tokens, chat, &exit_code] {
    a->has_prompt = prompt->count() > 0;
    a->has_prompt_tokens = prompt_tokens->count() > 0;
    a->has_chat = chat->count() > 0;
    exit_code = run_generate(*a);
  });
}

}  // namespace zero::cli
