// The model's own tokenizer, read natively from an HF model directory's tokenizer.json (and
// tokenizer_config.json for bos/eos/pad): encode and decode equal to HF `tokenizers` token for
// token for the supported forms (docs/formats/tokenizer.md). A directory with only a SentencePiece
// tokenizer.model is read through libsentencepiece instead. Anything in the file that is not
// implemented fails the load with the component and the file named, never a silently different
// tokenization.
//
// Pipeline of encode, as HF's: split on added tokens (raw) -> normalize each piece -> split on
// normalized added tokens -> pre-tokenize into words -> BPE each word -> post-processor's
// special tokens (add_special_tokens).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/added_vocabulary.h"
#include "text/bpe_model.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/sentencepiece_model.h"

namespace zero::text {

class Tokenizer {
 public:
  // Loads `path`: a model directory holding tokenizer.json (and optionally
  // tokenizer_config.json), or else tokenizer.model (SentencePiece); or a tokenizer.json or
  // tokenizer.model file itself.
  static StatusOr<Tokenizer> load(const std::string& path);
  // From the files' contents; `config_json` may be empty (no tokenizer_config.json). `source`
  // names the file in errors.
  static StatusOr<Tokenizer> from_strings(const std::string& tokenizer_json,
                                          const std::string& config_json,
                                          const std::string& source);

  // Token ids of `text`; with `add_special_tokens` the post-processor's BOS/EOS are added.
  // Fails only when `text` is not valid UTF-8 (error names the byte offset). Thread-safe.
  StatusOr<std::vector<int32_t>> encode(std::string_view text,
                                        bool add_special_tokens = true) const;
  // The text of `ids`; `skip_special_tokens` drops special added tokens. Bytes that do not form
  // valid UTF-8 come out as U+FFFD, as HF's. Fails on an id outside the vocabulary. Thread-safe.
  StatusOr<std::string> decode(std::span<const int32_t> ids,
                               bool skip_special_tokens = false) const;

  // One past the largest id (model vocab and added tokens).
  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id` (added tokens first, as HF), or nullopt outside the vocabulary.
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  // From tokenizer_config.json's bos_token / eos_token / pad_token / unk_token (nullopt when
  // absent or null there, or when there is no tokenizer_config.json).
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  // tokenizer_config.json's chat_template (the "default" one when it lists several), verbatim.
  const std::optional<std::string>& chat_template() const { return chat_template_; }
  // The ids encode(.., true) puts before / after the text: the post-processor's, except for
  // tokenizer_class Llama/CodeLlama/Gemma(Fast), where transformers rebuilds them from
  // tokenizer_config.json's add_bos_token (default true) / add_eos_token (default false), and for
  // a tokenizer.model, where the same keys decide.
  const std::vector<int32_t>& special_prefix_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& special_suffix_ids() const { return suffix_ids_; }

  // "xxh3:<16 hex>": a hash of tokenizer.json's content (canonical JSON, so formatting does not
  // matter) and the bos/eos/pad/unk ids, for data manifests to check that prepared tokens match
  // a model's tokenizer.
  const std::string& content_hash() const { return content_hash_; }
  // The file it was loaded from, for messages.
  const std::string& source() const { return source_; }
  // The tokenizer_config.json read with it, for messages; "" when there was none.
  const std::string& config_source() const { return config_source_; }

 private:
  Tokenizer() = default;
  static StatusOr<Tokenizer> load_sentencepiece(const std::string& model_path,
                                                const std::string& config_json);
  Status encode_text(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  // bos/eos/pad/unk from tokenizer_config.json (`config_source` names it in errors).
  Status read_config(const std::string& config_json, const std::string& config_source);
  void set_content_hash(const std::string& canonical_model);

  std::string source_;
  std::string config_source_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  Decoder decoder_;
  PostProcessor post_;
  AddedVocabulary added_;
  std::shared_ptr<const SentencePieceModel> spm_;  // set: a tokenizer.model, the rest unused
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::optional<std::string> chat_template_;
  int64_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_, unk_id_;
  std::string content_hash_;
};

}  // namespace zero::text
