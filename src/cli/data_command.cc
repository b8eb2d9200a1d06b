// `zero data`: the model's own tokenizer from the command line, for scripts and for checking
// against other tokenizers (src/text, docs/formats/tokenizer.md).
//   tokenize    text (--text or a file, "-" for stdin) -> token ids as a JSON array
//   detokenize  ids (any mix of "1 2 3", "1,2,3", "[1,2,3]") -> text, byte for byte
//   tokenizer   what was loaded: vocab size, bos/eos/pad/unk ids, content hash
//   prepare     text / JSONL files -> PREFIX.tokens + .mask + .manifest.json for `zero train`
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/storage.h"
#include "text/data_preparer.h"
#include "text/tokenizer.h"

namespace zero::cli {
namespace {

struct DataArgs {
  std::string model;
  std::string text;
  bool has_text = false;
  std::string file;
  bool no_special_tokens = false;
  bool skip_special_tokens = false;
  std::vector<std::string> ids;
  std::string output;
  std::vector<std::string> inputs;
  int num_threads = 0;  // 0: one per hardware thread
};

// Loads the tokenizer or prints why not (exit 2: the directory or its files are bad input).
std::optional<text::Tokenizer> load_or_report(const std::string& model) {
  auto tok = text::Tokenizer::load(model);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: --model %s: %s\n", model.c_str(), tok.status().message().c_str());
    return std::nullopt;
  }
  return std::move(tok).value();
}

int run_tokenize(const DataArgs& a) {
  if (a.has_text == !a.file.empty()) {
    std::fprintf(stderr,
                 "error: zero data tokenize: give either --text T or a FILE (- for stdin)\n");
    return 2;
  }
  std::string input = a.text;
  if (!a.has_text) {
    std::stringstream ss;
    if (a.file == "-") {
      ss << std::cin.rdbuf();
    } else {
      std::ifstream in(a.file, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "error: cannot read %s\n", a.file.c_str());
        return 2;
      }
      ss << in.rdbuf();
    }
    input = ss.str();
  }
  auto tok = load_or_report(a.model);
  if (!tok) return 2;
  auto ids = tok->encode(input, !a.no_special_tokens);
  if (!ids.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", a.has_text ? "--text" : a.file.c_str(),
                 ids.status().message().c_str());
    return 2;
  }
  std::string out = "[";
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) out.push_back(',');
    out += std::to_string((*ids)[i]);
  }
  out += "]\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}

int run_detokenize(const DataArgs& a) {
  auto tok = load_or_report(a.model);
  if (!tok) return 2;
  std::vector<int32_t> ids;
  for (const std::string& arg : a.ids) {
    std::string cleaned = arg;
    for (char& c : cleaned) {
      if (c == '[' || c == ']' || c == ',') c = ' ';
    }
    std::stringstream ss(cleaned);
    std::string item;
    while (ss >> item) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || id < 0 || id > INT32_MAX) {
        std::fprintf(stderr, "error: zero data detokenize: %s is not a token id\n", item.c_str());
        return 2;
      }
      ids.push_back(static_cast<int32_t>(id));
    }
  }
  auto text = tok->decode(ids, a.skip_special_tokens);
  if (!text.ok()) {
    std::fprintf(stderr, "error: %s\n", text.status().message().c_str());
    return 2;
  }
  // The text exactly as decoded; a newline only for a terminal, so pipes compare byte for byte.
  std::fwrite(text->data(), 1, text->size(), stdout);
  if (isatty(fileno(stdout))) std::fputc('\n', stdout);
  return 0;
}

