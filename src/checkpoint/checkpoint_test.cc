// Checkpoint layer at a world of one: round trip, resharded reads, crash safety under injected
// faults and a real SIGKILL, corruption / truncation / incompatible-model errors, pruning, and the
// hand-built fixture of docs/formats/checkpoint.md.
#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <xxhash.h>

#include "comm/self_communicator.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = ZERO_SOURCE_DIR;

std::string temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("zero_ckpt_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A model and per-unit full buffers whose values encode (unit, element, which) so any misplaced
// element shows up.
struct Fixture {
  model::ModelLayout layout;
  sharding::ShardLayout shards;
  std::vector<std::vector<float>> master, m, v;

  explicit Fixture(const model::ModelConfig& config, float salt = 0.0f)
      : layout(config), shards(layout, 1, 0) {
    for (int u = 0; u < layout.num_units(); ++u) {
      const size_t n = static_cast<size_t>(shards.unit(u).padded_numel);
      master.emplace_back(n, 0.0f);
      m.emplace_back(n, 0.0f);
      v.emplace_back(n, 0.0f);
      for (size_t i = 0; i < static_cast<size_t>(layout.unit(u).numel); ++i) {
        master[u][i] = salt + static_cast<float>(u) * 1000.0f + static_cast<float>(i) * 0.25f;
        m[u][i] = -master[u][i];
        v[u][i] = master[u][i] * 0.5f + 1.0f;
      }
    }
  }

  SaveRequest request(const std::string& out, int64_t step) const {
    SaveRequest r;
    r.out_dir = out;
    r.tag = default_tag(step);
    r.layout = &layout;
    r.shard_layout = &shards;
    r.stage = 1;
    r.state = {{"global_step", step}, {"optimizer_updates", step}};
    for (int u = 0; u < layout.num_units(); ++u) {
      r.partitions.push_back(
          {0, shards.unit(u).padded_numel, master[u].data(), m[u].data(), v[u].data(), {}});
    }
    return r;
  }
};

model::ModelConfig tiny_config() {
  auto c = model::load_model_config(kSrc + "/tests/fixtures/golden/gpt2_tiny");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

std::string latest(const std::string& out) { return slurp(out + "/latest"); }

TEST(Checkpoint, RoundTripAndResumeReads) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("roundtrip");
  SelfCommunicator comm;
  auto saved = save_checkpoint(*default_storage(), comm, fx.request(out, 20));
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_FALSE(saved->replaced);
  EXPECT_EQ(latest(out), "global_step20\n");
  EXPECT_FALSE(fs::exists(out + "/global_step20.tmp"));

  // Both forms of the directory open.
  for (const std::string& dir : {out, out + "/global_step20"}) {
    auto ck = open_checkpoint(*default_storage(), dir);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    EXPECT_EQ((*ck)->tag(), "global_step20");
    EXPECT_EQ((*ck)->state()["global_step"], 20);
    ASSERT_TRUE((*ck)->check_compatible(fx.layout).ok());
    ASSERT_TRUE((*ck)->verify().ok());
    for (int u = 0; u < fx.layout.num_units(); ++u) {
      const int64_t n = fx.shards.unit(u).padded_numel;
      std::vector<float> a(n, 7.0f), b(n, 7.0f), c(n, 7.0f);
      ASSERT_TRUE((*ck)->read_partition(u, 0, n, a.data(), b.data(), c.data()).ok());
      EXPECT_EQ(0, std::memcmp(a.data(), fx.master[u].data(), n * 4)) << u;
      EXPECT_EQ(0, std::memcmp(b.data(), fx.m[u].data(), n * 4)) << u;
      EXPECT_EQ(0, std::memcmp(c.data(), fx.v[u].data(), n * 4)) << u;
      // Any sub-range (as a rank of another world size would ask for), padding included.
      for (int world : {2, 3, 4}) {
        sharding::ShardLayout other(fx.layout, world, 0);
        const int64_t shard = other.unit(u).shard_numel;
        for (int r = 0; r < world; ++r) {
          std::vector<float> part(shard);
          ASSERT_TRUE(
              (*ck)
                  ->read_partition(u, r * shard, (r + 1) * shard, part.data(), nullptr, nullptr)
                  .ok());
          for (int64_t i = 0; i < shard; ++i) {
            const int64_t e = r * shard + i;
            const float want = e < static_cast<int64_t>(fx.master[u].size()) ? fx.master[u][e] : 0;
            ASSERT_EQ(part[i], want) << "unit " << u << " world " << world << " elem " << e;
          }
        }
      }
    }
  }
  // Issue 13 item 1: saving onto an existing tag (another run's) replaces it: the newer run owns
  // the tag, and `latest` names it with the newer run's weights. Before, the save was skipped.
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out, 30)).ok());
  EXPECT_EQ(latest(out), "global_step30\n");
  Fixture other(tiny_config(), 5.0f);
  auto again = save_checkpoint(*default_storage(), comm, other.request(out, 20));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->replaced);
  EXPECT_EQ(latest(out), "global_step20\n");
  EXPECT_FALSE(fs::exists(out + "/global_step20.tmp"));
  EXPECT_FALSE(fs::exists(out + "/global_step20.replaced.tmp"));
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok());
  ASSERT_TRUE((*ck)->verify().ok());
  float x = 0;
  ASSERT_TRUE((*ck)->read_partition(0, 1, 2, &x, nullptr, nullptr).ok());
  EXPECT_EQ(x, other.master[0][1]);
  EXPECT_NE(x, fx.master[0][1]);
  fs::remove_all(out);
}

