// Sharded checkpoints: the save protocol, the manifest, resharding reads (checkpoint.h).
#include "checkpoint/checkpoint.h"
#include "checkpoint/deepspeed_dir.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace zero::checkpoint {
namespace {

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string rank_file_name(int r) { return fmt::format("rank_{}.safetensors", r); }
std::string tensor_name(const std::string& unit, const char* what) { return unit + "." + what; }

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

StatusOr<uint64_t> parse_hex64(const std::string& s, const std::string& where) {
  if (s.size() != 16) return invalid_argument("{}: checksum '{}' is not 16 hex digits", where, s);
  uint64_t v = 0;
  for (char c : s) {
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                                                        : -1;
    if (d < 0) return invalid_argument("{}: checksum '{}' is not lowercase hex", where, s);
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

// A fixed-size record every rank contributes to an all-gather (moved as raw bytes).
struct Record {
  uint64_t code = 0;  // 0 ok, 1 "already exists" (prepare step only), 2 failed
  uint64_t hash = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(Record) % sizeof(float) == 0);
constexpr size_t kRecordFloats = sizeof(Record) / sizeof(float);

// All-gathers one record per rank. fp32 all-gather moves bytes verbatim, so any bits survive.
StatusOr<std::vector<Record>> gather_records(Communicator& comm, const Record& mine) {
  std::vector<Record> all(static_cast<size_t>(comm.world_size()));
  ZERO_RETURN_IF_ERROR(comm.all_gather(&mine, all.data(), kRecordFloats, DType::kF32));
  return all;
}

// Every rank learns whether every rank succeeded: returns the local error, else the first remote.
Status agree(Communicator& comm, const Status& local, const std::string& what) {
  Record mine;
  mine.code = local.ok() ? 0 : 2;
  auto all = gather_records(comm, mine);
  if (!all.ok()) return all.status().with_context(what);
  if (!local.ok()) return local;
  for (size_t r = 0; r < all->size(); ++r) {
    if ((*all)[r].code != 0) {
      return io_error("{} failed on rank {} (see that rank's log)", what, r);
    }
  }
  return ok_status();
}

bool is_leader(const Communicator& comm, bool node_local) {
  return node_local ? comm.local_rank() == 0 : comm.rank() == 0;
}

// The real elements rank r stores of unit u: its ShardLayout shard, clipped to the unit's numel.
std::pair<int64_t, int64_t> shard_range(const sharding::ShardLayout& l, int u, int r) {
  return {l.shard_begin(u, r), l.shard_data_numel(u, r)};
}

Status write_rank_file(Storage& storage, const SaveRequest& req, int rank, const std::string& path,
                       uint64_t* bytes, uint64_t* hash) {
  const sharding::ShardLayout& sl = *req.shard_layout;
  const model::ModelLayout& ml = *req.layout;
  SafetensorsWriter writer;
  writer.set_metadata("format", kFormatName);
  writer.set_metadata("rank", std::to_string(rank));
  writer.set_metadata("world_size", std::to_string(sl.world_size()));
  for (int u = 0; u < ml.num_units(); ++u) {
    const UnitPartition& p = req.partitions[static_cast<size_t>(u)];
    auto [begin, numel] = shard_range(sl, u, rank);
    if (numel == 0) continue;
    if (begin < p.begin || begin + numel > p.begin + p.numel) {
      return invalid_argument(
          "checkpoint save: rank {} partition [{}, {}) of unit '{}' does not cover its shard "
          "[{}, {})",
          rank, p.begin, p.begin + p.numel, ml.unit(u).name, begin, begin + numel);
    }
    const int64_t off = begin - p.begin;
    const int64_t count = numel;  // clang 14 cannot capture a structured binding
    const std::string& name = ml.unit(u).name;
    if (!p.master && !p.exp_avg && !p.exp_avg_sq && p.read) {
      // Streamed: each tensor is read (e.g. from NVMe) just before it is appended.
      for (int k = 0; k < 3; ++k) {
        static constexpr const char* kKinds[3] = {"master", "exp_avg", "exp_avg_sq"};
        ZERO_RETURN_IF_ERROR(writer.add_streamed(
            tensor_name(name, kKinds[k]), SafetensorsDType::kF32, {numel},
            [&p, k, off, count](WritableFile& file) -> Status {
              std::vector<float> buf(static_cast<size_t>(p.numel));
              float* dst[3] = {nullptr, nullptr, nullptr};
              dst[k] = buf.data();
              ZERO_RETURN_IF_ERROR(p.read(dst[0], dst[1], dst[2]));
              return file.append(buf.data() + off, static_cast<size_t>(count) * sizeof(float));
            }));
      }
      continue;
    }
    if (!p.master || !p.exp_avg || !p.exp_avg_sq) {
      return invalid_argument("checkpoint save: unit '{}' has a null partition pointer",
                              ml.unit(u).name);
    }
    ZERO_RETURN_IF_ERROR(
        writer.add(tensor_name(name, "master"), SafetensorsDType::kF32, {numel}, p.master + off));
    ZERO_RETURN_IF_ERROR(
        writer.add(tensor_name(name, "exp_avg"), SafetensorsDType::kF32, {numel}, p.exp_avg + off));
    ZERO_RETURN_IF_ERROR(writer.add(tensor_name(name, "exp_avg_sq"), SafetensorsDType::kF32,
                                    {numel}, p.exp_avg_sq + off));
  }
  ZERO_RETURN_IF_ERROR(writer.write(storage, path, /*sync=*/true));
  ZERO_ASSIGN_OR_RETURN(*bytes, storage.file_size(path));
  // Hash what reached the file system (one extra sequential read of the file).
  ZERO_ASSIGN_OR_RETURN(*hash, hash_file(storage, path));
  return ok_status();
}

int64_t manifest_step(Storage& storage, const std::string& tag_dir) {
  auto text = read_file(storage, join(tag_dir, "manifest.json"), kMaxMetadataFileBytes);
  if (!text.ok()) return -1;
  nlohmann::json m = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("state") || !m["state"].is_object()) return -1;
  const nlohmann::json& s = m["state"];
  return s.contains("global_step") && s["global_step"].is_number_integer()
             ? s["global_step"].get<int64_t>()
             : -1;
}

// Keeps the newest `limit` published tags (by global_step, then name); never the one just saved.
void prune(Storage& storage, const std::string& out_dir, const std::string& keep, int limit) {
  auto entries = storage.list_dir(out_dir);
  if (!entries.ok()) {
    spdlog::warn("checkpoint: not pruning {}: {}", out_dir, entries.status().to_string());
    return;
  }
  std::vector<std::pair<int64_t, std::string>> tags;
  for (const std::string& e : *entries) {
    if (e == keep || e.ends_with(".tmp")) continue;
    const std::string dir = join(out_dir, e);
    if (!storage.file_exists(join(dir, "manifest.json"))) continue;
    tags.emplace_back(manifest_step(storage, dir), e);
  }
  std::sort(tags.begin(), tags.end());
  const int excess = static_cast<int>(tags.size()) + 1 - limit;
  for (int i = 0; i < excess; ++i) {
    Status s = storage.remove_dir(join(out_dir, tags[static_cast<size_t>(i)].second));
    if (!s.ok()) spdlog::warn("checkpoint: pruning: {}", s.to_string());
  }
}

// xxh3 of the manifest without its "manifest_xxh3" key, over the compact dump of the parsed
// JSON: independent of the file's whitespace, and equal on both sides because numbers print in
// shortest round-trip form.
uint64_t manifest_hash(nlohmann::json manifest) {
  manifest.erase("manifest_xxh3");
  const std::string canonical = manifest.dump();
  return XXH3_64bits(canonical.data(), canonical.size());
}

// Puts the complete checkpoint `tmp_dir` at `tag_dir`. A tag that exists (an earlier run's) is
// swapped out in one atomic exchange, so `tag_dir` names a complete checkpoint at every instant;
// without RENAME_EXCHANGE the old one is first moved aside (a crash between the two renames
// leaves it under <tag>.replaced.tmp). *old_dir receives what to remove after `latest` is written.
Status put_in_place(Storage& storage, const std::string& tmp_dir, const std::string& tag_dir,
                    std::string* old_dir) {
  old_dir->clear();
  if (!storage.file_exists(tag_dir)) return storage.rename(tmp_dir, tag_dir);
  Status x = storage.exchange(tmp_dir, tag_dir);
  if (x.ok()) {
    *old_dir = tmp_dir;
    return ok_status();
  }
  if (x.code() != StatusCode::kUnimplemented) return x;
  const std::string aside = tag_dir + ".replaced.tmp";
  ZERO_RETURN_IF_ERROR(storage.remove_dir(aside));
  ZERO_RETURN_IF_ERROR(storage.rename(tag_dir, aside));
  *old_dir = aside;
  return storage.rename(tmp_dir, tag_dir);
}

// Leader only: manifest into the temporary directory, then rename and `latest`.
Status publish(Storage& storage, const SaveRequest& req, const std::vector<Record>& records,
               const std::string& tmp_dir, const std::string& tag_dir) {
  const sharding::ShardLayout& sl = *req.shard_layout;
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < sl.world_size(); ++r) {
    nlohmann::json ranges = nlohmann::json::array();
    for (int u = 0; u < sl.num_units(); ++u) {
      auto [b, n] = shard_range(sl, u, r);
      ranges.push_back({b, n});
    }
    const Record& rec = records[static_cast<size_t>(r)];
    files.push_back({{"name", rank_file_name(r)},
                     {"rank", r},
                     {"bytes", rec.bytes},
                     {"xxh3", hex64(rec.hash)},
                     {"ranges", std::move(ranges)}});
  }
  nlohmann::json manifest = {
      {"format", kFormatName},
      {"format_version", kFormatVersion},
      {"tag", req.tag},
      {"world_size", sl.world_size()},
      {"stage", req.stage},
      {"dtypes",
       {{"model", std::string(dtype_name(req.model_dtype))},
        {"master", "f32"},
        {"optimizer_state", "f32"}}},
      {"shard_layout", sl.to_json(*req.layout)},
      {"model_config", model::model_config_to_json(req.layout->config())},
      {"state", req.state},
      {"effective_config", req.effective_config},
      {"optimizer",
       {{"type", req.optimizer_type}, {"betas", nlohmann::json::array({req.beta1, req.beta2})}}},
      {"files", std::move(files)},
  };
  // The model's generation_config.json (EOS ids, sampling defaults) travels with the checkpoint,
  // so `zero ckpt to-fp32` writes the one the model came with, not one made from config.json.
  if (req.layout->config().generation_config.is_object()) {
    manifest["generation_config"] = req.layout->config().generation_config;
  }
  // A multimodal model's vision tower is not in the checkpoint: saving it as an HF model copies it
  // from the directory the model was read from.
  if (!req.layout->config().multimodal_type.empty()) {
    manifest["model_source_dir"] = req.layout->config().source_dir;
  }
  manifest["manifest_xxh3"] = hex64(manifest_hash(manifest));
  ZERO_RETURN_IF_ERROR(
      write_file_atomically(storage, join(tmp_dir, "manifest.json"), manifest.dump(1) + "\n"));
  ZERO_RETURN_IF_ERROR(storage.sync_dir(tmp_dir));
  std::string old_dir;
  ZERO_RETURN_IF_ERROR(put_in_place(storage, tmp_dir, tag_dir, &old_dir));
  ZERO_RETURN_IF_ERROR(storage.sync_dir(req.out_dir));
  // `latest` last: until this rename lands, readers still see the previous checkpoint.
  ZERO_RETURN_IF_ERROR(write_file_atomically(storage, join(req.out_dir, "latest"), req.tag + "\n"));
  if (!old_dir.empty()) {
    Status s = storage.remove_dir(old_dir);
    if (!s.ok()) spdlog::warn("checkpoint: removing the replaced {}: {}", old_dir, s.to_string());
  }
  return ok_status();
}

uint64_t tag_hash(const std::string& tag) { return XXH3_64bits(tag.data(), tag.size()); }

}  // namespace

