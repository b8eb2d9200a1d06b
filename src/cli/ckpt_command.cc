// `zero ckpt`: checkpoints offline (docs/formats/checkpoint.md).
//   zero ckpt to-fp32 CKPT_DIR OUT_DIR [--tag T] [--max_shard_size 5GB]
//       consolidated fp32 HF safetensors + config.json, one unit in memory at a time
//   zero ckpt info CKPT_DIR [--tag T]     what the checkpoint holds
//   zero ckpt verify CKPT_DIR [--tag T]   checksums and completeness of every file
//   zero ckpt import DS_DIR OUT --model M [--tag T]
//       a DeepSpeed checkpoint (ZeRO 1-3, Adam) as our own, Adam moments and step included
// Exit status: 0 ok, 2 bad input (no checkpoint, bad flags, corrupted data), 1 I/O failure.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/deepspeed_import.h"
#include "checkpoint/tokenizer_files.h"
#include "cli/commands.h"
#include "model/hf_checkpoint.h"
#include "runtime/run_lock.h"

namespace zero::cli {
namespace {

struct CkptArgs {
  std::string dir;
  std::string out;
  std::string tag;
  std::string max_shard_size = "5GB";
  std::string model;  // import: the model's config.json (or its directory)
};

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return s.code() == StatusCode::kIoError || s.code() == StatusCode::kResourceExhausted ? 1 : 2;
}

std::unique_ptr<checkpoint::LoadedCheckpoint> open_or_report(const CkptArgs& a, int& exit_code) {
  auto ck = checkpoint::open_checkpoint(*default_storage(), a.dir, a.tag);
  if (!ck.ok()) {
    exit_code = fail(ck.status());
    return nullptr;
  }
  return std::move(*ck);
}

int run_to_fp32(const CkptArgs& a) {
  auto bytes = model::parse_size_bytes(a.max_shard_size);
  if (!bytes.ok()) return fail(bytes.status());
  int code = 0;
  auto ck = open_or_report(a, code);
  if (!ck) return code;
  // One writer per directory: a training run (or another `zero ckpt`) writing OUT_DIR holds it.
  auto lock = runtime::RunLock::acquire(a.out, "zero ckpt to-fp32");
  if (!lock.ok()) return fail(lock.status());
  Status s = checkpoint::consolidate_to_hf(*default_storage(), *ck, a.out, *bytes);
  if (!s.ok()) return fail(s);
  // The run's tokenizer (zero train keeps it in OUTPUT_DIR/tokenizer), so OUT_DIR is a whole model.
  const std::string run_dir = std::filesystem::path(ck->tag_dir()).parent_path().string();
  s = checkpoint::copy_tokenizer_files(*default_storage(), checkpoint::run_tokenizer_dir(run_dir),
                                       a.out);
  if (!s.ok()) return fail(s.with_context("copying the tokenizer files"));
  std::printf("wrote %s (fp32, from %s)\n", a.out.c_str(), ck->tag_dir().c_str());
  return 0;
}

int run_info(const CkptArgs& a) {
  int code = 0;
  auto ck = open_or_report(a, code);
  if (!ck) return code;
  const nlohmann::json& m = ck->manifest();
  int64_t numel = 0;
  for (int u = 0; u < ck->num_units(); ++u) numel += ck->unit_numel(u);
  uint64_t bytes = 0;
  for (const auto& f : ck->files()) bytes += f.bytes;
  std::printf("checkpoint:   %s\n", ck->tag_dir().c_str());
  std::printf("format:       %s v%d\n", m.value("format", "").c_str(),
              m.value("format_version", 0));
  std::printf("tag:          %s\n", ck->tag().c_str());
  std::printf("world size:   %d\n", ck->world_size());
  std::printf("zero stage:   %d\n", ck->stage());
  std::printf("dtypes:       %s\n", m.value("dtypes", nlohmann::json::object()).dump().c_str());
  std::printf("model:        %s, %d units, %lld parameters\n",
              ck->model_config().value("model_type", "?").c_str(), ck->num_units(),
              static_cast<long long>(numel));
  for (const char* key : {"global_step", "optimizer_updates"}) {
    if (ck->state().contains(key)) {
      std::printf("%-13s %s\n", (std::string(key) + ":").c_str(), ck->state()[key].dump().c_str());
    }
  }
  std::printf("state keys:  ");
  for (auto it = ck->state().begin(); it != ck->state().end(); ++it) {
    std::printf(" %s", it.key().c_str());
  }
  std::printf("\nfiles:        %zu, %llu bytes\n", ck->files().size(),
              static_cast<unsigned long long>(bytes));
  for (const auto& f : ck->files()) {
    std::printf("  %-24s %12llu bytes  xxh3 %016llx\n", f.name.c_str(),
                static_cast<unsigned long long>(f.bytes), static_cast<unsigned long long>(f.xxh3));
  }
  return 0;
}

int run_verify(const CkptArgs& a) {
  int code = 0;
  auto ck = open_or_report(a, code);
  if (!ck) return code;
  Status s = ck->verify();
  if (!s.ok()) return fail(s);
  std::printf("ok: %s (%zu files, checksums and coverage verified)\n", ck->tag_dir().c_str(),
              ck->files().size());
  return 0;
}

// What OUT held before a command took its lock (which creates OUT and OUT/.lock), so that a run
// that fails leaves OUT as it found it.
struct OutBefore {
  bool dir = false;
  bool lock = false;
};

OutBefore look_at(const std::string& out) {
  std::error_code ec;
  return {std::filesystem::exists(out, ec), std::filesystem::exists(out + "/.lock", ec)};
}

// After a failure, while the lock is still held (no other job can have started writing in OUT):
// removes OUT if this run created it, else the lock file if this run created that.
void leave_as_found(const std::string& out, const OutBefore& before) {
  std::error_code ec;
  if (!before.dir)
    std::filesystem::remove_all(out, ec);
  else if (!before.lock)
    std::filesystem::remove(out + "/.lock", ec);
}

// DeepSpeed's pickles are read by the restricted reader (docs/formats/deepspeed.md); nothing is
// written unless every parameter and the optimizer carry over, and a refusal or a failed write
// leaves OUT as it was (no directory, no lock file made by this run).
int run_import(const CkptArgs& a) {
  auto config = model::load_model_config(a.model);
  if (!config.ok()) return fail(config.status().with_context("--model"));
  const OutBefore before = look_at(a.out);
  auto lock = runtime::RunLock::acquire(a.out, "zero ckpt import");
  // Not held: another job may own OUT now, so nothing is removed.
  if (!lock.ok()) return fail(lock.status());
  auto r =
      checkpoint::import_deepspeed_checkpoint(*default_storage(), {a.dir, a.tag, a.out}, *config);
  if (!r.ok()) {
    leave_as_found(a.out, before);
    return fail(r.status());
  }
  std::printf(
      "wrote %s (from DeepSpeed ZeRO stage %d, world size %d: step %lld, Adam step %lld, "
      "%lld parameters with their Adam moments)\n",
      r->tag_dir.c_str(), r->stage, r->world_size, static_cast<long long>(r->global_step),
      static_cast<long long>(r->optimizer_step), static_cast<long long>(r->params));
  return 0;
}

void add_dir_and_tag(CLI::App* cmd, CkptArgs& a) {
  cmd->add_option("CKPT_DIR", a.dir, "checkpoint directory (holding `latest`) or a tag directory")
      ->required();
  cmd->add_option("--tag", a.tag, "tag to read instead of the one `latest` names");
}

}  // namespace