TEST(Checkpoint, SaveTotalLimitPrunesOnlyAfterPublishing) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("prune");
  SelfCommunicator comm;
  for (int64_t step : {10, 20, 30}) {
    SaveRequest r = fx.request(out, step);
    r.save_total_limit = 2;
    ASSERT_TRUE(save_checkpoint(*default_storage(), comm, r).ok());
  }
  EXPECT_FALSE(fs::exists(out + "/global_step10"));
  EXPECT_TRUE(fs::exists(out + "/global_step20/manifest.json"));
  EXPECT_TRUE(fs::exists(out + "/global_step30/manifest.json"));
  // A failing save prunes nothing.
  FaultInjectingStorage faulty(default_storage());
  faulty.fail_nth(FaultOp::kRename, 1);
  SaveRequest r = fx.request(out, 40);
  r.save_total_limit = 1;
  EXPECT_FALSE(save_checkpoint(faulty, comm, r).ok());
  EXPECT_TRUE(fs::exists(out + "/global_step20/manifest.json"));
  EXPECT_EQ(latest(out), "global_step30\n");
  fs::remove_all(out);
}

TEST(Checkpoint, TagValidationRejectsBadTags) {
  EXPECT_EQ(*parse_tag_validation("FAIL"), TagValidation::kFail);
  EXPECT_FALSE(parse_tag_validation("sometimes").ok());
  Fixture fx(tiny_config());
  SelfCommunicator comm;
  SaveRequest r = fx.request(temp_dir("badtag"), 1);
  r.tag = "../escape";
  EXPECT_EQ(save_checkpoint(*default_storage(), comm, r).status().code(),
            StatusCode::kInvalidArgument);
}