StatusOr<TagValidation> parse_tag_validation(const std::string& text) {
  std::string t = text;
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "ignore") return TagValidation::kIgnore;
  if (t == "warn") return TagValidation::kWarn;
  if (t == "fail") return TagValidation::kFail;
  return invalid_argument("checkpoint.tag_validation: '{}' is not one of Ignore, Warn, Fail", text);
}

std::string default_tag(int64_t global_step) { return fmt::format("global_step{}", global_step); }

StatusOr<uint64_t> hash_file(Storage& storage, const std::string& path) {
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, storage.open_read(path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), XXH3_freeState);
  if (!st || XXH3_64bits_reset(st.get()) != XXH_OK) return internal_error("xxh3: no state");
  constexpr size_t kChunk = 1 << 20;
  std::vector<char> buf(kChunk);
  const uint64_t size = f->size();
  for (uint64_t off = 0; off < size; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
    ZERO_RETURN_IF_ERROR(f->read_at(off, n, buf.data()));
    XXH3_64bits_update(st.get(), buf.data(), n);
  }
  return static_cast<uint64_t>(XXH3_64bits_digest(st.get()));
}

StatusOr<SaveResult> save_checkpoint(Storage& storage, Communicator& comm, const SaveRequest& req) {
  if (!req.layout || !req.shard_layout) return invalid_argument("checkpoint save: no layout");
  if (req.shard_layout->world_size() != comm.world_size()) {
    return invalid_argument("checkpoint save: shard layout is for {} ranks, the world has {}",
                            req.shard_layout->world_size(), comm.world_size());
  }
  if (static_cast<int>(req.partitions.size()) != req.layout->num_units()) {
    return invalid_argument("checkpoint save: {} partitions for {} units", req.partitions.size(),
                            req.layout->num_units());
  }
  if (req.tag.empty() || req.tag.find('/') != std::string::npos || req.tag.ends_with(".tmp") ||
      req.tag == "." || req.tag == ".." || req.tag == "latest") {
    return invalid_argument("checkpoint save: invalid tag '{}'", req.tag);
  }
  const int rank = comm.rank();
  const bool leader = is_leader(comm, req.node_local_storage);
  const std::string tag_dir = join(req.out_dir, req.tag);
  const std::string tmp_dir = tag_dir + ".tmp";

  // 1. Tag validation: every rank sees every rank's tag hash, so all decide alike.
  if (req.tag_validation != TagValidation::kIgnore) {
    Record mine;
    mine.hash = tag_hash(req.tag);
    ZERO_ASSIGN_OR_RETURN(std::vector<Record> all, gather_records(comm, mine));
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].hash == mine.hash) continue;
      if (req.tag_validation == TagValidation::kFail) {
        return invalid_argument(
            "checkpoint save: rank {} uses a different tag than rank {} ('{}') "
            "(checkpoint.tag_validation = Fail)",
            r, rank, req.tag);
      }
      if (rank == 0) spdlog::warn("checkpoint: rank {} saves under a different tag", r);
    }
  }

  // 2. The leader prepares the temporary directory. The all-gather after it is the barrier that
  // keeps ranks from writing into a directory that does not exist yet.
  Record prep;
  Status prep_status;
  bool replacing = false;
  if (leader) {
    // An existing tag (an earlier run's, e.g. after resuming from an older tag) is replaced at
    // publication: a save is never skipped, so `latest` always names this run's newest state.
    replacing = storage.file_exists(join(tag_dir, "manifest.json"));
    if (replacing) {
      prep_status = storage.remove_dir(tmp_dir);  // a crashed save's leftover
      if (prep_status.ok()) prep_status = storage.make_dirs(tmp_dir);
    } else if (storage.file_exists(tag_dir)) {
      prep_status = failed_precondition(
          "checkpoint save: {} exists but holds no manifest.json (not a checkpoint of ours?)",
          tag_dir);
    } else {
      prep_status = storage.make_dirs(req.out_dir);
      if (prep_status.ok()) prep_status = storage.remove_dir(tmp_dir);  // a crashed save's leftover
      if (prep_status.ok()) prep_status = storage.make_dirs(tmp_dir);
    }
    if (!prep_status.ok()) prep.code = 2;
  }
  if (replacing) prep.code = 1;
  ZERO_ASSIGN_OR_RETURN(std::vector<Record> preps, gather_records(comm, prep));
  if (!prep_status.ok()) return prep_status;
  for (size_t r = 0; r < preps.size(); ++r) {
    if (preps[r].code == 2)
      return io_error("checkpoint save: preparing {} failed on rank {}", tmp_dir, r);
    if (preps[r].code == 1) replacing = true;
  }

  // 3. Every rank writes its own file in parallel.
  Record mine;
  Status write_status = write_rank_file(storage, req, rank, join(tmp_dir, rank_file_name(rank)),
                                        &mine.bytes, &mine.hash);
  if (!write_status.ok()) mine.code = 2;

  // 4. Records to everyone (the leader needs them for the manifest; all need the outcome).
  ZERO_ASSIGN_OR_RETURN(std::vector<Record> records, gather_records(comm, mine));
  Status all_written = write_status;
  for (size_t r = 0; all_written.ok() && r < records.size(); ++r) {
    if (records[r].code != 0) {
      all_written = io_error("checkpoint save: writing {} failed on rank {}",
                             join(tmp_dir, rank_file_name(static_cast<int>(r))), r);
    }
  }
  if (!all_written.ok()) {
    if (leader) (void)storage.remove_dir(tmp_dir);  // best effort; `latest` is untouched
    return all_written;
  }

  // 5. Publish (leader), 6. agree on the outcome.
  Status pub;
  if (leader) {
    pub = publish(storage, req, records, tmp_dir, tag_dir);
    if (pub.ok() && req.save_total_limit > 0) {
      prune(storage, req.out_dir, req.tag, req.save_total_limit);
    }
  }
  ZERO_RETURN_IF_ERROR(agree(comm, pub, "checkpoint save: publishing " + tag_dir));
  return SaveResult{replacing, tag_dir};
}

