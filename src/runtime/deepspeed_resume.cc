// A DeepSpeed checkpoint as `zero train --resume_from_checkpoint` takes it (deepspeed_resume.h).
#include "runtime/deepspeed_resume.h"

#include <cstdio>

#include "checkpoint/deepspeed_dir.h"
#include "checkpoint/deepspeed_import.h"
#include "core/storage.h"

namespace zero::runtime {

// --resume_from_checkpoint DS_DIR (a DeepSpeed checkpoint): rank 0 imports it into
// OUTPUT_DIR/deepspeed_import (made anew at every such start; docs/formats/deepspeed.md), then
// every rank opens that. The outcome is broadcast so that no rank opens a half-written import (the
// write itself publishes atomically) and a failed import stops every rank with rank 0's reason.
StatusOr<std::string> import_deepspeed_for_resume(const std::string& ds_dir,
                                                  const std::string& output_dir,
                                                  const model::ModelConfig& config,
                                                  Communicator& comm) {
  Storage& storage = *default_storage();
  const std::string dir = output_dir + "/deepspeed_import";
  Status s;
  if (comm.rank() == 0) {
    s = storage.remove_dir(dir);
    if (s.ok())
      s = checkpoint::import_deepspeed_checkpoint(storage, {ds_dir, "", dir}, config).status();
    if (s.ok())
      std::printf("zero train: imported the DeepSpeed checkpoint %s into %s\n", ds_dir.c_str(),
                  dir.c_str());
  }
  if (!s.ok()) {
    // What the directory is and the weights-only alternative, after why the import failed.
    const Status what = checkpoint::refuse_deepspeed_checkpoint(storage, ds_dir);
    s = Status(s.code(), "could not import it: " + s.message() + ". " + what.message());
  }
  float failed = s.ok() ? 0.f : 1.f;
  // Every rank waits here for rank 0's import before opening it.
  ZERO_RETURN_IF_ERROR(comm.broadcast_async(&failed, 1, DType::kF32, 0).wait());
  if (!s.ok()) return s;
  if (failed != 0.f)
    return failed_precondition("rank 0 could not import the DeepSpeed checkpoint {}", ds_dir);
  return dir;
}

}  // namespace zero::runtime
