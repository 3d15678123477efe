// `sgdn run` end to end on tiny sweeps: the HDF5 layout of SPEC §10, resuming an interrupted sweep,
// skipping finished runs, shards, needle metrics.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "analysis/metrics.h"
#include "analysis/tables.h"
#include "core/hdf5_file.h"
#include "data/file_workload.h"
#include "experiments/runner.h"
#include "support/scratch_dir.h"

using namespace sgdn;
namespace fs = std::filesystem;
using sgdn::test::ScratchDir;

namespace {

const char* kSweep = R"(
[workload]
kind = random
tokens = 150
qk_heads = 2
v_heads = 4
key_dim = 16
value_dim = 16

[run]
chunk = 32

[solver]
block = 8

[dump]
states = true

[sweep]
solver.name = exact, block_adjacent
selector.name = dense, topk, head_budget
selector.rho = 0.25, 0.5
)";

}  // namespace

TEST_CASE("a sweep writes the current schema version and reruns nothing", "[runner]") {
  ScratchDir dir;
  const std::string out = (dir.path / "exp.h5").string();
  const Experiment exp = parse_experiment(kSweep, {});
  std::ostringstream log;
  RunnerSummary s = run_experiment(exp, {out}, log);
  CHECK(s.runs == 10);
  CHECK(s.ran == 10);
  CHECK(s.merged);
  CHECK_FALSE(fs::exists(out + ".parts"));
  CHECK(log.str().find("[10/10]") != std::string::npos);

  const h5::File f = h5::File::open(out);
  CHECK(f.attr_int("/", "schema_version") == kSchemaVersion);
  CHECK(f.dimensions("/runs/" + f.children("/runs").at(0) + "/events/mask") ==
        std::vector<std::string>{"batch", "head", "chunk"});
  const std::vector<std::string> runs = f.children("/runs");
  REQUIRE(runs.size() == 10);
  const std::string wid = f.children("/workloads").at(0);
  CHECK(f.read<float>("/workloads/" + wid + "/inputs/q").dims() == std::vector<int64_t>{1, 150, 2, 16});
  CHECK(f.read<float>("/workloads/" + wid + "/exact/o").dims() == std::vector<int64_t>{1, 150, 4, 16});
  for (const std::string& rid : runs) {
    const std::string r = "/runs/" + rid;
    CHECK(f.attr_string(r, "workload") == wid);
    CHECK(f.attr_string(r, "backend") == "cpu");
    CHECK(f.attr_int(r, "run.chunk") == 32);
    CHECK(f.read<float>(r + "/outputs/o").dims() == std::vector<int64_t>{1, 150, 4, 16});
    CHECK(f.read<uint8_t>(r + "/events/mask").dims() == std::vector<int64_t>{1, 4, 5});
    CHECK(f.read<float>(r + "/events/score").dims() == std::vector<int64_t>{1, 4, 5});
    CHECK(f.read<int32_t>(r + "/events/budget").dims() == std::vector<int64_t>{1, 2});
    CHECK(f.read<float>(r + "/states/snapshots").dim(1) == 16);
    CHECK(f.read<int32_t>(r + "/states/snapshot_index").dim(1) == 3);
    CHECK(f.attr_double(r + "/metrics", "output_error") >= 0);
    CHECK(f.read<double>(r + "/metrics/state_error_per_chunk").dims() == std::vector<int64_t>{5});
    if (f.attr_string(r, "solver.name") == "exact" && f.attr_string(r, "selector.name") == "dense")
      CHECK(f.attr_double(r + "/metrics", "output_error") < 1e-6);
  }

  std::ostringstream again;
  s = run_experiment(exp, {out}, again);
  CHECK(s.ran == 0);
  CHECK(s.already_done == 10);
}

TEST_CASE("an interrupted sweep resumes with nothing lost or duplicated", "[runner]") {
  ScratchDir dir;
  const std::string out = (dir.path / "exp.h5").string();
  const Experiment exp = parse_experiment(kSweep, {});
  std::ostringstream log;
  RunnerOptions first{out};
  first.stop_after = 4;  // as if killed after four runs
  RunnerSummary s = run_experiment(exp, first, log);
  CHECK(s.ran == 4);
  CHECK_FALSE(fs::exists(out));  // nothing half-written at the final name
  CHECK(fs::exists(out + ".parts"));
  // A run killed while writing leaves a temporary file, never a part with the final name.
  std::ofstream(out + ".parts/run-rdeadbeef.h5.tmp-a1B2c3") << "partial";

  s = run_experiment(exp, {out}, log);
  CHECK(s.already_done == 4);
  CHECK(s.ran == 6);
  const h5::File f = h5::File::open(out);
  CHECK(f.children("/runs").size() == 10);
  CHECK(f.children("/workloads").size() == 1);

  // The resumed file holds what an uninterrupted sweep holds.
  const std::string clean = (dir.path / "clean.h5").string();
  run_experiment(exp, {clean}, log);
  const h5::File g = h5::File::open(clean);
  CHECK(g.children("/runs") == f.children("/runs"));
  for (const std::string& rid : g.children("/runs")) {
    CHECK(g.read<float>("/runs/" + rid + "/outputs/o").values() ==
          f.read<float>("/runs/" + rid + "/outputs/o").values());
  }
}

