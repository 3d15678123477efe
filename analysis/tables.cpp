#include "analysis/tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <ostream>
#include <set>
#include <sstream>

#include "algorithms/selector.h"
#include "analysis/battery_table.h"
#include "core/error.h"
#include "core/hdf5_file.h"
#include "core/params.h"
#include "data/file_workload.h"

namespace sgdn {

namespace {

std::string value_or(const std::map<std::string, std::string>& m, const std::string& key,
                     const std::string& fallback) {
  auto it = m.find(key);
  return it == m.end() ? fallback : it->second;
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

std::string sci(double x) {
  std::ostringstream out;
  out << std::scientific << std::setprecision(2) << x;
  return out.str();
}

std::string solver_label(const RunRecord& r) {
  const std::string name = value_or(r.config, "solver.name", "?");
  if (name == "block_adjacent")
    return name + "(b" + value_or(r.config, "solver.block", "?") + ",band" +
           value_or(r.config, "solver.band", "?") + ")";
  return name;
}

std::string selector_label(const RunRecord& r) {
  const std::string name = value_or(r.config, "selector.name", "?");
  std::string s = name;
  if (selector_reads_scores(name))
    s += "/" + value_or(r.config, "selector.score", "?") + "/" +
         value_or(r.config, "selector.granularity", "?");
  return s + selector_param_text(name, r.config);
}

std::string budget_label(const RunRecord& r) {
  if (r.config.count("selector.rho")) return value_or(r.config, "selector.rho", "");
  if (r.config.count("selector.tau")) return "tau " + value_or(r.config, "selector.tau", "");
  return "-";
}

double metric(const RunRecord& r, const std::string& key) {
  auto it = r.metrics.find(key);
  if (it == r.metrics.end()) return std::nan("");
  // A metric stored as NaN (e.g. a flops_ratio that nothing counted; written "nan" by format_lossless).
  return it->second == "nan" ? std::nan("") : parse_double(key, it->second);
}

// Keys a row of the tables averages over: the workload's (rows are means over workloads) and those that do
// not change what a run computes. A run's other attributes (workload, backend, label, written) have no '.'.
bool averaged_over(const std::string& key) {
  return key.find('.') == std::string::npos || key.compare(0, 9, "workload.") == 0 ||
         key.compare(0, 5, "dump.") == 0 || key == "run.timing_repeats";
}

// Metrics every run of its configuration writes (SPEC §10): a run without one is reported, not hidden.
std::vector<std::string> expected_metrics(const RunRecord& r) {
  std::vector<std::string> keys = {"retention", "flops_ratio", "state_bytes", "dense_state_bytes"};
  // Booleans are 0/1 in schema 2 files, true/false in schema 1 files.
  if (parse_bool("run.reference", value_or(r.config, "run.reference", "true")))
    keys.push_back("output_error");
  if (value_or(r.config, "workload.kind", "") == "needle") keys.push_back("needle_accuracy");
  return keys;
}

// A mean over the runs that have the metric; "-" when none has it, "(k of n)" when only some have it.
struct Mean {
  double sum = 0;
  int n = 0;
  void add(double x) {
    if (std::isnan(x)) return;
    sum += x;
    ++n;
  }
  std::string text(int runs, const std::function<std::string(double)>& format) const {
    if (n == 0) return "-";
    return format(sum / n) + (n < runs ? " (" + std::to_string(n) + " of " + std::to_string(runs) + ")" : "");
  }
};

std::vector<double> read_vector(const h5::File& f, const std::string& path) {
  if (!f.is_dataset(path)) return {};
  const Tensor<double> t = f.read<double>(path);
  return t.values();
}

}  // namespace

std::vector<std::string> keys_differing_within_rows(const std::vector<RunRecord>& runs,
                                                    const std::vector<std::vector<std::string>>& rows) {
  std::map<std::vector<std::string>, const RunRecord*> first;
  std::set<std::string> differing;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto [it, inserted] = first.emplace(rows[i], &runs[i]);
    if (inserted) continue;
    for (const RunRecord* a : {&runs[i], it->second})
      for (const auto& entry : a->config)
        if (!averaged_over(entry.first) &&
            value_or(runs[i].config, entry.first, "-") != value_or(it->second->config, entry.first, "-"))
          differing.insert(entry.first);
  }
  return {differing.begin(), differing.end()};
}

std::string keys_text(const RunRecord& r, const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) text += " " + key + "=" + value_or(r.config, key, "-");
  return text;
}