// Every write, sync and rename of a save failing in turn: the save reports it and the previous
// checkpoint stays loadable with `latest` pointing at it.
TEST(Checkpoint, InjectedFailureAtAnyStepKeepsThePreviousCheckpoint) {
  Fixture fx(tiny_config());
  Fixture newer(tiny_config(), 3.0f);
  const std::string out = temp_dir("faults");
  SelfCommunicator comm;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out, 10)).ok());
  int failures = 0;
  for (FaultOp op : {FaultOp::kWrite, FaultOp::kSync, FaultOp::kRename}) {
    for (int n = 1;; ++n) {
      FaultInjectingStorage faulty(default_storage());
      faulty.fail_nth(op, n);
      auto s = save_checkpoint(faulty, comm, newer.request(out, 20));
      if (s.ok()) {
        ASSERT_GT(n, 1);
        // The first n that no longer fails published: undo it for the next operation kind.
        EXPECT_EQ(latest(out), "global_step20\n");
        fs::remove_all(out + "/global_step20");
        ASSERT_TRUE(
            write_file_atomically(*default_storage(), out + "/latest", "global_step10\n").ok());
        break;
      }
      ++failures;
      if (latest(out) == "global_step20\n") {
        // Failed in the final fsync of OUT, after `latest` moved: the new checkpoint is complete.
        auto ck = open_checkpoint(*default_storage(), out);
        ASSERT_TRUE(ck.ok() && (*ck)->verify().ok()) << "op " << int(op) << " n " << n;
        ASSERT_TRUE(
            write_file_atomically(*default_storage(), out + "/latest", "global_step10\n").ok());
      }
      if (fs::exists(out + "/global_step20/manifest.json")) {
        // Failed after the rename (the `latest` update): the new tag is complete, latest is old.
        fs::remove_all(out + "/global_step20");
      }
      ASSERT_EQ(latest(out), "global_step10\n")
          << "op " << int(op) << " n " << n << ": " << s.status().to_string();
      auto ck = open_checkpoint(*default_storage(), out);
      ASSERT_TRUE(ck.ok()) << ck.status().to_string();
      ASSERT_TRUE((*ck)->verify().ok());
      float x = 0;
      ASSERT_TRUE((*ck)->read_partition(1, 3, 4, &x, nullptr, nullptr).ok());
      ASSERT_EQ(x, fx.master[1][3]);
    }
  }
  EXPECT_GT(failures, 5);
  // Disk full and torn writes too.
  for (uint64_t limit : {uint64_t{100}, uint64_t{5000}, uint64_t{60000}}) {
    FaultInjectingStorage faulty(default_storage());
    faulty.disk_full_after(limit);
    EXPECT_FALSE(save_checkpoint(faulty, comm, newer.request(out, 20)).ok());
    EXPECT_EQ(latest(out), "global_step10\n");
  }
  fs::remove_all(out);
}

// Storage that SIGKILLs the process at its n-th write: a real crash in the middle of a save.
class KillingStorage : public FaultInjectingStorage {
 public:
  KillingStorage(Storage* base, int64_t n) : FaultInjectingStorage(base), n_(n) {}
  StatusOr<std::unique_ptr<WritableFile>> open_write(const std::string& path) override {
    if (++opens_ == n_) ::kill(::getpid(), SIGKILL);
    return FaultInjectingStorage::open_write(path);
  }
  Status rename(const std::string& from, const std::string& to) override {
    if (++opens_ == n_) ::kill(::getpid(), SIGKILL);
    return FaultInjectingStorage::rename(from, to);
  }

 private:
  int64_t n_;
  int64_t opens_ = 0;
};

TEST(Checkpoint, Kill9DuringSaveKeepsThePreviousCheckpoint) {
  Fixture fx(tiny_config());
  Fixture newer(tiny_config(), 3.0f);
  const std::string out = temp_dir("kill9");
  SelfCommunicator comm;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out, 10)).ok());
  int killed = 0;
  for (int n = 1; n < 20; ++n) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      SelfCommunicator child_comm;
      KillingStorage storage(default_storage(), n);
      auto s = save_checkpoint(storage, child_comm, newer.request(out, 20));
      ::_exit(s.ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 0);
      break;  // n is past the save's last file operation
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    ++killed;
    // The kill may land after the tag's rename (then only `latest` is old): either way `latest`
    // names a complete, verified checkpoint.
    const std::string l = latest(out);
    ASSERT_TRUE(l == "global_step10\n" || l == "global_step20\n") << l;
    auto ck = open_checkpoint(*default_storage(), out);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    ASSERT_TRUE((*ck)->verify().ok()) << "kill at op " << n;
    if (l == "global_step20\n") break;
    fs::remove_all(out + "/global_step20");
  }
  EXPECT_GE(killed, 3);
  fs::remove_all(out);
}

