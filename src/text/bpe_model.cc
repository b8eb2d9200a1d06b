#include "text/bpe_model.h"

#include <atomic>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace zero::text {
namespace {

// Words longer than this are not cached (HF's MAX_LENGTH); the cache is dropped when it grows
// past kCacheMaxWords so memory stays bounded on large corpora.
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxWords = 1 << 18;

struct WordCache {
  uint64_t owner = 0;
  StringMap<std::vector<int32_t>> words;
};

WordCache& thread_cache(uint64_t owner) {
  thread_local WordCache cache;
  if (cache.owner != owner || cache.words.size() >= kCacheMaxWords) {
    cache.words.clear();
    cache.owner = owner;
  }
  return cache;
}

uint64_t next_cache_owner() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

bool json_flag(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

}  // namespace

StatusOr<BpeModel> BpeModel::from_json(const nlohmann::json& j, const std::string& where) {
  const std::string type = j.value("type", "BPE");
  if (type != "BPE") {
    return unimplemented(
        "{}: model type {:?} is not supported (supported: BPE); refusing to tokenize differently "
        "from HF",
        where, type);
  }
  // dropout 0 is no dropout (HF takes the cached, deterministic path for it too).
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      !(j["dropout"].is_number() && j["dropout"].get<double>() == 0.0)) {
    return unimplemented("{}: model BPE: dropout {} is not supported (only null)", where,
                         j["dropout"].dump());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(key) && !j[key].is_null() && j[key] != "") {
      return unimplemented("{}: model BPE: {} {} is not supported (only null)", where, key,
                           j[key].dump());
    }
  }
  if (!j.contains("vocab") || !j["vocab"].is_object()) {
    return invalid_argument("{}: model BPE has no \"vocab\" object", where);
  }
  BpeModel m;
  m.cache_owner_ = next_cache_owner();
  m.vocab_.reserve(j["vocab"].size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : j["vocab"].items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX) {
      return invalid_argument("{}: model vocab: token {:?} has id {}", where, token,
                              id_json.dump());
    }
    const auto id = id_json.get<int32_t>();
    m.vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.resize(max_id + 1);
  m.has_token_.assign(max_id + 1, false);
  for (const auto& [token, id] : m.vocab_) {
    m.id_to_token_[id] = token;
    m.has_token_[id] = true;
  }

  const nlohmann::json merges = j.value("merges", nlohmann::json::array());
  if (!merges.is_array()) return invalid_argument("{}: model \"merges\" is not a list", where);
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& entry = merges[rank];
    std::string left, right;
    if (entry.is_string()) {  // "a b" (tokenizers < 0.20)
      const auto s = entry.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return invalid_argument("{}: merge {} {:?} is not two tokens separated by one space", where,
                                rank, s);
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {  // ["a", "b"]
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      return invalid_argument("{}: merge {} is neither \"a b\" nor [\"a\", \"b\"]: {}", where, rank,
                              entry.dump());
    }
    auto l = m.vocab_.find(left), r = m.vocab_.find(right), n = m.vocab_.find(left + right);
    if (l == m.vocab_.end() || r == m.vocab_.end() || n == m.vocab_.end()) {
      return invalid_argument("{}: merge {} ({:?} {:?}) names a token that is not in the vocab",
                              where, rank, left, right);
    }
    // A pair listed twice keeps its first (best) rank, as HF's HashMap insert order gives.
    m.merges_.emplace(pair_key(l->second, r->second),
                      MergeResult{static_cast<int32_t>(rank), n->second});
  }

  if (j.contains("unk_token") && j["unk_token"].is_string()) {
    const auto unk = j["unk_token"].get<std::string>();
    auto it = m.vocab_.find(unk);
    if (it == m.vocab_.end()) {
      return invalid_argument("{}: model unk_token {:?} is not in the vocab", where, unk);
    }
    m.unk_id_ = it->second;
  }
  m.fuse_unk_ = json_flag(j, "fuse_unk");
  m.byte_fallback_ = json_flag(j, "byte_fallback");
  m.ignore_merges_ = json_flag(j, "ignore_merges");
  if (m.byte_fallback_) {
    m.byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      auto it = m.vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it != m.vocab_.end()) m.byte_ids_[b] = it->second;
    }
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    merge_word(word, ids);
    return;
  }
  WordCache& cache = thread_cache(cache_owner_);
  if (auto it = cache.words.find(word); it != cache.words.end()) {
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> word_ids;
  merge_word(word, &word_ids);
  ids->insert(ids->end(), word_ids.begin(), word_ids.end());
  cache.words.emplace(std::string(word), std::move(word_ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>* ids) const {
  // Symbols as a doubly linked list over a vector; a merged-away symbol gets id -1.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1});
  };
  // One symbol per character: its vocab id, else its bytes' <0xNN> ids, else unk (fused runs
  // when fuse_unk), else nothing (HF drops it).
  std::optional<int32_t> pending_unk;
  std::string ch;
  for (size_t pos = 0; pos < word.size();) {
    size_t n = utf8_sequence_bytes(word, pos);
    if (n == 0) n = 1;  // not reached for valid input
    ch.assign(word.substr(pos, n));
    pos += n;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) add(*std::exchange(pending_unk, std::nullopt));
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        if (pending_unk) add(*std::exchange(pending_unk, std::nullopt));
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) add(*pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk) add(*pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Lowest rank first; among equal ranks the leftmost (HF's Word::merge_all ordering).
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (left.id < 0 || left.next < 0) continue;
    // Stale entry: one side changed since it was queued.
    auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.new_id != c.new_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.new_id;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

}  // namespace zero::text
