// The start-up agreement of `zero train`'s ranks (see start_agreement.h).
#include "runtime/start_agreement.h"

#include <cstring>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

#include "runtime/progress.h"

namespace zero::runtime {

void add_to_fingerprint(RunFingerprint& fp, const std::string& prefix, const nlohmann::json& j) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      add_to_fingerprint(fp, prefix.empty() ? it.key() : prefix + "." + it.key(), it.value());
    }
    return;
  }
  fp[prefix] = j.dump();
}

std::string serialize_fingerprint(const RunFingerprint& fp) {
  std::string out;
  for (const auto& [key, value] : fp) out += key + "\t" + value + "\n";
  return out;
}

uint64_t fingerprint_hash(const RunFingerprint& fp) {
  const std::string text = serialize_fingerprint(fp);
  return XXH3_64bits(text.data(), text.size());
}

RunFingerprint parse_fingerprint(const std::string& text) {
  RunFingerprint fp;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) fp[line.substr(0, tab)] = line.substr(tab + 1);
    pos = end + 1;
  }
  return fp;
}

std::string first_difference(const RunFingerprint& a, int rank_a, const RunFingerprint& b,
                             int rank_b) {
  std::set<std::string> keys;
  for (const auto& kv : a) keys.insert(kv.first);
  for (const auto& kv : b) keys.insert(kv.first);
  for (const std::string& key : keys) {
    auto ia = a.find(key);
    auto ib = b.find(key);
    const std::string va = ia == a.end() ? "(not set)" : ia->second;
    const std::string vb = ib == b.end() ? "(not set)" : ib->second;
    if (va != vb)
      return fmt::format("{}: rank {} has {}, rank {} has {}", key, rank_a, va, rank_b, vb);
  }
  return "";
}

namespace {

// One rank's outcome as exchanged: raw 64-bit words carried through an fp32 all-gather (a gather
// copies bits; nothing is reduced).
struct Outcome {
  uint64_t exit_code = 0;
  uint64_t error_hash = 0;
  uint64_t fingerprint_hash = 0;
};
constexpr size_t kOutcomeFloats = sizeof(Outcome) / sizeof(float);
static_assert(sizeof(Outcome) % sizeof(float) == 0);

// Rank `root`'s text on every rank (its length first).
Status broadcast_text(Communicator& comm, int root, std::string& text) {
  uint64_t length = text.size();
  float length_words[2];
  std::memcpy(length_words, &length, sizeof(length));
  ZERO_RETURN_IF_ERROR(comm.broadcast(length_words, 2, DType::kF32, root));
  std::memcpy(&length, length_words, sizeof(length));
  std::vector<float> words((length + sizeof(float) - 1) / sizeof(float));
  if (comm.rank() == root) std::memcpy(words.data(), text.data(), text.size());
  ZERO_RETURN_IF_ERROR(comm.broadcast(words.data(), words.size(), DType::kF32, root));
  text.assign(reinterpret_cast<const char*>(words.data()), length);
  return ok_status();
}

}  // namespace

int agree_to_start(Communicator& comm, int local_exit_code, const std::string& local_error,
                   const RunFingerprint& fingerprint, std::FILE* err) {
  const int rank = comm.rank(), world = comm.world_size();
  if (world == 1) {
    if (local_exit_code != 0) {
      std::fprintf(err, "%s\n", rank_error_line(rank, world, local_error).c_str());
    }
    return local_exit_code;
  }
  Outcome mine;
  mine.exit_code = static_cast<uint64_t>(local_exit_code);
  mine.error_hash = local_exit_code != 0 ? XXH3_64bits(local_error.data(), local_error.size()) : 0;
  mine.fingerprint_hash = local_exit_code == 0 ? fingerprint_hash(fingerprint) : 0;
  std::vector<Outcome> all(static_cast<size_t>(world));
  Status s = comm.all_gather(&mine, all.data(), kOutcomeFloats, DType::kF32);
  if (!s.ok()) {
    if (local_exit_code != 0) {
      std::fprintf(err, "%s\n", rank_error_line(rank, world, local_error).c_str());
    }
    std::fprintf(
        err, "%s\n",
        rank_error_line(rank, world, "comparing the ranks' start-up: " + s.message()).c_str());
    return local_exit_code != 0 ? local_exit_code : 1;
  }

  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (all[static_cast<size_t>(r)].exit_code != 0) failed.push_back(r);
  }
  if (!failed.empty()) {
    if (local_exit_code != 0) {
      bool said_by_lower_rank = false;
      for (int r : failed) {
        if (r < rank && all[static_cast<size_t>(r)].error_hash == mine.error_hash) {
          said_by_lower_rank = true;
        }
      }
      if (!said_by_lower_rank) {
        std::fprintf(err, "%s\n", rank_error_line(rank, world, local_error).c_str());
      }
      return local_exit_code;
    }
    if (rank == 0) {
      std::string ranks;
      for (int r : failed) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      const std::string msg =
          fmt::format("stopping every rank: rank{} {} failed to start (error above)",
                      failed.size() > 1 ? "s" : "", ranks);
      std::fprintf(err, "%s\n", rank_error_line(0, world, msg).c_str());
    }
    return static_cast<int>(all[static_cast<size_t>(failed.front())].exit_code);
  }

  int differing = -1;
  for (int r = 1; r < world && differing < 0; ++r) {
    if (all[static_cast<size_t>(r)].fingerprint_hash != all[0].fingerprint_hash) differing = r;
  }
  if (differing < 0) return 0;
  std::string theirs = rank == differing ? serialize_fingerprint(fingerprint) : std::string();
  s = broadcast_text(comm, differing, theirs);
  if (rank == 0) {
    std::string diff = s.ok()
                           ? first_difference(fingerprint, 0, parse_fingerprint(theirs), differing)
                           : std::string();
    if (diff.empty()) diff = fmt::format("rank {}'s settings differ from rank 0's", differing);
    const std::string msg = fmt::format(
        "the ranks were started with different settings (every rank must run the same command "
        "and config): {}",
        diff);
    std::fprintf(err, "%s\n", rank_error_line(0, world, msg).c_str());
  }
  return 2;
}

}  // namespace zero::runtime