TEST(Checkpoint, CorruptedTruncatedAndIncompatibleAreRefused) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("corrupt");
  SelfCommunicator comm;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out, 10)).ok());
  const std::string file = out + "/global_step10/rank_0.safetensors";
  std::string bytes = slurp(file);
  float x;
  {
    std::string bad = bytes;
    bad[bad.size() - 5] ^= 0x40;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
    auto ck = open_checkpoint(*default_storage(), out);
    ASSERT_TRUE(ck.ok());
    Status s = (*ck)->read_partition(0, 0, 1, &x, nullptr, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("rank_0.safetensors"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();
    EXPECT_FALSE((*ck)->verify().ok());
  }
  {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
    auto ck = open_checkpoint(*default_storage(), out);
    ASSERT_TRUE(ck.ok());
    Status s = (*ck)->read_partition(0, 0, 1, &x, nullptr, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("rank_0.safetensors"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  }
  {
    model::ModelConfig c = tiny_config();
    c.num_layers += 1;
    model::ModelLayout bigger(c);
    auto ck = open_checkpoint(*default_storage(), out);
    Status s = (*ck)->check_compatible(bigger);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("units in the checkpoint"), std::string::npos) << s.message();
    c = tiny_config();
    c.vocab_size += 1;
    s = (*ck)->check_compatible(model::ModelLayout(c));
    EXPECT_NE(s.message().find("'embedding'"), std::string::npos) << s.message();
  }
  EXPECT_EQ(open_checkpoint(*default_storage(), out + "/nothing").status().code(),
            StatusCode::kNotFound);
  fs::remove_all(out);
}

TEST(Checkpoint, ConsolidatedWeightsEqualTheMasterWeights) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("fp32");
  SelfCommunicator comm;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out, 10)).ok());
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok());
  for (uint64_t max_shard : {uint64_t{5} << 30, uint64_t{20000}}) {
    const std::string hf = out + "/hf" + std::to_string(max_shard);
    ASSERT_TRUE(consolidate_to_hf(*default_storage(), **ck, hf, max_shard).ok());
    auto reader = model::HfWeightReader::open(*default_storage(), hf, fx.layout);
    ASSERT_TRUE(reader.ok()) << reader.status().to_string();
    for (int u = 0; u < fx.layout.num_units(); ++u) {
      const int64_t n = fx.layout.unit(u).numel;
      std::vector<float> got(n);
      ASSERT_TRUE((*reader)->read_unit_range(u, 0, n, got.data()).ok());
      EXPECT_EQ(0, std::memcmp(got.data(), fx.master[u].data(), n * 4)) << u;
    }
  }
  // The live-partition path (world of one: nothing to gather) writes the same values.
  std::vector<UnitPartition> parts = fx.request(out, 10).partitions;
  Status saved = save_model_weights(*default_storage(), comm, out + "/bf16", fx.layout, fx.shards,
                                    parts, DType::kBF16);
  ASSERT_TRUE(saved.ok()) << saved.to_string();
  EXPECT_TRUE(fs::exists(out + "/bf16/model.safetensors"));
  fs::remove_all(out);
}

// State offloaded to NVMe is handed over as readers, not pointers: the rank file is byte for byte
// the one written from memory (hash included), and each reader call fills one tensor only.
TEST(Checkpoint, StreamedPartitionsWriteTheSameFile) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("streamed");
  SelfCommunicator comm;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out + "/mem", 3)).ok());
  SaveRequest streamed = fx.request(out + "/streamed", 3);
  int calls = 0;
  for (size_t u = 0; u < streamed.partitions.size(); ++u) {
    UnitPartition& p = streamed.partitions[u];
    p.master = p.exp_avg = p.exp_avg_sq = nullptr;
    p.read = [&fx, &calls, u, n = p.numel](float* master, float* m, float* v) {
      EXPECT_EQ((master != nullptr) + (m != nullptr) + (v != nullptr), 1);
      ++calls;
      const std::vector<float>& src = master ? fx.master[u] : m ? fx.m[u] : fx.v[u];
      std::memcpy(master ? master : m ? m : v, src.data(), static_cast<size_t>(n) * 4);
      return ok_status();
    };
  }
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, streamed).ok());
  EXPECT_EQ(calls, 3 * fx.layout.num_units());
  EXPECT_EQ(slurp(out + "/mem/global_step3/rank_0.safetensors"),
            slurp(out + "/streamed/global_step3/rank_0.safetensors"));
  // A failing reader fails the save and publishes nothing.
  SaveRequest failing = streamed;
  failing.out_dir = out + "/failing";
  failing.partitions[1].read = [](float*, float*, float*) { return io_error("disk gone"); };
  auto r = save_checkpoint(*default_storage(), comm, failing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disk gone"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(out + "/failing/latest"));
  fs::remove_all(out);
}

// docs/formats/checkpoint.md: hand-built bytes (tests/fixtures/checkpoint/make_fixture.py).
// A file system without renameat2(RENAME_EXCHANGE): the replacement falls back to two renames.
class NoExchangeStorage : public FaultInjectingStorage {
 public:
  NoExchangeStorage() : FaultInjectingStorage(default_storage()) {}
  Status exchange(const std::string& a, const std::string& b) override {
    return unimplemented("{} <-> {}: no exchange here", a, b);
  }
};

