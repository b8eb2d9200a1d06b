// --train_file: prepared data with its mask and manifest check, token files, and the plain-text
// refusal.
#include "runtime/train_data.h"

#include <filesystem>

#include "data/prepared_data.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "text/tokenizer.h"

namespace zero::runtime {

// Masked targets must be the ones the loss skips.
static_assert(kIgnoreTarget == kernels::cpu::kIgnoreIndex);

namespace {

// The model directory's tokenizer, when it has one (a preset has none).
StatusOr<std::optional<text::Tokenizer>> model_tokenizer(Storage& storage,
                                                         const std::string& model) {
  if (model.rfind("preset:", 0) == 0) return std::optional<text::Tokenizer>();
  std::string dir = model;
  if (std::filesystem::path(model).filename() == "config.json") {
    dir = std::filesystem::path(model).parent_path().string();
  }
  if (!storage.file_exists(dir + "/tokenizer.json") &&
      !storage.file_exists(dir + "/tokenizer.model")) {
    return std::optional<text::Tokenizer>();
  }
  ZERO_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::load(dir));
  return std::optional<text::Tokenizer>(std::move(tok));
}

// "data/train.txt" -> "data/train", the prefix suggested for `zero data prepare --output`.
std::string suggested_prefix(const std::string& path) {
  std::filesystem::path p(path);
  return p.has_extension() ? p.replace_extension().string() : path + ".prepared";
}

}  // namespace

StatusOr<TokenDataset> open_train_data(Storage& storage, const TrainDataRequest& request) {
  TokenDatasetOptions dopts;
  dopts.block_size = request.block_size;
  dopts.vocab_size = request.vocab_size;
  if (request.data_dtype) {
    dopts.dtype = parse_token_dtype(*request.data_dtype);
    if (!dopts.dtype) {
      return invalid_argument("--data_dtype {}: expected uint8, uint16 or uint32",
                              *request.data_dtype);
    }
  }

  if (std::optional<std::string> prefix = find_prepared_prefix(storage, request.train_file)) {
    ZERO_ASSIGN_OR_RETURN(PreparedManifest m, read_prepared_manifest(storage, *prefix));
    const std::string manifest = prepared_manifest_path(*prefix);
    if (dopts.dtype && *dopts.dtype != m.dtype) {
      return invalid_argument("--data_dtype {} contradicts {} (token_dtype {})",
                              *request.data_dtype, manifest, token_dtype_name(m.dtype));
    }
    auto tok = model_tokenizer(storage, request.model);
    if (!tok.ok()) {
      return tok.status().with_context("--model " + request.model +
                                       ": its tokenizer is needed to check " + manifest);
    }
    if (*tok && (*tok)->content_hash() != m.tokenizer_hash) {
      return invalid_argument(
          "{} was prepared with tokenizer {}, but --model {} has tokenizer {} ({}); prepare "
          "the data again with this model: zero data prepare --model {} --output {} FILE...",
          manifest, m.tokenizer_hash, request.model, (*tok)->content_hash(), (*tok)->source(),
          request.model, *prefix);
    }
    dopts.dtype = m.dtype;
    dopts.mask_path = prepared_mask_path(*prefix);
    return TokenDataset::open(storage, prepared_tokens_path(*prefix), dopts);
  }

  // Plain text read as uint16 ids trains on garbage without any error: refuse it unless the
  // user said how to read the file.
  if (!dopts.dtype && looks_like_text(storage, request.train_file)) {
    if (request.vocab_size == 256) {
      return invalid_argument(
          "{} {} looks like text; the model's vocabulary is byte-level (256), so add "
          "--data_dtype uint8 to read its bytes",
          request.flag, request.train_file);
    }
    return invalid_argument(
        "{} {} looks like text, not token ids (it would be read as uint16 ids of a "
        "{}-token vocabulary). Tokenize it with the model's tokenizer first:\n"
        "  zero data prepare --model {} --output {} {}\n"
        "then pass {} {} (or give --data_dtype uint16/uint32 if the file really holds "
        "ids)",
        request.flag, request.train_file, request.vocab_size, request.model,
        suggested_prefix(request.train_file), request.train_file, request.flag,
        suggested_prefix(request.train_file));
  }
  return TokenDataset::open(storage, request.train_file, dopts);
}

}  // namespace zero::runtime
