#include "analysis/battery_table.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "algorithms/selector.h"
#include "core/params.h"

namespace sgdn {

namespace {

// Workload keys that are not part of a construction: the shape (a configuration's own axis), the seed
// (averaged over) and what names a file.
const std::set<std::string> kNotConstruction = {
    "workload.kind",    "workload.batch",     "workload.tokens", "workload.qk_heads", "workload.v_heads",
    "workload.key_dim", "workload.value_dim", "workload.seed",   "workload.path",     "workload.id"};

std::string at(const RunRecord& r, const std::string& key) {
  auto it = r.config.find(key);
  return it == r.config.end() ? "" : it->second;
}

std::string percent(double x) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << 100 * x;
  return out.str();
}

std::string shape_label(const RunRecord& r) {
  return "T=" + at(r, "workload.tokens") + " H=" + at(r, "workload.qk_heads") +
         " HV=" + at(r, "workload.v_heads") + " K=" + at(r, "workload.key_dim") +
         " V=" + at(r, "workload.value_dim");
}

// The selector with its score, granularity and budget, and the solver and G when they are not the defaults.
std::string configuration_label(const RunRecord& r) {
  const std::string name = at(r, "selector.name");
  std::string s = name;
  if (selector_reads_scores(name)) s += "/" + at(r, "selector.score") + "/" + at(r, "selector.granularity");
  s += selector_param_text(name, r.config);
  if (r.config.count("selector.rho") && name != "dense") s += " rho=" + at(r, "selector.rho");
  if (r.config.count("selector.tau")) s += " tau=" + at(r, "selector.tau");
  if (at(r, "run.group") != "1") s += " G=" + at(r, "run.group");
  if (at(r, "solver.name") != "block_adjacent" || at(r, "solver.band") != "1")
    s += " " + at(r, "solver.name");
  return s;
}

}  // namespace

std::vector<Table> battery_tables(const std::vector<RunRecord>& runs) {
  std::vector<Table> tables;
  std::vector<const RunRecord*> needle_runs;
  for (const RunRecord& r : runs)
    if (r.metrics.count("needle_accuracy") && r.metrics.at("needle_accuracy") != "nan")
      needle_runs.push_back(&r);
  if (needle_runs.empty()) return tables;

  // The workload keys that vary between the runs name the constructions of runs without a variant.
  std::map<std::string, std::set<std::string>> values_of;
  for (const RunRecord* r : needle_runs)
    for (const auto& [key, value] : r->config)
      if (key.compare(0, 9, "workload.") == 0 && !kNotConstruction.count(key)) values_of[key].insert(value);
  auto construction_of = [&](const RunRecord& r) {
    if (r.config.count("variant")) return at(r, "variant");
    std::string label;
    for (const auto& [key, values] : values_of)
      if (values.size() >= 2) label += (label.empty() ? "" : " ") + key.substr(9) + "=" + at(r, key);
    return label.empty() ? std::string("default") : label;
  };

  // Runs of one shape and configuration label that differ in other keys (a solver's block, run.chunk) are
  // rows of their own, labelled with those keys.
  std::vector<RunRecord> row_runs;
  std::vector<std::vector<std::string>> rows_of;
  for (const RunRecord* r : needle_runs) {
    row_runs.push_back(*r);
    rows_of.push_back({shape_label(*r), configuration_label(*r)});
  }
  const std::vector<std::string> hidden = keys_differing_within_rows(row_runs, rows_of);

  struct Cell {
    double accuracy = 0, kept = 0;
    int n = 0;
  };
  // shape -> configuration -> construction -> mean accuracy
  std::map<std::string, std::map<std::string, std::map<std::string, Cell>>> cells;
  std::map<std::string, Cell> by_construction_overall;  // for the column order
  std::map<std::string, std::string> extra_of;          // row label -> the keys_text it ends with
  for (const RunRecord* r : needle_runs) {
    const std::string construction = construction_of(*r);
    Cell& overall = by_construction_overall[construction];
    overall.accuracy += parse_double("needle_accuracy", r->metrics.at("needle_accuracy"));
    overall.n += 1;
    const std::string extra = keys_text(*r, hidden);
    extra_of[configuration_label(*r) + extra] = extra;
    Cell& c = cells[shape_label(*r)][configuration_label(*r) + extra][construction];
    c.accuracy += parse_double("needle_accuracy", r->metrics.at("needle_accuracy"));
    if (r->metrics.count("retention")) c.kept += parse_double("retention", r->metrics.at("retention"));
    c.n += 1;
  }
  if (by_construction_overall.size() < 2) return tables;
  // Columns from the easiest construction to the hardest (mean accuracy over every run), so the worst ones
  // sit next to the summary columns.
  std::vector<std::string> constructions;
  for (const auto& entry : by_construction_overall) constructions.push_back(entry.first);
  std::stable_sort(constructions.begin(), constructions.end(),
                   [&](const std::string& a, const std::string& b) {
                     const Cell &x = by_construction_overall.at(a), &y = by_construction_overall.at(b);
                     return x.accuracy / x.n > y.accuracy / y.n;
                   });

  for (const auto& [shape, by_configuration] : cells) {
    std::vector<std::string> header = {"configuration"};
    std::vector<std::string> present;
    for (const std::string& c : constructions) {
      for (const auto& entry : by_configuration)
        if (entry.second.count(c)) {
          present.push_back(c);
          break;
        }
    }
    for (const std::string& c : present) header.push_back(c);
    for (const char* h : {"worst", "worst construction", "max gap to dense", "largest gap at", "kept"})
      header.push_back(h);
    // A row's dense reference: dense with the same extra keys, else the shape's only dense row.
    std::vector<std::string> dense_rows;
    for (const auto& entry : by_configuration)
      if (entry.first == "dense" + extra_of.at(entry.first)) dense_rows.push_back(entry.first);
    std::vector<std::vector<std::string>> rows;
    for (const auto& [configuration, by_construction] : by_configuration) {
      auto dense = by_configuration.find("dense" + extra_of.at(configuration));
      if (dense == by_configuration.end() && dense_rows.size() == 1)
        dense = by_configuration.find(dense_rows[0]);
      std::vector<std::string> row = {configuration};
      double worst = 2, gap = -2, kept = 0;
      int kept_n = 0;
      std::string worst_name, gap_name;
      for (const std::string& c : present) {
        auto it = by_construction.find(c);
        if (it == by_construction.end()) {
          row.push_back("-");
          continue;
        }
        const double acc = it->second.accuracy / it->second.n;
        kept += it->second.kept;
        kept_n += it->second.n;
        row.push_back(percent(acc));
        if (acc < worst) {
          worst = acc;
          worst_name = c;
        }
        if (dense != by_configuration.end() && dense->second.count(c)) {
          const Cell& d = dense->second.at(c);
          if (d.accuracy / d.n - acc > gap) {
            gap = d.accuracy / d.n - acc;
            gap_name = c;
          }
        }
      }
      row.push_back(percent(worst));
      row.push_back(worst_name);
      row.push_back(gap > -2 ? percent(gap) : "-");
      row.push_back(gap > 0 ? gap_name : "-");
      row.push_back(kept_n ? percent(kept / kept_n) + "%" : "-");
      rows.push_back(row);
    }
    tables.push_back(
        {"battery_" + std::to_string(tables.size() + 1),
         "Needle accuracy (%) per construction, " + shape +
             " (mean over seeds; worst = the lowest accuracy; gap = dense minus this configuration)",
         header, rows});
  }
  return tables;
}

}  // namespace sgdn