// ---------------------------------------------------------------------------------------------
// Loading.

StatusOr<std::unique_ptr<LoadedCheckpoint>> open_checkpoint(Storage& storage,
                                                            const std::string& dir,
                                                            const std::string& tag,
                                                            bool verify_checksums) {
  // A DeepSpeed checkpoint is named, with the command that converts it (deepspeed_dir.h).
  ZERO_RETURN_IF_ERROR(refuse_deepspeed_checkpoint(storage, dir, tag));
  std::string tag_dir;
  if (!tag.empty()) {
    tag_dir = join(dir, tag);
  } else if (storage.file_exists(join(dir, "manifest.json"))) {
    tag_dir = dir;
  } else if (storage.file_exists(join(dir, "latest"))) {
    ZERO_ASSIGN_OR_RETURN(std::string text,
                          read_file(storage, join(dir, "latest"), kMaxMetadataFileBytes));
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (text.empty() || text.find('/') != std::string::npos) {
      return data_loss("{}: does not hold a checkpoint tag", join(dir, "latest"));
    }
    tag_dir = join(dir, text);
  } else {
    return not_found("{}: no checkpoint here (neither `latest` nor manifest.json)", dir);
  }
  const std::string mpath = join(tag_dir, "manifest.json");
  ZERO_ASSIGN_OR_RETURN(std::string text, read_file(storage, mpath, kMaxMetadataFileBytes));
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return data_loss("{}: not valid JSON", mpath);

  std::unique_ptr<LoadedCheckpoint> c(new LoadedCheckpoint(storage));
  c->tag_dir_ = tag_dir;
  c->verify_on_open_ = verify_checksums;
  try {
    if (m.value("format", std::string()) != kFormatName) {
      return invalid_argument("{}: format is '{}', expected '{}'", mpath,
                              m.value("format", std::string()), kFormatName);
    }
    const int version = m.at("format_version").get<int>();
    if (version < kOldestReadableFormatVersion || version > kFormatVersion) {
      return invalid_argument("{}: format_version {} is not supported (this build reads {} to {})",
                              mpath, version, kOldestReadableFormatVersion, kFormatVersion);
    }
    if (version >= 2) {
      ZERO_ASSIGN_OR_RETURN(uint64_t want,
                            parse_hex64(m.at("manifest_xxh3").get<std::string>(), mpath));
      const uint64_t got = manifest_hash(m);
      if (got != want) {
        return data_loss(
            "{}: the manifest's xxh3 is {}, manifest_xxh3 says {} (edited or corrupted)", mpath,
            hex64(got), hex64(want));
      }
    }
    c->tag_ = m.at("tag").get<std::string>();
    c->world_size_ = m.at("world_size").get<int>();
    c->stage_ = m.at("stage").get<int>();
    for (const auto& u : m.at("shard_layout").at("units")) {
      c->unit_names_.push_back(u.at("name").get<std::string>());
      c->unit_numel_.push_back(u.at("numel").get<int64_t>());
    }
    const auto& files = m.at("files");
    if (static_cast<int>(files.size()) != c->world_size_) {
      return data_loss("{}: lists {} files for world size {}", mpath, files.size(), c->world_size_);
    }
    for (const auto& f : files) {
      RankFile rf;
      rf.name = f.at("name").get<std::string>();
      // Entry r is rank r's file and nothing else: a list naming one file twice would load one
      // rank's data into another rank's ranges.
      const int r = static_cast<int>(c->files_.size());
      if (rf.name != rank_file_name(r) || (f.contains("rank") && f.at("rank").get<int>() != r)) {
        return data_loss("{}: files[{}] is '{}' (rank {}), expected {} of rank {}", mpath, r,
                         rf.name, f.contains("rank") ? f.at("rank").dump() : "?", rank_file_name(r),
                         r);
      }
      rf.bytes = f.at("bytes").get<uint64_t>();
      ZERO_ASSIGN_OR_RETURN(rf.xxh3, parse_hex64(f.at("xxh3").get<std::string>(), mpath));
      for (const auto& r : f.at("ranges")) {
        rf.ranges.emplace_back(r.at(0).get<int64_t>(), r.at(1).get<int64_t>());
      }
      if (rf.ranges.size() != c->unit_numel_.size()) {
        return data_loss("{}: {} has {} ranges for {} units", mpath, rf.name, rf.ranges.size(),
                         c->unit_numel_.size());
      }
      for (size_t u = 0; u < rf.ranges.size(); ++u) {
        auto [b, n] = rf.ranges[u];
        if (b < 0 || n < 0 || (n > 0 && b + n > c->unit_numel_[u])) {
          return data_loss("{}: {} range [{}, {}) of unit '{}' lies outside its {} elements", mpath,
                           rf.name, b, b + n, c->unit_names_[u], c->unit_numel_[u]);
        }
      }
      c->files_.push_back(std::move(rf));
    }
    if (!m.contains("state")) m["state"] = nlohmann::json::object();
    if (!m.contains("model_config")) return data_loss("{}: no model_config", mpath);
    ZERO_RETURN_IF_ERROR(c->check_coverage());
  } catch (const nlohmann::json::exception& e) {
    return data_loss("{}: malformed manifest: {}", mpath, e.what());
  }
  c->manifest_ = std::move(m);
  c->readers_.resize(c->files_.size());
  return c;
}

