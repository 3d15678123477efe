// The needle battery's table (`sgdn analyze`): accuracy per construction, the worst construction and the
// gap to dense, per configuration and shape.
#include <catch2/catch.hpp>

#include <sstream>

#include "analysis/battery_table.h"

using namespace sgdn;

namespace {

RunRecord needle_run(const std::string& selector, const std::string& variant, double accuracy, double kept,
                     const std::string& key_dim = "64") {
  RunRecord r;
  r.config = {{"selector.name", selector},
              {"selector.score", "update_norm"},
              {"selector.granularity", "pair"},
              {"selector.rho", "0.29"},
              {"run.group", "1"},
              {"solver.name", "block_adjacent"},
              {"solver.band", "1"},
              {"workload.kind", "needle"},
              {"workload.tokens", "4096"},
              {"workload.qk_heads", "2"},
              {"workload.v_heads", "4"},
              {"workload.key_dim", key_dim},
              {"workload.value_dim", key_dim},
              {"workload.task", "single"}};
  if (!variant.empty()) r.config["variant"] = variant;
  r.metrics = {{"needle_accuracy", std::to_string(accuracy)}, {"retention", std::to_string(kept)}};
  return r;
}

}  // namespace

TEST_CASE("battery table: accuracy per construction, the worst one and the gap to dense", "[analysis]") {
  const std::vector<RunRecord> runs = {
      needle_run("dense", "base", 1.0, 1.0),
      needle_run("dense", "all_long", 0.9, 1.0),
      needle_run("head_budget", "base", 1.0, 0.29),
      needle_run("head_budget", "all_long", 0.4, 0.29),
      needle_run("head_budget", "all_long", 0.6, 0.29),  // a second seed: averaged to 50 %
      needle_run("dense", "base", 1.0, 1.0, "128"),
      needle_run("dense", "all_long", 1.0, 1.0, "128")};
  std::ostringstream text;
  print_tables(text, battery_tables(runs), TableFormat::table);
  const std::string out = text.str();
  INFO(out);
  // One table per shape, a column per construction from the easiest to the hardest.
  CHECK(out.find("T=4096 H=2 HV=4 K=64 V=64") != std::string::npos);
  CHECK(out.find("T=4096 H=2 HV=4 K=128 V=128") != std::string::npos);
  CHECK(out.find(
            "| base  | all_long | worst | worst construction | max gap to dense | largest gap at | kept") !=
        std::string::npos);
  // head_budget: 100 % on base, 50 % on all_long (mean of two seeds); worst all_long, 40 points below dense.
  CHECK(out.find("| head_budget/update_norm/pair rho=0.29 | 100.0 | 50.0     | 50.0  | all_long           | "
                 "40.0             | all_long") != std::string::npos);
  CHECK(out.find("| dense") != std::string::npos);

  // Without variants the construction is named by the workload keys that differ between runs.
  std::vector<RunRecord> keyed = {needle_run("dense", "", 1.0, 1.0), needle_run("dense", "", 0.5, 1.0)};
  keyed[1].config["workload.task"] = "multikey";
  std::ostringstream keyed_text;
  print_tables(keyed_text, battery_tables(keyed), TableFormat::table);
  CHECK(keyed_text.str().find("task=multikey") != std::string::npos);
  // One construction: no table.
  CHECK(battery_tables({needle_run("dense", "base", 1.0, 1.0)}).empty());
}

TEST_CASE("battery and configuration tables keep runs apart that differ only in strategy parameters",
          "[analysis]") {
  // Two isolated_write runs that differ only in the score's sharpness, and two head_budget runs that differ
  // only in the solver's block: rows of their own in each table, each saying what sets it apart.
  std::vector<RunRecord> runs;
  for (const char* variant : {"base", "all_long"}) {
    for (const std::string sharpness : {"2", "6"}) {
      RunRecord r = needle_run("head_budget", variant, sharpness == "2" ? 0.5 : 1.0, 0.29);
      r.config["selector.score"] = "isolated_write";
      r.config["selector.sharpness"] = sharpness;
      runs.push_back(r);
    }
    for (const std::string block : {"64", "128"}) {
      RunRecord r = needle_run("head_budget", variant, block == "64" ? 0.25 : 0.75, 0.29);
      r.config["solver.block"] = block;
      runs.push_back(r);
    }
    runs.push_back(needle_run("dense", variant, 1.0, 1.0));
    runs.back().config["solver.block"] = "64";
  }
  for (size_t i = 0; i < runs.size(); ++i) runs[i].id = "r" + std::to_string(i);
  std::ostringstream battery_text;
  print_tables(battery_text, battery_tables(runs), TableFormat::table);
  const std::string battery = battery_text.str();
  INFO(battery);
  CHECK(battery.find("| head_budget/isolated_write/pair sharpness=2 rho=0.29") != std::string::npos);
  CHECK(battery.find("| head_budget/isolated_write/pair sharpness=6 rho=0.29") != std::string::npos);
  CHECK(battery.find("solver.block=64 ") != std::string::npos);
  CHECK(battery.find("solver.block=128 ") != std::string::npos);
  // The gap is to dense with the same extra keys, else to the shape's only dense row.
  CHECK(battery.find("| dense solver.block=64 ") != std::string::npos);
  const size_t row = battery.find("| head_budget/update_norm/pair rho=0.29 solver.block=128 ");
  REQUIRE(row != std::string::npos);
  CHECK(battery.substr(row, battery.find('\n', row) - row).find("| 25.0             | all_long") !=
        std::string::npos);

  std::ostringstream warnings, config_text;
  print_tables(config_text, analysis_tables(runs, warnings), TableFormat::table);
  const std::string configurations = config_text.str();
  INFO(configurations);
  CHECK(configurations.find("| head_budget/isolated_write/pair sharpness=2 ") != std::string::npos);
  CHECK(configurations.find("| head_budget/isolated_write/pair sharpness=6 ") != std::string::npos);
}
