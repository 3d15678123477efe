// `sgdn run`: executes the runs of an experiment (or one shard of them), one HDF5 part file per finished
// run, then merges the parts into the experiment file. A rerun skips runs already in the file or in a part,
// so an interrupted sweep resumes without redoing or duplicating anything.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/config.h"

namespace sgdn {

struct RunnerOptions {
  std::string out;          // the experiment file (FILE.h5); parts go to FILE.h5.parts/
  int64_t shard_index = 0;  // run every shard_count-th run starting at shard_index
  int64_t shard_count = 1;
  int64_t stop_after = -1;  // stop after this many new runs, without merging (tests of resuming)
  // How long to wait for the lock on FILE.h5.lock that another process holds while it merges.
  double lock_wait_seconds = 1800;
  // Count runs made by another build (another revision, or other uncommitted changes) as done.
  bool reuse_runs = false;
};

struct RunnerSummary {
  int64_t runs = 0;          // runs of this shard
  int64_t already_done = 0;  // found finished in the file or the parts
  int64_t ran = 0;           // run by this call
  bool merged = false;       // the parts were merged into `out`
};

// Where each run stands in the experiment file `out` and its parts: to run, done by this build, or done by
// another build (another revision or other uncommitted changes; BuildInfo::source_id), which `sgdn run`
// runs again unless --reuse-runs.
enum class RunState { to_run, done, done_by_other_build };
std::vector<RunState> run_states(const std::vector<RunSpec>& runs, const std::string& out);

RunnerSummary run_experiment(const Experiment& experiment, const RunnerOptions& options,
                             std::ostream& progress);

}  // namespace sgdn