TEST_CASE("shards split a sweep and their files together hold every run", "[runner]") {
  ScratchDir dir;
  const Experiment exp = parse_experiment(kSweep, {});
  std::ostringstream log;
  std::set<std::string> ids;
  for (int64_t i = 0; i < 3; ++i) {
    RunnerOptions o{(dir.path / ("shard" + std::to_string(i) + ".h5")).string()};
    o.shard_index = i;
    o.shard_count = 3;
    run_experiment(exp, o, log);
    for (const RunRecord& r : read_runs(o.out)) CHECK(ids.insert(r.id).second);
  }
  CHECK(ids.size() == 10);
}

TEST_CASE("needle workloads record accuracy, and dense exact recalls", "[runner]") {
  ScratchDir dir;
  const std::string out = (dir.path / "needle.h5").string();
  const Experiment exp = parse_experiment(R"(
[workload]
kind = needle
tokens = 1024
qk_heads = 2
v_heads = 4
key_dim = 64
value_dim = 64
batch = 3
[solver]
name = exact
[selector]
name = dense
)",
                                          {});
  std::ostringstream log;
  run_experiment(exp, {out}, log);
  const std::vector<RunRecord> runs = read_runs(out);
  REQUIRE(runs.size() == 1);
  CHECK(parse_double("", runs[0].metrics.at("needle_accuracy")) >= 0.95);
  CHECK(runs[0].needle_depths.size() == 3);
  std::ostringstream table;
  print_analysis(table, runs, table);
  CHECK(table.str().find("Needle accuracy") != std::string::npos);

  // A backend without a flop cost model stores NaN, and the table says "-" rather than a cost of 0.
  auto flops_cell = [](const std::vector<RunRecord>& records) {
    std::ostringstream text;
    print_analysis(text, records, text);
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
      if (line.find("| dense") == std::string::npos) continue;
      std::vector<std::string> cells;
      std::istringstream row(line);
      for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
      REQUIRE(cells.size() > 10);
      return cells[10].substr(cells[10].find_first_not_of(' '),
                              cells[10].find_last_not_of(' ') - cells[10].find_first_not_of(' ') + 1);
    }
    return std::string("no dense row");
  };
  CHECK(flops_cell(runs) == "1.00");
  std::vector<RunRecord> without_cost = runs;
  without_cost[0].metrics["flops_ratio"] = "nan";
  CHECK(flops_cell(without_cost) == "-");
  CHECK(std::isnan(
      cost_of(Shape::of(1, 128, 1, 1, 8, 8), 64, 0, 0, 0, Tensor<uint8_t>({1, 1, 2})).flops_ratio));
}

TEST_CASE("a bad config writes nothing", "[runner]") {
  ScratchDir dir;
  const std::string out = (dir.path / "bad.h5").string();
  std::ostringstream log;
  const Experiment exp = parse_experiment("[sweep]\nselector.rho = 0.1, 7\n", {});
  CHECK_THROWS_WITH(run_experiment(exp, {out}, log), Catch::Contains("selector.rho = 7"));
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".parts"));
}

TEST_CASE("without the reference a needle sweep keeps task metrics only", "[runner]") {
  ScratchDir dir;
  const std::string out = (dir.path / "noref.h5").string();
  const Experiment exp = parse_experiment(R"(
[workload]
kind = needle
tokens = 700
qk_heads = 2
v_heads = 4
key_dim = 64
value_dim = 32
batch = 2
depths = 20 80
[run]
reference = false
[sweep]
selector.name = dense, head_budget
)",
                                          {});
  std::ostringstream log;
  run_experiment(exp, {out}, log);
  const h5::File f = h5::File::open(out);
  const std::string wid = f.children("/workloads").at(0);
  CHECK_FALSE(f.exists("/workloads/" + wid + "/exact/o"));
  for (const RunRecord& r : read_runs(out)) {
    CHECK(r.metrics.count("output_error") == 0);
    CHECK(r.metrics.count("needle_accuracy") == 1);
  }
  CHECK(log.str().find("exact outputs") == std::string::npos);
}

TEST_CASE("a grown sweep runs only what is new and reuses the stored reference", "[runner]") {
  ScratchDir dir;
  const std::string out = dir.file("grow.h5");
  std::ostringstream first, second;
  run_experiment(parse_experiment(kSweep, {"selector.name=dense"}), {out}, first);
  CHECK(first.str().find("exact outputs") != std::string::npos);
  const RunnerSummary s = run_experiment(parse_experiment(kSweep, {}), {out}, second);
  CHECK(s.already_done == 2);  // dense with both solvers
  CHECK(s.ran == 8);
  CHECK(second.str().find("exact outputs") == std::string::npos);
  CHECK(read_runs(out).size() == 10);
}