TEST(Checkpoint, ReplacingATagWithoutRenameExchange) {
  Fixture fx(tiny_config());
  Fixture other(tiny_config(), 5.0f);
  const std::string out = temp_dir("no_exchange");
  SelfCommunicator comm;
  NoExchangeStorage storage;
  ASSERT_TRUE(save_checkpoint(storage, comm, fx.request(out, 20)).ok());
  auto again = save_checkpoint(storage, comm, other.request(out, 20));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->replaced);
  EXPECT_FALSE(fs::exists(out + "/global_step20.replaced.tmp"));
  EXPECT_FALSE(fs::exists(out + "/global_step20.tmp"));
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok());
  float x = 0;
  ASSERT_TRUE((*ck)->read_partition(0, 1, 2, &x, nullptr, nullptr).ok());
  EXPECT_EQ(x, other.master[0][1]);
  fs::remove_all(out);
}

std::string with_manifest_hash(nlohmann::json m) {
  m.erase("manifest_xxh3");
  const std::string canonical = m.dump();
  m["manifest_xxh3"] = fmt::format("{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
  return m.dump(1);
}

// Issue 13 item 7: the manifest carries its own checksum; an edited manifest is refused, and one
// whose checksum was recomputed after the edit still fails the structural checks below.
TEST(Checkpoint, EditedManifestIsRefused) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("manifest_hash");
  SelfCommunicator comm;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, fx.request(out, 10)).ok());
  const std::string path = out + "/global_step10/manifest.json";
  nlohmann::json m = nlohmann::json::parse(slurp(path));
  EXPECT_EQ(m["format_version"], 2);
  EXPECT_EQ(m["optimizer"]["type"], "adamw");
  m["state"]["global_step"] = 11;
  std::ofstream(path, std::ios::trunc) << m.dump(1);
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ck.status().message().find("manifest_xxh3"), std::string::npos)
      << ck.status().message();
  // Re-hashed, the same edit opens (the checksum is over content, not formatting).
  std::ofstream(path, std::ios::trunc) << with_manifest_hash(m);
  ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->state()["global_step"], 11);
  fs::remove_all(out);
}

// Issue 13 item 7: a manifest listing rank 0's file twice (rank 1's dropped) passed `verify` and
// resumed with rank 0's data in rank 1's ranges. Each entry must be its rank's file.
TEST(Checkpoint, OneRankFileListedTwiceIsRefused) {
  const std::string out = temp_dir("twice");
  fs::copy(kSrc + "/tests/fixtures/checkpoint/hand_built", out, fs::copy_options::recursive);
  const std::string path = out + "/global_step7/manifest.json";
  nlohmann::json m = nlohmann::json::parse(slurp(path));
  m["files"][1]["name"] = "rank_0.safetensors";
  m["files"][1]["bytes"] = m["files"][0]["bytes"];
  m["files"][1]["xxh3"] = m["files"][0]["xxh3"];
  for (bool rehash : {false, true}) {
    std::ofstream(path, std::ios::trunc) << (rehash ? with_manifest_hash(m) : m.dump(1));
    if (rehash) {
      nlohmann::json v2 = nlohmann::json::parse(slurp(path));
      v2["format_version"] = 2;
      std::ofstream(path, std::ios::trunc) << with_manifest_hash(v2);
    }
    auto ck = open_checkpoint(*default_storage(), out);
    ASSERT_FALSE(ck.ok()) << rehash;
    EXPECT_EQ(ck.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(ck.status().message().find("files[1] is 'rank_0.safetensors'"), std::string::npos)
        << ck.status().message();
  }
  // Ranges that overlap (rank 1 claiming rank 0's elements) are refused at open, not only by
  // verify.
  m = nlohmann::json::parse(slurp(kSrc + "/tests/fixtures/checkpoint/hand_built/global_step7/"
                                         "manifest.json"));
  m["files"][1]["ranges"][0] = {0, 2};
  std::ofstream(path, std::ios::trunc) << m.dump(1);
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("unit 'a'"), std::string::npos) << ck.status().message();
  fs::remove_all(out);
}