std::vector<RunRecord> read_runs(const std::string& path) {
  const h5::File f = h5::File::open(path);
  require_experiment_schema(f);
  std::vector<RunRecord> runs;
  if (!f.is_group("/runs")) return runs;
  for (const std::string& id : f.children("/runs")) {
    const std::string root = "/runs/" + id;
    RunRecord r;
    r.id = id;
    r.config = f.attrs(root);
    if (f.is_group(root + "/metrics")) {
      r.metrics = f.attrs(root + "/metrics");
      r.retention_per_unit = read_vector(f, root + "/metrics/retention_per_unit");
      r.needle_depths = read_vector(f, root + "/metrics/needle_depths");
      r.needle_accuracy_by_depth = read_vector(f, root + "/metrics/needle_accuracy_by_depth");
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    out << "|";
    for (size_t c = 0; c < width.size(); ++c)
      out << " " << std::left << std::setw(int(width[c])) << (c < cells.size() ? cells[c] : "") << " |";
    out << "\n";
  };
  line(header);
  out << "|";
  for (size_t w : width) out << std::string(w + 2, '-') << "|";
  out << "\n";
  for (const auto& row : rows) line(row);
}

std::vector<RunRecord> unique_runs(const std::vector<RunRecord>& runs, std::ostream& warnings) {
  std::vector<RunRecord> unique;
  std::set<std::string> seen;
  for (const RunRecord& r : runs)
    if (seen.insert(r.id).second) unique.push_back(r);
  if (unique.size() < runs.size())
    warnings << "sgdn analyze: " << runs.size() - unique.size()
             << " runs appear in more than one file (the same run id); each run is counted once\n";
  return unique;
}

std::vector<Table> analysis_tables(const std::vector<RunRecord>& all_runs, std::ostream& warnings) {
  std::vector<Table> tables;
  if (all_runs.empty()) return tables;
  const std::vector<RunRecord> runs = unique_runs(all_runs, warnings);
  std::map<std::string, std::vector<std::string>> missing;  // metric -> runs without it
  for (const RunRecord& r : runs)
    for (const std::string& key : expected_metrics(r))
      if (!r.metrics.count(key)) missing[key].push_back(r.id);
  for (const auto& [key, ids] : missing) {
    warnings << "sgdn analyze: warning: " << ids.size() << " of " << runs.size() << " runs lack metrics/"
             << key << " ("
             << join(std::vector<std::string>(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 5)),
                     ", ")
             << (ids.size() > 5 ? ", ..." : "") << "); their rows show the mean over the runs that have it\n";
  }
  // Error, retention, needle accuracy and cost per (solver, selector, rho, G), over workloads; runs that
  // differ in other keys get rows of their own, labelled with those keys.
  std::vector<std::vector<std::string>> row_of;
  for (const RunRecord& r : runs)
    row_of.push_back(
        {solver_label(r), selector_label(r), budget_label(r), value_or(r.config, "run.group", "?")});
  const std::vector<std::string> hidden = keys_differing_within_rows(runs, row_of);
  auto solver_cell = [&](const RunRecord& r) { return solver_label(r) + keys_text(r, hidden); };
  struct Agg {
    int n = 0;
    Mean err, ret, needle, flops, state, state_dense;
    double err_max = 0;
  };
  std::map<std::vector<std::string>, Agg> groups;
  for (const RunRecord& r : runs) {
    const std::vector<std::string> key = {solver_cell(r), selector_label(r), budget_label(r),
                                          value_or(r.config, "run.group", "?")};
    Agg& a = groups[key];
    ++a.n;
    const double e = metric(r, "output_error");  // absent without the exact reference
    a.err.add(e);
    if (!std::isnan(e)) a.err_max = std::max(a.err_max, e);
    a.ret.add(metric(r, "retention"));
    a.flops.add(metric(r, "flops_ratio"));  // NaN (nothing counted) or absent: not counted
    a.state.add(metric(r, "state_bytes"));
    a.state_dense.add(metric(r, "dense_state_bytes"));
    a.needle.add(metric(r, "needle_accuracy"));
  }
  auto percent = [](double x) { return fixed(100 * x, 1) + "%"; };
  auto two = [](double x) { return fixed(x, 2); };
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, a] : groups) {
    const bool states_known = a.state.n > 0 && a.state_dense.n > 0 && a.state_dense.sum > 0;
    const int states_n = std::min(a.state.n, a.state_dense.n);
    rows.push_back({key[0], key[1], key[2], key[3], std::to_string(a.n), a.err.text(a.n, sci),
                    a.err.n ? sci(a.err_max) : "-", a.ret.text(a.n, percent), a.needle.text(a.n, percent),
                    a.flops.text(a.n, two),
                    states_known ? two(a.state.sum / a.state_dense.sum) +
                                       (states_n < a.n ? " (" + std::to_string(states_n) + " of " +
                                                             std::to_string(a.n) + ")"
                                                       : "")
                                 : "-"});
  }
  tables.push_back({"configurations",
                    "Error, retention and cost per configuration (mean over workloads)",
                    {"solver", "selector", "rho", "G", "runs", "output err", "max err", "kept", "needle acc",
                     "flops/dense", "states/dense"},
                    rows});

  // Needle accuracy per configuration and sequence length.
  std::map<std::vector<std::string>, std::map<int64_t, std::pair<double, int>>> needle;
  std::set<int64_t> lengths;
  for (const RunRecord& r : runs) {
    const double acc = metric(r, "needle_accuracy");
    if (std::isnan(acc)) continue;
    const int64_t T = parse_int("workload.tokens", value_or(r.config, "workload.tokens", "0"));
    lengths.insert(T);
    auto& cell =
        needle[{selector_label(r), budget_label(r), value_or(r.config, "run.group", "?"), solver_cell(r)}][T];
    cell.first += acc;
    cell.second += 1;
  }
  if (!needle.empty()) {
    std::vector<std::string> header = {"selector", "rho", "G", "solver"};
    for (int64_t T : lengths) header.push_back("T=" + std::to_string(T));
    std::vector<std::vector<std::string>> needle_rows;
    for (const auto& [key, by_length] : needle) {
      std::vector<std::string> row = key;
      for (int64_t T : lengths) {
        auto it = by_length.find(T);
        row.push_back(it == by_length.end() ? "-"
                                            : fixed(100 * it->second.first / it->second.second, 1) + "%");
      }
      needle_rows.push_back(row);
    }
    tables.push_back({"needle_by_length", "Needle accuracy by sequence length", header, needle_rows});
  }

  // Budgets: the share of chunks each head group (or head) kept, mean over the runs of a configuration.
  std::map<std::vector<std::string>, std::pair<std::vector<double>, int>> budgets;
  for (const RunRecord& r : runs) {
    if (value_or(r.config, "selector.name", "") == "dense" || r.retention_per_unit.empty()) continue;
    // Runs with another number of head groups, another G or solver are rows of their own.
    auto& b = budgets[{selector_label(r), budget_label(r), value_or(r.config, "workload.kind", "?"),
                       value_or(r.config, "run.group", "?"), solver_cell(r),
                       std::to_string(r.retention_per_unit.size())}];
    if (b.first.empty()) b.first.assign(r.retention_per_unit.size(), 0.0);
    for (size_t u = 0; u < r.retention_per_unit.size(); ++u) b.first[u] += r.retention_per_unit[u];
    b.second += 1;
  }
  if (!budgets.empty()) {
    std::vector<std::vector<std::string>> budget_rows;
    for (const auto& [key, b] : budgets) {
      std::string cells;
      double lo = 1, hi = 0;
      for (size_t u = 0; u < b.first.size(); ++u) {
        const double share = b.first[u] / b.second;
        lo = std::min(lo, share);
        hi = std::max(hi, share);
        cells += (u ? " " : "") + fixed(100 * share, 0);
      }
      budget_rows.push_back({key[0], key[1], key[3], key[4], key[2],
                             fixed(100 * lo, 0) + "-" + fixed(100 * hi, 0) + "%", cells});
    }
    tables.push_back({"budgets",
                      "Events kept per head group (% of chunks; one number per group, in head order)",
                      {"selector", "rho", "G", "solver", "workload", "range", "per group"},
                      budget_rows});
  }
  for (Table& battery : battery_tables(runs)) tables.push_back(std::move(battery));
  return tables;
}

