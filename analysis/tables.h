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

std::vector<RunRecord> read_runs(const std::string& path);

// A markdown table: header, then rows; columns padded to their widest cell.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

// The tables of `sgdn analyze` for the runs of one or more files.
void print_analysis(std::ostream& out, const std::vector<RunRecord>& runs);

}  // namespace sgdn