void add_ckpt_command(CLI::App& app, int& exit_code) {
  CLI::App* ckpt = app.add_subcommand(
      "ckpt",
      "inspect, verify, consolidate and import checkpoints (to-fp32, info, verify, import)");
  ckpt->require_subcommand(1);
  auto args = std::make_shared<CkptArgs>();

  CLI::App* to_fp32 = ckpt->add_subcommand(
      "to-fp32", "write consolidated fp32 HF safetensors + config.json from a sharded checkpoint");
  add_dir_and_tag(to_fp32, *args);
  to_fp32->add_option("OUT_DIR", args->out, "output directory")->required();
  to_fp32->add_option("--max_shard_size,--max-shard-size", args->max_shard_size,
                      "largest output file, as HF counts it (default 5GB)");
  to_fp32->callback([args, &exit_code] { exit_code = run_to_fp32(*args); });

  CLI::App* info = ckpt->add_subcommand("info", "what a checkpoint holds");
  add_dir_and_tag(info, *args);
  info->callback([args, &exit_code] { exit_code = run_info(*args); });

  CLI::App* verify =
      ckpt->add_subcommand("verify", "check every file's size, checksum and coverage");
  add_dir_and_tag(verify, *args);
  verify->callback([args, &exit_code] { exit_code = run_verify(*args); });

  CLI::App* import = ckpt->add_subcommand(
      "import", "write a DeepSpeed checkpoint (ZeRO 1-3, Adam) as a ZeRO.cpp checkpoint");
  import->add_option("DS_DIR", args->dir, "DeepSpeed save directory (with `latest`) or tag dir")
      ->required();
  import->add_option("OUT", args->out, "checkpoint directory to write")->required();
  import->add_option("--model", args->model, "the model's HF directory or config.json")->required();
  import->add_option("--tag", args->tag, "DeepSpeed tag to read instead of `latest`'s");
  import->callback([args, &exit_code] { exit_code = run_import(*args);
});
}  // namespace zero::cli

}  // namespace zero::cli
