// Tokenizing documents into a packed stream with a loss mask, and publishing the three files.
#include "text/data_preparer.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "text/chat_template.h"
#include "text/utf8.h"

namespace zero::text {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// 1-based line of byte `offset`.
int64_t line_of(std::string_view content, size_t offset) {
  return 1 +
         std::count(content.begin(), content.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

void append(const std::vector<int32_t>& ids, uint8_t trained, PreparedTokens* out) {
  out->ids.insert(out->ids.end(), ids.begin(), ids.end());
  out->mask.insert(out->mask.end(), ids.size(), trained);
}

// A document before encoding: its pieces, each trained on or not, and where it came from.
struct Piece {
  std::string text;
  uint8_t trained;
};
struct Document {
  std::vector<Piece> pieces;
  std::string where;  // FILE or FILE:LINE
  bool chat = false;  // rendered by a chat template, which places BOS itself
};

// BOS-like prefix (mask 0), then each piece with its mask, then EOS (mask 1).
Status encode_document(const Tokenizer& tok, const Document& doc, PreparedTokens* out) {
  if (!doc.chat) append(tok.special_prefix_ids(), 0, out);
  for (const Piece& p : doc.pieces) {
    auto ids = tok.encode(p.text, /*add_special_tokens=*/false);
    if (!ids.ok()) return invalid_argument("{}: {}", doc.where, ids.status().message());
    append(*ids, p.trained, out);
  }
  // A chat template may already end the conversation with EOS (Mistral, Zephyr).
  if (!doc.chat || out->ids.empty() || out->ids.back() != *tok.eos_id()) {
    out->ids.push_back(*tok.eos_id());
    out->mask.push_back(1);
  }
  ++out->documents;
  return ok_status();
}

// A "messages" array rendered by the tokenizer's chat template (recognised on first use).
StatusOr<Document> chat_document(const Tokenizer& tok, const nlohmann::json& messages,
                                 const std::string& where, std::optional<ChatTemplate>* chat) {
  if (!chat->has_value()) {
    auto t = ChatTemplate::for_tokenizer(tok);
    if (!t.ok()) return t.status().with_context(where);
    *chat = std::move(*t);
  }
  if (!messages.is_array() || messages.empty()) {
    return invalid_argument("{}: \"messages\" is not a non-empty array", where);
  }
  std::vector<ChatMessage> list;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return invalid_argument("{}: message {} needs string \"role\" and \"content\"", where, i);
    }
    list.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  auto segments = (*chat)->render(list);
  if (!segments.ok()) return invalid_argument("{}: {}", where, segments.status().message());
  Document doc;
  doc.where = where;
  doc.chat = true;
  for (ChatSegment& seg : *segments) {
    doc.pieces.push_back({std::move(seg.text), static_cast<uint8_t>(seg.trained ? 1 : 0)});
  }
  return doc;
}

Status collect_jsonl(const Tokenizer& tok, std::string_view content, const std::string& source,
                     std::vector<Document>* docs) {
  std::optional<ChatTemplate> chat;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    ++line_no;
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    const std::string where = source + ":" + std::to_string(line_no);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument("{}: not valid JSON", where);
    if (!j.is_object()) return invalid_argument("{}: not a JSON object", where);
    auto field = [&](const char* key) -> StatusOr<std::string> {
      auto it = j.find(key);
      if (it == j.end()) return invalid_argument("{}: no \"{}\" field", where, key);
      if (!it->is_string()) return invalid_argument("{}: \"{}\" is not a string", where, key);
      return it->get<std::string>();
    };
    if (j.contains("text")) {
      ZERO_ASSIGN_OR_RETURN(std::string text, field("text"));
      docs->push_back({{{std::move(text), 1}}, where});
    } else if (j.contains("prompt") || j.contains("completion")) {
      ZERO_ASSIGN_OR_RETURN(std::string prompt, field("prompt"));
      ZERO_ASSIGN_OR_RETURN(std::string completion, field("completion"));
      docs->push_back({{{std::move(prompt), 0}, {std::move(completion), 1}}, where});
    } else if (j.contains("messages")) {
      ZERO_ASSIGN_OR_RETURN(Document doc, chat_document(tok, j["messages"], where, &chat));
      docs->push_back(std::move(doc));
    } else {
      return invalid_argument("{}: no \"text\" field, nor \"prompt\" + \"completion\"", where);
    }
  }
  return ok_status();
}

// The documents of one file, in order. Errors name FILE:LINE.
Status collect_documents(const Tokenizer& tok, std::string_view content, const std::string& source,
                         bool jsonl, std::vector<Document>* docs) {
  const size_t bad = first_invalid_utf8(content);
  if (bad != content.size()) {
    const size_t line_start = content.rfind('\n', bad == 0 ? 0 : bad - 1);
    const size_t column =
        line_start == std::string_view::npos || bad == 0 ? bad + 1 : bad - line_start;
    return invalid_argument("{}:{}: not valid UTF-8 (byte 0x{:02X} at column {})", source,
                            line_of(content, bad), static_cast<uint8_t>(content[bad]), column);
  }
  if (jsonl) return collect_jsonl(tok, content, source, docs);
  if (!content.empty()) docs->push_back({{{std::string(content), 1}}, source});
  return ok_status();
}

// Encodes `docs` on `num_threads` threads into one stream, in document order (so the output does
// not depend on the thread count). The first failing document's error is returned.
Status encode_documents(const Tokenizer& tok, const std::vector<Document>& docs, int num_threads,
                        PreparedTokens* out) {
  const size_t n = docs.size();
  std::vector<PreparedTokens> parts(n);
  std::vector<Status> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      errors[i] = encode_document(tok, docs[i], &parts[i]);
    }
  };
  const int threads = static_cast<int>(std::min<size_t>(std::max(num_threads, 1), n));
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
  }  // joined here
  size_t total = out->ids.size();
  for (size_t i = 0; i < n; ++i) {
    ZERO_RETURN_IF_ERROR(errors[i]);
    total += parts[i].ids.size();
  }
  out->ids.reserve(total);
  out->mask.reserve(total);
  for (PreparedTokens& p : parts) {
    out->ids.insert(out->ids.end(), p.ids.begin(), p.ids.end());
    out->mask.insert(out->mask.end(), p.mask.begin(), p.mask.end());
    out->documents += p.documents;
  }
  return ok_status();
}

