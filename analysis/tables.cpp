#include "analysis/tables.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <set>
#include <sstream>

#include "algorithms/selector.h"
#include "analysis/battery_table.h"
#include "core/error.h"
#include "core/hdf5_file.h"
#include "core/params.h"

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

std::vector<double> read_vector(const h5::File& f, const std::string& path) {
  if (!f.is_dataset(path)) return {};
  const Tensor<double> t = f.read<double>(path);
  return t.values();
}

}  // namespace

std::vector<RunRecord> read_runs(const std::string& path) {
  const h5::File f = h5::File::open(path);
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

void print_analysis(std::ostream& out, const std::vector<RunRecord>& runs) {
  if (runs.empty()) {
    out << "no runs\n";
    return;
  }
  // Error, retention, needle accuracy and cost per (solver, selector, rho, G), over workloads.
  struct Agg {
    int n = 0, needle_n = 0, err_n = 0, flops_n = 0;
    double err = 0, err_max = 0, ret = 0, needle = 0, flops = 0, state = 0, state_dense = 0;
  };
  std::map<std::vector<std::string>, Agg> groups;
  for (const RunRecord& r : runs) {
    const std::vector<std::string> key = {solver_label(r), selector_label(r), budget_label(r),
                                          value_or(r.config, "run.group", "?")};
    Agg& a = groups[key];
    ++a.n;
    const double e = metric(r, "output_error");
    if (!std::isnan(e)) {  // absent without the exact reference
      a.err += e;
      a.err_max = std::max(a.err_max, e);
      ++a.err_n;
    }
    a.ret += metric(r, "retention");
    if (const double f = metric(r, "flops_ratio"); !std::isnan(f)) {  // NaN or absent: not counted
      a.flops += f;
      ++a.flops_n;
    }
    a.state += metric(r, "state_bytes");
    a.state_dense += metric(r, "dense_state_bytes");
    const double needle = metric(r, "needle_accuracy");
    if (!std::isnan(needle)) {
      a.needle += needle;
      ++a.needle_n;
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, a] : groups) {
    rows.push_back({key[0], key[1], key[2], key[3], std::to_string(a.n), a.err_n ? sci(a.err / a.err_n) : "-",
                    a.err_n ? sci(a.err_max) : "-", fixed(100 * a.ret / a.n, 1) + "%",
                    a.needle_n ? fixed(100 * a.needle / a.needle_n, 1) + "%" : "-",
                    a.flops_n ? fixed(a.flops / a.flops_n, 2) : "-",
                    fixed(a.state_dense > 0 ? a.state / a.state_dense : 0, 2)});
  }
  out << "\nError, retention and cost per configuration (mean over workloads)\n\n";
  print_table(out,
              {"solver", "selector", "rho", "G", "runs", "output err", "max err", "kept", "needle acc",
               "flops/dense", "states/dense"},
              rows);

  // Needle accuracy per configuration and sequence length.
  std::map<std::vector<std::string>, std::map<int64_t, std::pair<double, int>>> needle;
  std::set<int64_t> lengths;
  for (const RunRecord& r : runs) {
    const double acc = metric(r, "needle_accuracy");
    if (std::isnan(acc)) continue;
    const int64_t T = parse_int("workload.tokens", value_or(r.config, "workload.tokens", "0"));
    lengths.insert(T);
    auto& cell = needle[{selector_label(r), budget_label(r), value_or(r.config, "run.group", "?"),
                         solver_label(r)}][T];
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
    out << "\nNeedle accuracy by sequence length\n\n";
    print_table(out, header, needle_rows);
  }

  // Budgets: the share of chunks each head group (or head) kept, mean over the runs of a configuration.
  std::map<std::vector<std::string>, std::pair<std::vector<double>, int>> budgets;
  for (const RunRecord& r : runs) {
    if (value_or(r.config, "selector.name", "") == "dense" || r.retention_per_unit.empty()) continue;
    // Runs with another number of head groups, another G or solver are rows of their own.
    auto& b = budgets[{selector_label(r), budget_label(r), value_or(r.config, "workload.kind", "?"),
                       value_or(r.config, "run.group", "?"), solver_label(r),
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
    out << "\nEvents kept per head group (% of chunks; one number per group, in head order)\n\n";
    print_table(out, {"selector", "rho", "G", "solver", "workload", "range", "per group"}, budget_rows);
  }
  print_battery_table(out, runs);
}

}  // namespace sgdn