int run_info(const DataArgs& a) {
  auto tok = load_or_report(a.model);
  if (!tok) return 2;
  auto id = [](std::optional<int32_t> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  nlohmann::json j = {{"source", tok->source()},
                      {"vocab_size", tok->vocab_size()},
                      {"bos_id", id(tok->bos_id())},
                      {"eos_id", id(tok->eos_id())},
                      {"pad_id", id(tok->pad_id())},
                      {"unk_id", id(tok->unk_id())},
                      {"special_prefix_ids", tok->special_prefix_ids()},
                      {"special_suffix_ids", tok->special_suffix_ids()},
                      {"content_hash", tok->content_hash()}};
  std::printf("%s\n", j.dump(1).c_str());
  return 0;
}

int run_prepare(const DataArgs& a) {
  auto tok = load_or_report(a.model);
  if (!tok) return 2;
  const int threads = a.num_threads > 0
                          ? a.num_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const auto start = std::chrono::steady_clock::now();
  auto m = text::prepare_files(*default_storage(), *tok, a.inputs, a.output, threads);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!m.ok()) {
    std::fprintf(stderr, "error: zero data prepare: %s (nothing written)\n",
                 m.status().message().c_str());
    return 2;
  }
  std::printf(
      "zero data prepare: %lld documents, %lld tokens (%lld trained on), %s ids -> %s.tokens, "
      "%s.mask, %s.manifest.json in %.2f s (%.0f tokens/s, %d threads)\n",
      static_cast<long long>(m->num_documents), static_cast<long long>(m->num_tokens),
      static_cast<long long>(m->num_trained_tokens), token_dtype_name(m->dtype), a.output.c_str(),
      a.output.c_str(), a.output.c_str(), seconds,
      seconds > 0 ? static_cast<double>(m->num_tokens) / seconds : 0.0, threads);
  return 0;
}

}  // namespace

void add_data_command(CLI::App& app, int& exit_code) {
  CLI::App* data = app.add_subcommand(
      "data", "tokenize, detokenize and prepare training data with the model's tokenizer");
  data->require_subcommand(1);
  auto args = std::make_shared<DataArgs>();
  const std::string model_help =
      "model directory with tokenizer.json or tokenizer.model (and tokenizer_config.json), or "
      "one of those files";

  CLI::App* tokenize =
      data->add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  tokenize->add_option("--model", args->model, model_help)->required();
  tokenize->add_option("--text", args->text, "the text (instead of FILE)")
      ->each([args](const std::string&) { args->has_text = true; });
  tokenize->add_option("file", args->file, "file to tokenize (- for stdin)");
  tokenize->add_flag("--no-special-tokens", args->no_special_tokens,
                     "do not add the post-processor's BOS/EOS");
  tokenize->callback([args, &exit_code] { exit_code = run_tokenize(*args); });

  CLI::App* detokenize = data->add_subcommand("detokenize", "print the text of token ids");
  detokenize->add_option("--model", args->model, model_help)->required();
  detokenize->add_option("ids", args->ids, "ids: 1 2 3, 1,2,3 or [1,2,3]")->required();
  detokenize->add_flag("--skip-special-tokens", args->skip_special_tokens,
                       "drop special tokens (BOS, EOS, ...)");
  detokenize->callback([args, &exit_code] { exit_code = run_detokenize(*args); });

  CLI::App* info = data->add_subcommand(
      "tokenizer", "print what was loaded: vocab size, bos/eos/pad/unk ids, content hash");
  info->add_option("--model", args->model, model_help)->required();
  info->callback([args, &exit_code] { exit_code = run_info(*args); });

  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "tokenize text files and JSONL (\"text\"; \"prompt\" + \"completion\"; chat \"messages\") "
      "into "
      "PREFIX.tokens, PREFIX.mask and PREFIX.manifest.json for zero train --train_file PREFIX");
  prepare->add_option("--model", args->model, model_help)->required();
  prepare->add_option("--output", args->output, "output PREFIX")->required();
  prepare->add_option("files", args->inputs, "input files: *.jsonl as JSONL, others plain text")
      ->required();
  prepare->add_option("--num_threads", args->num_threads,
                      "threads encoding documents (default: one per hardware thread); the output "
                      "does not depend on it");
  prepare->callback([args, &exit_code] { exit_code = run_prepare(*args); });
}

}  // namespace zero::cli