TableFormat parse_table_format(const std::string& text) {
  if (text == "table") return TableFormat::table;
  if (text == "csv") return TableFormat::csv;
  if (text == "json") return TableFormat::json;
  fail("--format '", text, "' is not known; allowed: table, csv, json");
}

namespace {

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

// A cell that is a plain finite number ("3", "0.29", "1.5e-03") as a JSON number, anything else as a string.
std::string json_cell(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const bool number = !text.empty() && end == text.c_str() + text.size() && std::isfinite(value) &&
                      text.find_first_of("xXnN") == std::string::npos;
  return number ? text : json_string(text);
}

}  // namespace

void print_tables(std::ostream& out, const std::vector<Table>& tables, TableFormat format) {
  if (format == TableFormat::json) {
    out << "{\"tables\": [";
    for (size_t t = 0; t < tables.size(); ++t) {
      const Table& table = tables[t];
      out << (t ? ",\n" : "\n") << "  {\"name\": " << json_string(table.name)
          << ", \"title\": " << json_string(table.title) << ",\n   \"columns\": [";
      for (size_t c = 0; c < table.header.size(); ++c) out << (c ? ", " : "") << json_string(table.header[c]);
      out << "],\n   \"rows\": [";
      for (size_t r = 0; r < table.rows.size(); ++r) {
        out << (r ? ",\n     [" : "\n     [");
        for (size_t c = 0; c < table.rows[r].size(); ++c)
          out << (c ? ", " : "") << json_cell(table.rows[r][c]);
        out << "]";
      }
      out << "]}";
    }
    out << "\n]}\n";
    return;
  }
  if (tables.empty()) {
    if (format == TableFormat::table) out << "no runs\n";
    return;
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    const Table& table = tables[t];
    if (format == TableFormat::table) {
      out << "\n" << table.title << "\n\n";
      print_table(out, table.header, table.rows);
      continue;
    }
    out << (t ? "\n" : "") << "# " << table.name << ": " << table.title << "\n";
    for (size_t c = 0; c < table.header.size(); ++c) out << (c ? "," : "") << csv_cell(table.header[c]);
    out << "\n";
    for (const auto& row : table.rows) {
      for (size_t c = 0; c < row.size(); ++c) out << (c ? "," : "") << csv_cell(row[c]);
      out << "\n";
    }
  }
}

void print_analysis(std::ostream& out, const std::vector<RunRecord>& runs, std::ostream& warnings,
                    TableFormat format) {
  print_tables(out, analysis_tables(runs, warnings), format);
}

}  // namespace sgdn