// Writes `bytes` to `path` (a temporary name) and syncs it.
Status write_all(Storage& storage, const std::string& path, const void* data, size_t n) {
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, storage.open_write(path));
  ZERO_RETURN_IF_ERROR(f->append(data, n));
  ZERO_RETURN_IF_ERROR(f->sync());
  return f->close();
}

}  // namespace

Status prepare_file_content(const Tokenizer& tokenizer, std::string_view content,
                            const std::string& source, bool jsonl, PreparedTokens* out) {
  ZERO_CHECK(tokenizer.eos_id().has_value(), "prepare_file_content: the tokenizer has no EOS");
  std::vector<Document> docs;
  ZERO_RETURN_IF_ERROR(collect_documents(tokenizer, content, source, jsonl, &docs));
  return encode_documents(tokenizer, docs, 1, out);
}

StatusOr<PreparedManifest> prepare_files(Storage& storage, const Tokenizer& tokenizer,
                                         const std::vector<std::string>& inputs,
                                         const std::string& prefix, int num_threads) {
  if (!tokenizer.eos_id()) {
    return invalid_argument(
        "{}: the tokenizer has no eos_token (tokenizer_config.json), which separates documents",
        tokenizer.source());
  }
  if (inputs.empty()) return invalid_argument("zero data prepare: no input files");
  PreparedManifest m;
  m.tokenizer_hash = tokenizer.content_hash();
  m.vocab_size = tokenizer.vocab_size();
  m.eos_id = *tokenizer.eos_id();
  m.dtype = tokenizer.vocab_size() <= 65536 ? TokenDType::kUint16 : TokenDType::kUint32;
  // Parsing is sequential (errors come in file and line order); encoding, the expensive part, is
  // spread over the threads.
  std::vector<Document> docs;
  for (const std::string& path : inputs) {
    ZERO_ASSIGN_OR_RETURN(std::string content, read_file(storage, path));
    const size_t docs_before = docs.size();
    ZERO_RETURN_IF_ERROR(
        collect_documents(tokenizer, content, path, ends_with(path, ".jsonl"), &docs));
    m.sources.push_back({path, content.size(), static_cast<int64_t>(docs.size() - docs_before)});
  }
  PreparedTokens all;
  ZERO_RETURN_IF_ERROR(encode_documents(tokenizer, docs, num_threads, &all));
  m.num_tokens = static_cast<int64_t>(all.ids.size());
  m.num_documents = all.documents;
  m.num_trained_tokens = std::count(all.mask.begin(), all.mask.end(), uint8_t{1});

  std::string tokens;
  if (m.dtype == TokenDType::kUint16) {
    std::vector<uint16_t> narrow(all.ids.begin(), all.ids.end());
    tokens.assign(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
  } else {
    tokens.assign(reinterpret_cast<const char*>(all.ids.data()), all.ids.size() * 4);
  }
  const std::string manifest = manifest_to_json(m);
  // Temporaries first, renamed only when all three are written; the manifest last, since readers
  // look for it.
  const std::string tmp = ".tmp";
  const std::vector<std::pair<std::string, std::string_view>> files = {
      {prepared_tokens_path(prefix), tokens},
      {prepared_mask_path(prefix),
       std::string_view(reinterpret_cast<const char*>(all.mask.data()), all.mask.size())},
      {prepared_manifest_path(prefix), manifest}};
  for (const auto& [path, bytes] : files) {
    Status s = write_all(storage, path + tmp, bytes.data(), bytes.size());
    if (!s.ok()) {
      for (const auto& f : files) (void)storage.remove_file(f.first + tmp);
      return s;
    }
  }
  for (const auto& [path, bytes] : files) {
    ZERO_RETURN_IF_ERROR(storage.rename(path + tmp, path));
  }
  return m;
}

}  // namespace zero::text
