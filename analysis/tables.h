// The tables of `sgdn analyze` and of the summary that ends `sgdn run` (SPEC §11): error, retention and
// needle accuracy per (solver, selector, rho, G), and the budget each head group received.
#pragma once
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace sgdn {

// One finished run as read back from an experiment file.
struct RunRecord {
  std::string id;
  std::map<std::string, std::string> config;   // the run's attributes: resolved keys, workload, backend
  std::map<std::string, std::string> metrics;  // scalar metrics (attributes of metrics/)
  std::vector<double> retention_per_unit;      // [units]
  std::vector<double> needle_depths, needle_accuracy_by_depth;
};

// The runs of an experiment file; a file without schema_version 1 is refused.
std::vector<RunRecord> read_runs(const std::string& path);

// A markdown table: header, then rows; columns padded to their widest cell.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

// The runs without repeats: a run id met again (a shard file given with its merge) counts once, which
// `warnings` says.
std::vector<RunRecord> unique_runs(const std::vector<RunRecord>& runs, std::ostream& warnings);

// The tables of `sgdn analyze` for the runs of one or more files (each run id counted once). Runs lacking a
// metric their configuration writes are named on `warnings`; a cell averaged over only some runs says so.
void print_analysis(std::ostream& out, const std::vector<RunRecord>& runs, std::ostream& warnings);

}  // namespace sgdn