StatusOr<const SafetensorsReader*> LoadedCheckpoint::reader(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (readers_[i]) return readers_[i].get();
  const RankFile& rf = files_[i];
  const std::string path = join(tag_dir_, rf.name);
  if (!storage_->file_exists(path)) {
    return not_found(
        "{}: missing (checkpoint {} lists it; a checkpoint saved on a disk per host, "
        "checkpoint.use_node_local_storage, resumes only with the same hosts in the same order "
        "and world size, unless its rank files are gathered into one directory)",
        path, tag_dir_);
  }
  ZERO_ASSIGN_OR_RETURN(uint64_t size, storage_->file_size(path));
  if (size != rf.bytes) {
    return data_loss("{}: {} bytes, the manifest says {} (truncated or corrupted)", path, size,
                     rf.bytes);
  }
  if (verify_on_open_) {
    ZERO_ASSIGN_OR_RETURN(uint64_t h, hash_file(*storage_, path));
    if (h != rf.xxh3) {
      return data_loss("{}: xxh3 checksum {} does not match the manifest's {} (corrupted)", path,
                       hex64(h), hex64(rf.xxh3));
    }
  }
  ZERO_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(*storage_, path));
  // The file says whose shards it holds: another rank's file (copied over this one, with the
  // manifest's size and checksum updated to match) must not fill this rank's ranges.
  auto said = r.metadata().find("rank");
  if (said != r.metadata().end() && said->second != std::to_string(i)) {
    return data_loss("{}: holds rank {}'s shards, the manifest lists it as rank {}'s", path,
                     said->second, i);
  }
  for (size_t u = 0; u < rf.ranges.size(); ++u) {
    if (rf.ranges[u].second == 0) continue;
    for (const char* what : {"master", "exp_avg", "exp_avg_sq"}) {
      const std::string name = tensor_name(unit_names_[u], what);
      const SafetensorsEntry* e = r.find(name);
      if (!e || e->numel() != rf.ranges[u].second || e->dtype != SafetensorsDType::kF32) {
        return data_loss("{}: tensor '{}' is missing or not F32[{}]", path, name,
                         rf.ranges[u].second);
      }
    }
  }
  readers_[i] = std::make_unique<SafetensorsReader>(std::move(r));
  return readers_[i].get();
}

