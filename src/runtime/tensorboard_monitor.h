// TensorBoardMonitor: DeepSpeed's `tensorboard` monitor — scalars in a TensorBoard event file under
// output_path/job_name/ (docs/formats/tfevents.md), written by rank 0 only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "core/status.h"

namespace zero::runtime {

class TensorBoardMonitor {
 public:
  // Creates output_path/job_name (output_path "" means the current directory, as DeepSpeed's
  // os.path.join("", job_name)) and a fresh event file in it named as TensorBoard's own writer
  // names them, events.out.tfevents.<unix seconds>.<hostname>.<pid>.0, whose first record is the
  // file_version event. IO_ERROR naming the path when either cannot be made.
  static StatusOr<std::unique_ptr<TensorBoardMonitor>> open(const std::string& output_path,
                                                            const std::string& job_name);
  ~TensorBoardMonitor();
  TensorBoardMonitor(const TensorBoardMonitor&) = delete;
  TensorBoardMonitor& operator=(const TensorBoardMonitor&) = delete;

  // Appends one scalar event (wall time now) and flushes it to the kernel, so a crash or a kill
  // loses nothing already written. The value is stored as a float, as TensorBoard's add_scalar.
  Status write(const std::string& tag, int64_t step, double value);

  const std::string& path() const { return path_; }

 private:
  TensorBoardMonitor(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  Status append(const std::string& event);

  std::FILE* file_;
  std::string path_;
};

}  // namespace zero::runtime
