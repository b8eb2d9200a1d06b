// See stream_decoder.h.
#include "text/stream_decoder.h"

#include <span>
#include <utility>

namespace zero::text {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, std::vector<int32_t> context)
    : tokenizer_(&tokenizer), ids_(std::move(context)) {
  // A few context tokens are enough for the decoder's context rules (and keep each push O(1)).
  prefix_offset_ = ids_.size() > 6 ? ids_.size() - 6 : 0;
  read_offset_ = ids_.size();
}

StatusOr<std::string> StreamDecoder::push(int32_t id) {
  // An id with no token (a model whose embedding is padded past the tokenizer's vocabulary) is
  // skipped, as HF's decode skips ids id_to_token does not know.
  if (!tokenizer_->id_to_token(id)) return std::string();
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  ZERO_ASSIGN_OR_RETURN(
      std::string prefix_text,
      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), true));
  ZERO_ASSIGN_OR_RETURN(std::string new_text,
                        tokenizer_->decode(all.subspan(prefix_offset_), true));
  // Not final while the last character is incomplete, or while the new tokens decode to nothing
  // yet (a prefix that changed shape is held until it grows past the printed text).
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text))
    return std::string();
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(prefix_text.size());
}

StatusOr<std::string> StreamDecoder::flush() {
  if (read_offset_ == ids_.size()) return std::string();
  const std::span<const int32_t> all(ids_);
  ZERO_ASSIGN_OR_RETURN(
      std::string prefix_text,
      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), true));
  ZERO_ASSIGN_OR_RETURN(std::string new_text,
                        tokenizer_->decode(all.subspan(prefix_offset_), true));
  prefix_offset_ = read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return std::string();
  return new_text.substr(prefix_text.size());
}

}  // namespace zero::text