Status LoadedCheckpoint::read_partition(int unit, int64_t begin, int64_t end, float* master,
                                        float* exp_avg, float* exp_avg_sq) const {
  if (unit < 0 || unit >= num_units() || begin < 0 || end < begin) {
    return invalid_argument("{}: bad partition request unit {} [{}, {})", tag_dir_, unit, begin,
                            end);
  }
  float* outs[3] = {master, exp_avg, exp_avg_sq};
  const char* names[3] = {"master", "exp_avg", "exp_avg_sq"};
  for (float* o : outs) {
    if (o) std::fill(o, o + (end - begin), 0.0f);  // padding reads as zeros
  }
  const int64_t real_end = std::min(end, unit_numel(unit));
  int64_t covered = 0;
  for (size_t i = 0; i < files_.size(); ++i) {
    auto [fb, fn] = files_[i].ranges[static_cast<size_t>(unit)];
    const int64_t lo = std::max(begin, fb), hi = std::min(real_end, fb + fn);
    if (lo >= hi) continue;
    ZERO_ASSIGN_OR_RETURN(const SafetensorsReader* r, reader(i));
    for (int k = 0; k < 3; ++k) {
      if (!outs[k]) continue;
      ZERO_RETURN_IF_ERROR(r->read_range_f32(tensor_name(unit_name(unit), names[k]), lo - fb,
                                             hi - lo, outs[k] + (lo - begin)));
    }
    covered += hi - lo;
  }
  if (begin < real_end && covered != real_end - begin) {
    return data_loss("{}: the rank files cover {} of the {} elements [{}, {}) of unit '{}'",
                     tag_dir_, covered, real_end - begin, begin, real_end, unit_name(unit));
  }
  return ok_status();
}

