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

// The runs of an experiment file; a file of a schema version this program does not read is refused.
std::vector<RunRecord> read_runs(const std::string& path);

// A markdown table: header, then rows; columns padded to their widest cell.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

// The runs without repeats: a run id met again (a shard file given with its merge) counts once, which
// `warnings` says.
std::vector<RunRecord> unique_runs(const std::vector<RunRecord>& runs, std::ostream& warnings);

// The keys (other than the workload's and those that do not change what a run computes) in which runs that
// share a row differ: rows[i] is run i's row. Tables add them to their labels (keys_text: " key=value" for
// each, "-" for a key a run lacks), so that such runs are never averaged together.
std::vector<std::string> keys_differing_within_rows(const std::vector<RunRecord>& runs,
                                                    const std::vector<std::vector<std::string>>& rows);
std::string keys_text(const RunRecord& r, const std::vector<std::string>& keys);

// One table of `sgdn analyze`: `name` identifies it in csv and json output, `title` heads it as text.
struct Table {
  std::string name, title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

// How `sgdn analyze` prints its tables: markdown tables (the default), csv (each table after a line
// "# name: title", tables separated by a blank line) or json ({"tables": [{"name", "title", "columns",
// "rows"}]}, a cell that is a plain number as a number).
enum class TableFormat { table, csv, json };
TableFormat parse_table_format(const std::string& text);

// The tables of `sgdn analyze` for the runs of one or more files (each run id counted once). Runs lacking a
// metric their configuration writes are named on `warnings`; a cell averaged over only some runs says so.
std::vector<Table> analysis_tables(const std::vector<RunRecord>& runs, std::ostream& warnings);
void print_tables(std::ostream& out, const std::vector<Table>& tables, TableFormat format);
void print_analysis(std::ostream& out, const std::vector<RunRecord>& runs, std::ostream& warnings,
                    TableFormat format = TableFormat::table);

}  // namespace sgdn