// Issue 13 item 7: rank 0's file copied over rank 1's, with the manifest's size and checksum of
// rank 1 updated to match (and the manifest re-hashed), is refused by the file's own rank.
TEST(Checkpoint, AnotherRanksFileUnderThisRanksNameIsRefused) {
  const std::string out = temp_dir("copied");
  fs::copy(kSrc + "/tests/fixtures/checkpoint/hand_built", out, fs::copy_options::recursive);
  const std::string tag = out + "/global_step7";
  fs::copy_file(tag + "/rank_0.safetensors", tag + "/rank_1.safetensors",
                fs::copy_options::overwrite_existing);
  const std::string bytes = slurp(tag + "/rank_1.safetensors");
  nlohmann::json m = nlohmann::json::parse(slurp(tag + "/manifest.json"));
  m["files"][1]["bytes"] = bytes.size();
  m["files"][1]["xxh3"] = fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
  m["format_version"] = 2;
  std::ofstream(tag + "/manifest.json", std::ios::trunc) << with_manifest_hash(m);
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  Status s = (*ck)->verify();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("holds rank 0's shards, the manifest lists it as rank 1's"),
            std::string::npos)
      << s.message();
  fs::remove_all(out);
}

// Issue 13 item 7: resuming AdamW moments under Lamb, other betas or another dtype is refused,
// naming both values.
TEST(Checkpoint, OtherOptimizerBetasOrDtypeAreRefused) {
  Fixture fx(tiny_config());
  const std::string out = temp_dir("check_run");
  SelfCommunicator comm;
  SaveRequest r = fx.request(out, 10);
  r.model_dtype = DType::kBF16;
  r.beta1 = 0.9;
  r.beta2 = 0.95;
  ASSERT_TRUE(save_checkpoint(*default_storage(), comm, r).ok());
  auto ck = open_checkpoint(*default_storage(), out);
  ASSERT_TRUE(ck.ok());
  RunIdentity same{"adamw", 0.9, 0.95, DType::kBF16};
  EXPECT_TRUE((*ck)->check_run(same).ok()) << (*ck)->check_run(same).to_string();
  RunIdentity lamb = same;
  lamb.optimizer_type = "lamb";
  Status s = (*ck)->check_run(lamb);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'adamw', this run uses 'lamb'"), std::string::npos) << s.message();
  RunIdentity betas = same;
  betas.beta2 = 0.999;
  s = (*ck)->check_run(betas);
  EXPECT_NE(s.message().find("[0.9,0.95], this run uses [0.9, 0.999]"), std::string::npos)
      << s.message();
  RunIdentity f32 = same;
  f32.model_dtype = DType::kF32;
  s = (*ck)->check_run(f32);
  EXPECT_NE(s.message().find("bf16 run, this run is f32"), std::string::npos) << s.message();
  fs::remove_all(out);
}

TEST(Checkpoint, ReadsTheHandBuiltFixture) {
  const std::string dir = kSrc + "/tests/fixtures/checkpoint/hand_built";
  auto ck = open_checkpoint(*default_storage(), dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->tag(), "global_step7");
  EXPECT_EQ((*ck)->world_size(), 2);
  ASSERT_TRUE((*ck)->verify().ok()) << (*ck)->verify().to_string();
  // Unit "a": 5 elements, value of element i = i + 0.5 (master), -(i + 0.5) exp_avg, 2i exp_avg_sq
  // Unit "b": 3 elements, value 100 + i; rank 0 holds a[0,3) b[0,2), rank 1 a[3,5) b[2,3).
  std::vector<float> m(8), e(8), v(8);
  ASSERT_TRUE((*ck)->read_partition(0, 1, 7, m.data(), e.data(), v.data()).ok());
  for (int i = 0; i < 6; ++i) {
    const int el = i + 1;
    EXPECT_EQ(m[i], el < 5 ? el + 0.5f : 0.0f) << i;
    EXPECT_EQ(e[i], el < 5 ? -(el + 0.5f) : 0.0f) << i;
    EXPECT_EQ(v[i], el < 5 ? 2.0f * el : 0.0f) << i;
  }
  ASSERT_TRUE((*ck)->read_partition(1, 0, 3, m.data(), nullptr, nullptr).ok());
  EXPECT_EQ(m[0], 100.0f);
  EXPECT_EQ(m[1], 101.0f);
  EXPECT_EQ(m[2], 102.0f);
}

}  // namespace
}  // namespace zero::checkpoint
