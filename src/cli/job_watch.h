// Watching a launched job: mpirun's stderr passes through `zero launch`, which reads it for the
// first sign of failure (a rank's error, MPI_Abort, a lost host, mpirun's own reports). Open MPI
// cannot finish an abort while a host it needs is unreachable, so a job that has not ended some
// seconds after its first failure is stopped, and the last line names the hosts and ranks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace zero::cli {

// Reads a job's stderr lines for failures; pure, so tests can feed it Open MPI's real messages.
class FailureScanner {
 public:
  // `host_ranks` as encode_host_ranks writes it ("node1=0-3,node2=4-7"); may be empty.
  explicit FailureScanner(std::string host_ranks) : host_ranks_(std::move(host_ranks)) {}

  // One line (without its newline). True when it is the job's first sign of failure.
  bool feed(std::string_view line);

  bool failed() const { return !first_failure_.empty(); }
  const std::string& first_failure() const { return first_failure_; }
  const std::vector<std::string>& lost_hosts() const { return lost_hosts_; }
  const std::vector<int>& silent_ranks() const { return silent_ranks_; }

  // "host node2 (ranks 4-7) was lost; rank(s) 5 (on node2) did not answer", or the first failure
  // line when nothing more precise was said.
  std::string summary() const;

 private:
  std::string describe_rank(int rank) const;

  std::string host_ranks_;
  std::string first_failure_;
  std::vector<std::string> lost_hosts_;
  std::vector<int> silent_ranks_;
  int aborting_rank_ = -1;
  int first_error_rank_ = -1;  // the first "[rank N] error: ..." line: N and what it said
  std::string first_error_;
};

struct WatchOptions {
  std::string host_ranks;     // for the summary
  double abort_grace_s = 10;  // after the first failure, how long mpirun may take to end
};

// Runs argv (PATH lookup) and waits for it: SIGINT/SIGTERM sent to this process are passed on
// (terminal-generated ones already reached it through the process group); the child's exit status,
// 128+signal when it was killed, or an error when it could not start. Its stderr is read through a
// FailureScanner and copied to ours as it comes. When the job has not ended
// `abort_grace_s` after its first failure, the child gets SIGTERM, then SIGKILL 3 s later. A
// failed job ends with one line naming what failed.
StatusOr<int> run_and_watch(const std::vector<std::string>& argv, const WatchOptions& options);

}  // namespace zero::cli
