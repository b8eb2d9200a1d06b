// CompletionWriter (completion_writer.h).
#include "cli/completion_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace zero::cli {

StatusOr<std::unique_ptr<CompletionWriter>> CompletionWriter::open(
    const std::string& path, const runtime::PromptBatch& batch, Text text,
    const text::Tokenizer* tokenizer) {
  std::FILE* file = path == "-" ? stdout : std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return io_error("--output {}: cannot create the file: {}", path, std::strerror(errno));
  }
  return std::unique_ptr<CompletionWriter>(
      new CompletionWriter(path, file, batch, text, tokenizer));
}

CompletionWriter::CompletionWriter(std::string path, std::FILE* file,
                                   const runtime::PromptBatch& batch, Text text,
                                   const text::Tokenizer* tokenizer)
    : path_(std::move(path)),
      file_(file),
      owns_file_(file != stdout),
      batch_(batch),
      text_(text),
      tokenizer_(tokenizer),
      pending_(batch.sequences.size()) {}

CompletionWriter::~CompletionWriter() {
  if (owns_file_) std::fclose(file_);
}

CompletionWriter::Pending& CompletionWriter::pending(int64_t i) {
  std::unique_ptr<Pending>& p = pending_[static_cast<size_t>(i)];
  if (p == nullptr) {
    p = std::make_unique<Pending>();
    if (text_ == Text::kTokenizer) {
      // The prompt is the decoder's context (not printed): tokens[0, prompt_tokens).
      const std::vector<int32_t>& tokens = batch_.sequences[static_cast<size_t>(i)].tokens;
      const auto prompt_end = tokens.begin() + batch_.lines[static_cast<size_t>(i)].prompt_tokens;
      p->stream.emplace(*tokenizer_, std::vector<int32_t>(tokens.begin(), prompt_end));
    }
  }
  return *p;
}

bool CompletionWriter::add_text(int64_t i, Pending& p, const std::string& piece) {
  const std::vector<std::string>& stop = batch_.lines[static_cast<size_t>(i)].stop;
  const size_t before = p.completion.size();
  p.completion += piece;
  // The earliest stop string in the text that could hold a new match: one may end in this piece
  // and start up to its length - 1 bytes before it.
  size_t cut = std::string::npos;
  for (const std::string& s : stop) {
    const size_t from = before >= s.size() - 1 ? before - (s.size() - 1) : 0;
    cut = std::min(cut, p.completion.find(s, from));
  }
  if (cut == std::string::npos) return false;
  p.completion.resize(cut);
  p.stopped = true;
  return true;
}

bool CompletionWriter::on_token(int64_t i, int32_t token) {
  ++new_tokens_;
  Pending& p = pending(i);
  if (text_ == Text::kBytes) return add_text(i, p, std::string(1, static_cast<char>(token)));
  if (text_ != Text::kTokenizer) return false;
  auto piece = p.stream->push(token);
  if (!piece.ok()) {
    if (decode_status_.ok()) decode_status_ = piece.status();
    return false;
  }
  return add_text(i, p, *piece);
}

Status CompletionWriter::on_finish(int64_t i, runtime::FinishReason reason) {
  Pending& p = pending(i);
  if (text_ == Text::kTokenizer && !p.stopped) {
    // The characters still held back (an incomplete one at the end decodes to U+FFFD, as HF).
    auto rest = p.stream->flush();
    if (rest.ok() && add_text(i, p, *rest)) reason = runtime::FinishReason::kStop;
    if (!rest.ok() && decode_status_.ok()) decode_status_ = rest.status();
  }
  const runtime::BatchSequence& s = batch_.sequences[static_cast<size_t>(i)];
  const runtime::PromptLine& line = batch_.lines[static_cast<size_t>(i)];
  const std::vector<int32_t> completion_tokens(s.tokens.begin() + line.prompt_tokens,
                                               s.tokens.end());
  nlohmann::ordered_json out;
  out["index"] = i;
  if (line.id) out["id"] = *line.id;
  out[line.prompt_is_text ? "prompt" : "prompt_tokens"] = line.prompt;
  if (text_ != Text::kNone) out["completion"] = p.completion;
  out["completion_tokens"] = completion_tokens;
  out["tokens"] = completion_tokens.size();
  out["finish_reason"] = runtime::finish_reason_name(reason);
  // Invalid UTF-8 (a byte-level model's bytes) becomes U+FFFD rather than an exception.
  const std::string text =
      out.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace) + "\n";
  pending_[static_cast<size_t>(i)].reset();
  // Why flush per line: the lines written so far survive a failure later in the batch.
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return io_error("--output {}: writing the line of prompt {}: {}", path_, i,
                    std::strerror(errno));
  }
  ++lines_written_;
  return ok_status();
}

}  // namespace zero::cli