Status LoadedCheckpoint::check_compatible(const model::ModelLayout& layout) const {
  const std::string what = fmt::format("checkpoint {} does not match the model", tag_dir_);
  const nlohmann::json& units = manifest_["shard_layout"]["units"];
  if (static_cast<int>(units.size()) != layout.num_units()) {
    return invalid_argument("{}: {} units in the checkpoint, {} in the model", what, units.size(),
                            layout.num_units());
  }
  try {
    for (int u = 0; u < layout.num_units(); ++u) {
      const nlohmann::json& cu = units[static_cast<size_t>(u)];
      const model::UnitSpec& mu = layout.unit(u);
      if (cu.at("name").get<std::string>() != mu.name ||
          cu.at("numel").get<int64_t>() != mu.numel) {
        return invalid_argument(
            "{}: unit {} is '{}' of {} elements in the checkpoint, '{}' of {} "
            "in the model",
            what, u, cu.at("name").get<std::string>(), cu.at("numel").get<int64_t>(), mu.name,
            mu.numel);
      }
      const nlohmann::json& ps = cu.at("params");
      if (ps.size() != mu.params.size()) {
        return invalid_argument(
            "{}: unit '{}' has {} parameters in the checkpoint, {} in the model", what, mu.name,
            ps.size(), mu.params.size());
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        const model::ParamSpec& p = mu.params[i];
        std::vector<int64_t> shape = ps[i].at("shape").get<std::vector<int64_t>>();
        std::vector<int64_t> want(p.shape.dims().begin(), p.shape.dims().end());
        if (ps[i].at("name").get<std::string>() != p.name ||
            ps[i].at("offset").get<int64_t>() != p.offset || shape != want) {
          return invalid_argument(
              "{}: parameter {} is '{}' {} at offset {} in the checkpoint, "
              "'{}' {} at offset {} in the model",
              what, i, ps[i].at("name").get<std::string>(), nlohmann::json(shape).dump(),
              ps[i].at("offset").get<int64_t>(), p.name, nlohmann::json(want).dump(), p.offset);
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return data_loss("{}/manifest.json: malformed shard_layout: {}", tag_dir_, e.what());
  }
  return ok_status();
}

Status LoadedCheckpoint::verify() const {
  for (size_t i = 0; i < files_.size(); ++i) {
    const std::string path = join(tag_dir_, files_[i].name);
    if (!storage_->file_exists(path)) return not_found("{}: missing", path);
    ZERO_ASSIGN_OR_RETURN(uint64_t size, storage_->file_size(path));
    if (size != files_[i].bytes) {
      return data_loss("{}: {} bytes, the manifest says {} (truncated or corrupted)", path, size,
                       files_[i].bytes);
    }
    ZERO_ASSIGN_OR_RETURN(uint64_t h, hash_file(*storage_, path));
    if (h != files_[i].xxh3) {
      return data_loss("{}: xxh3 checksum {} does not match the manifest's {} (corrupted)", path,
                       hex64(h), hex64(files_[i].xxh3));
    }
  }
  ZERO_RETURN_IF_ERROR(check_coverage());
  // Every file opens and holds the tensors the manifest promises.
  for (size_t i = 0; i < files_.size(); ++i) ZERO_RETURN_IF_ERROR(reader(i).status());
  return ok_status();
}

// The files' ranges together cover every real element of every unit exactly once.
Status LoadedCheckpoint::check_coverage() const {
  for (int u = 0; u < num_units(); ++u) {
    std::vector<std::pair<int64_t, int64_t>> rs;
    for (const RankFile& f : files_) {
      if (f.ranges[static_cast<size_t>(u)].second > 0)
        rs.push_back(f.ranges[static_cast<size_t>(u)]);
    }
    std::sort(rs.begin(), rs.end());
    int64_t next = 0;
    for (auto [b, n] : rs) {
      if (b != next) {
        return data_loss("{}: unit '{}' elements [{}, {}) are {} ", tag_dir_, unit_name(u),
                         std::min(b, next), std::max(b, next),
                         b > next ? "missing" : "stored twice");
      }
      next = b + n;
    }
    if (next != unit_numel(u)) {
      return data_loss("{}: unit '{}' elements [{}, {}) are missing", tag_dir_, unit_name(u), next,
                       unit_numel(u));
    }
  }
  return ok_status();
}

Status LoadedCheckpoint::check_run(const RunIdentity& run) const {
  const std::string where = fmt::format("checkpoint {}", tag_dir_);
  try {
    // The optimizer: format 2 records it; format 1 only through the effective config.
    std::optional<std::string> type;
    std::optional<std::vector<double>> betas;
    const nlohmann::json* opt = nullptr;
    if (manifest_.contains("optimizer")) {
      opt = &manifest_["optimizer"];
      type = opt->at("type").get<std::string>();
      betas = opt->at("betas").get<std::vector<double>>();
    } else if (manifest_.contains("effective_config") &&
               manifest_["effective_config"].contains("optimizer")) {
      const nlohmann::json& eo = manifest_["effective_config"]["optimizer"];
      if (eo.contains("type") && eo["type"].is_string()) type = eo["type"].get<std::string>();
      if (eo.contains("params") && eo["params"].contains("betas") &&
          eo["params"]["betas"].is_array()) {
        betas = eo["params"]["betas"].get<std::vector<double>>();
      }
    }
    if (type) {
      std::string t = *type;
      for (char& ch : t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      // Format 1 has only the config's spelling ("Adam" is AdamW unless adam_w_mode says
      // otherwise): there, only Adam versus Lamb is certain.
      const bool differs =
          opt ? t != run.optimizer_type : (t == "lamb") != (run.optimizer_type == "lamb");
      if (differs) {
        return invalid_argument(
            "{} holds the state of optimizer '{}', this run uses '{}' (the moments of one are not "
            "the other's; resume with the same optimizer.type)",
            where, t, run.optimizer_type);
      }
    }
    if (betas && (betas->size() != 2 || (*betas)[0] != run.beta1 || (*betas)[1] != run.beta2)) {
      return invalid_argument(
          "{} was saved with betas {}, this run uses [{}, {}] (resume with the same "
          "optimizer.params.betas)",
          where, nlohmann::json(*betas).dump(), run.beta1, run.beta2);
    }
    if (manifest_.contains("dtypes") && manifest_["dtypes"].contains("model")) {
      const std::string saved = manifest_["dtypes"]["model"].get<std::string>();
      if (saved != dtype_name(run.model_dtype)) {
        return invalid_argument(
            "{} was saved by a {} run, this run is {} (resume with the same bf16 / fp16 "
            "setting)",
            where, saved, std::string(dtype_name(run.model_dtype)));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return data_loss("{}/manifest.json: malformed optimizer or dtypes: {}", tag_dir_, e.what());
  }
  return ok_status();
}

}  // namespace zero::checkpoint
