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
