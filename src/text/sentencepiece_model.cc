#include "text/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace zero::text {
namespace {

std::optional<int32_t> valid(int id) { return id >= 0 ? std::optional<int32_t>(id) : std::nullopt; }

}  // namespace

SentencePieceModel::SentencePieceModel()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceModel::~SentencePieceModel() = default;

StatusOr<std::shared_ptr<const SentencePieceModel>> SentencePieceModel::load(
    const std::string& path) {
  std::shared_ptr<SentencePieceModel> m(new SentencePieceModel());
  const auto status = m->processor_->Load(path);
  if (!status.ok()) {
    return invalid_argument("{}: not a SentencePiece model: {}", path, status.ToString());
  }
  return std::shared_ptr<const SentencePieceModel>(std::move(m));
}

StatusOr<std::vector<int32_t>> SentencePieceModel::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) return internal_error("SentencePiece encode: {}", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

StatusOr<std::string> SentencePieceModel::decode(std::span<const int32_t> ids,
                                                 bool skip_control) const {
  std::string text;
  std::vector<int> run;
  auto flush = [&]() -> Status {
    if (run.empty()) return ok_status();
    std::string piece_text;
    const auto status = processor_->Decode(run, &piece_text);
    if (!status.ok()) return internal_error("SentencePiece decode: {}", status.ToString());
    text += piece_text;
    run.clear();
    return ok_status();
  };
  // Skipping: one run without the control pieces. Keeping them: each run decodes on its own
  // (SentencePiece would drop them) and the control piece's text goes between.
  for (int32_t id : ids) {
    if (!processor_->IsControl(id)) {
      run.push_back(id);
    } else if (!skip_control) {
      ZERO_RETURN_IF_ERROR(flush());
      text += processor_->IdToPiece(id);
    }
  }
  ZERO_RETURN_IF_ERROR(flush());
  return text;
}

int64_t SentencePieceModel::vocab_size() const { return processor_->GetPieceSize(); }

std::optional<int32_t> SentencePieceModel::piece_to_id(std::string_view piece) const {
  const int id = processor_->PieceToId(piece);
  // PieceToId answers unk for unknown pieces: check that the piece really is that id's.
  if (id < 0 || processor_->IdToPiece(id) != piece) return std::nullopt;
  return id;
}

std::string SentencePieceModel::id_to_piece(int32_t id) const { return processor_->IdToPiece(id); }
bool SentencePieceModel::is_control(int32_t id) const { return processor_->IsControl(id); }
std::optional<int32_t> SentencePieceModel::bos_id() const { return valid(processor_->bos_id()); }
std::optional<int32_t> SentencePieceModel::eos_id() const { return valid(processor_->eos_id()); }
std::optional<int32_t> SentencePieceModel::pad_id() const { return valid(processor_->pad_id()); }
std::optional<int32_t> SentencePieceModel::unk_id() const { return valid(processor_->unk_id()); }
std::string SentencePieceModel::serialized() const { return processor_->serialized_model_proto(); }

}  // namespace zero::text
