// Configs (SPEC §11): INI parsing, errors that name the key, sweeps, overrides, stable run ids, shards.
#include <catch2/catch.hpp>

#include <set>

#include "experiments/config.h"

using namespace sgdn;

namespace {

const char* kSmall = R"(
[workload]
kind = random
tokens = 200
qk_heads = 2
v_heads = 4
key_dim = 16
value_dim = 16

[run]
chunk = 32

[solver]
block = 8

[sweep]
solver.name = exact, block_adjacent
selector.name = dense, topk
selector.rho = 0.1, 0.5
)";

}  // namespace

TEST_CASE("a sweep expands to its cartesian product without duplicate runs", "[config]") {
  const Experiment exp = parse_experiment(kSmall, {});
  const std::vector<RunSpec> runs = exp.expand();
  // dense ignores rho: 2 solvers x (1 dense + 2 topk) = 6 distinct runs out of 8 points.
  REQUIRE(runs.size() == 6);
  std::set<std::string> ids;
  for (const RunSpec& r : runs) {
    ids.insert(r.id);
    CHECK(r.get("workload.tokens") == "200");
    CHECK(r.get("run.chunk") == "32");
    CHECK(r.get("selector.score") == "update_norm");  // a default filled in
    CHECK(r.resolved.count("workload.path") == 0);    // unused by the random kind
    if (r.get("solver.name") == "exact") CHECK(r.resolved.count("solver.band") == 0);
  }
  CHECK(ids.size() == 6);
  CHECK(runs[0].workload_id == runs[5].workload_id);
}

TEST_CASE("run ids are stable and depend only on the keys a run uses", "[config]") {
  const auto a = parse_experiment(kSmall, {}).expand();
  const auto b = parse_experiment(kSmall, {}).expand();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].id == b[i].id);
  // The same run written with an unused key differs only in that key: same id.
  const auto exact1 = parse_experiment("[solver]\nname = exact\nband = 1\n", {}).expand();
  const auto exact2 = parse_experiment("[solver]\nname = exact\nband = 3\n", {}).expand();
  CHECK(exact1.at(0).id == exact2.at(0).id);
  const auto ba1 = parse_experiment("[solver]\nname = block_adjacent\nband = 1\n", {}).expand();
  const auto ba2 = parse_experiment("[solver]\nname = block_adjacent\nband = 3\n", {}).expand();
  CHECK(ba1.at(0).id != ba2.at(0).id);
}

TEST_CASE("overrides given with --set win over the file, sweep lists included", "[config]") {
  const auto runs =
      parse_experiment(kSmall, {"selector.name=topk", "selector.rho = 0.3", "run.group=2"}).expand();
  REQUIRE(runs.size() == 2);  // only the solver sweep remains
  for (const RunSpec& r : runs) {
    CHECK(r.get("selector.name") == "topk");
    CHECK(r.get("selector.rho") == "0.3");
    CHECK(r.get("run.group") == "2");
  }
}

TEST_CASE("SPEC defaults: the project's default sparse configuration", "[config]") {
  const RunSpec r = parse_experiment("", {}).expand().at(0);
  CHECK(r.get("solver.name") == "block_adjacent");
  CHECK(r.get("solver.band") == "1");
  CHECK(r.get("solver.block") == "16");
  CHECK(r.get("selector.name") == "head_budget");
  CHECK(r.get("selector.rho") == "0.29");
  CHECK(r.get("selector.score") == "update_norm");
  CHECK(r.get("selector.granularity") == "pair");
  CHECK(r.get("run.chunk") == "64");
  CHECK(r.get("workload.tokens") == "4096");
  CHECK(r.get("workload.v_heads") == "32");
}

TEST_CASE("config errors name the key and what is allowed", "[config]") {
  CHECK_THROWS_WITH(parse_experiment("[solver]\nbnd = 1\n", {}),
                    Catch::Contains("unknown config key 'solver.bnd'") && Catch::Contains("band"));
  CHECK_THROWS_WITH(parse_experiment("[solvers]\nname = exact\n", {}), Catch::Contains("the sections are"));
  CHECK_THROWS_WITH(parse_experiment("[sweep]\nselector.rhoo = 0.1\n", {}), Catch::Contains("selector.rhoo"));
  CHECK_THROWS_WITH(parse_experiment("", {"run.chunks=3"}), Catch::Contains("run.chunks"));
  CHECK_THROWS_WITH(parse_experiment("", {"run.chunk"}), Catch::Contains("section.key=value"));
  CHECK_THROWS_WITH(parse_experiment("[run]\nchunk = 64\nchunk = 32\n", {}), Catch::Contains("given twice"));
  CHECK_THROWS_WITH(parse_experiment("[run]\nthis line has no equals sign\n", {}),
                    Catch::Contains("<string>"));
  auto expand_error = [](const std::string& ini) { return parse_experiment(ini, {}).expand(); };
  CHECK_THROWS_WITH(expand_error("[selector]\nname = topq\n"),
                    Catch::Contains("selector.name = 'topq'") && Catch::Contains("head_budget"));
  CHECK_THROWS_WITH(expand_error("[selector]\nrho = 1.5\n"),
                    Catch::Contains("selector.rho = 1.5 is outside (0, 1]"));
  CHECK_THROWS_WITH(expand_error("[selector]\nrho = 0\n"), Catch::Contains("selector.rho"));
  CHECK_THROWS_WITH(expand_error("[solver]\nband = -1\n"), Catch::Contains("solver.band"));
  CHECK_THROWS_WITH(expand_error("[solver]\nblock = 24\n"), Catch::Contains("does not divide run.chunk"));
  CHECK_THROWS_WITH(expand_error("[workload]\nv_heads = 24\nqk_heads = 16\n"),
                    Catch::Contains("multiple of qk_heads"));
  CHECK_THROWS_WITH(expand_error("[workload]\ntokens = 0\n"), Catch::Contains("workload.tokens"));
  CHECK_THROWS_WITH(expand_error("[workload]\ntokens = many\n"), Catch::Contains("workload.tokens = 'many'"));
  CHECK_THROWS_WITH(expand_error("[run]\nbackend = tpu\n"), Catch::Contains("allowed: cpu, cuda"));
  CHECK_THROWS_WITH(expand_error("[run]\nprecision = bfloat16\n"),
                    Catch::Contains("not available on the cpu backend"));
  CHECK_THROWS_WITH(expand_error("[dump]\nstates = maybe\n"), Catch::Contains("dump.states"));
  CHECK_THROWS_WITH(expand_error("[workload]\nkind = file\n"), Catch::Contains("workload.path"));
  CHECK_THROWS_WITH(expand_error("[workload]\nkind = file\npath = /nonexistent/x.h5\n"),
                    Catch::Contains("/nonexistent/x.h5"));
}

TEST_CASE("shards partition the runs", "[config]") {
  CHECK(parse_shard("1/4") == std::make_pair<int64_t, int64_t>(1, 4));
  CHECK_THROWS_WITH(parse_shard("4/4"), Catch::Contains("0 <= i < n"));
  CHECK_THROWS_WITH(parse_shard("2"), Catch::Contains("i/n"));
}

TEST_CASE("selectors that ignore scores do not multiply over a score sweep", "[config]") {
  const auto runs = parse_experiment(R"(
[sweep]
selector.name = dense, stride, topk
selector.score = update_norm, survival, peak_write
selector.rho = 0.1, 0.2
)",
                                     {})
                        .expand();
  // dense 1 + stride 2 rho + topk 3 scores x 2 rho
  CHECK(runs.size() == 9);
}

TEST_CASE("a strategy parameter added later leaves earlier run ids unchanged at its default", "[config]") {
  // The id this run had before head_budget's max_fraction existed: result files written then still resume.
  const char* kRun = "[workload]\nkind = random\ntokens = 128\n";
  CHECK(parse_experiment(kRun, {}).expand().at(0).id == "rb40956a2b937");
  CHECK(parse_experiment(kRun, {"selector.max_fraction=1.0"}).expand().at(0).id == "rb40956a2b937");
  const RunSpec capped = parse_experiment(kRun, {"selector.max_fraction=0.5"}).expand().at(0);
  CHECK(capped.id != "rb40956a2b937");
  CHECK(capped.label().find("max_fraction=0.5") != std::string::npos);
}

TEST_CASE("run ids do not depend on how a number or boolean is written", "[config]") {
  const auto a = parse_experiment("[selector]\nrho = 0.1\n[dump]\nstates = yes\n", {}).expand().at(0);
  const auto b = parse_experiment("[selector]\nrho = 0.10\n[dump]\nstates = true\n", {}).expand().at(0);
  CHECK(a.id == b.id);
  CHECK(a.get("selector.rho") == "0.1");
  CHECK(a.get("dump.states") == "true");
  const auto c = parse_experiment("[selector]\nrho = 0.1\n[dump]\nstates = 1\n", {}).expand().at(0);
  CHECK(c.id == a.id);
  // A strategy's boolean parameter the same way: `key = value` under [selector] with the given score.
  const auto with_score = [](const std::string& score, const std::string& key, const std::string& value) {
    return parse_experiment("[selector]\nname = topk\nscore = " + score + "\n" + key + " = " + value + "\n",
                            {})
        .expand()
        .at(0);
  };
  const auto survival = [&](const std::string& skip) {
    return with_score("survival", "skip_own_group", skip);
  };
  CHECK(survival("1").id == survival("true").id);
  CHECK(survival("on").get("selector.skip_own_group") == "true");
  CHECK(survival("0").id == survival("false").id);
  CHECK(survival("0").id != survival("1").id);
  CHECK_THROWS_WITH(survival("maybe"), Catch::Contains("selector.skip_own_group"));
  const auto peak = [&](const std::string& persistence) {
    return with_score("peak_write", "persistence", persistence);
  };
  CHECK(peak("no").get("selector.persistence") == "false");
  CHECK(peak("0").id == peak("false").id);
}

#ifndef SGDN_WITH_CUDA
TEST_CASE("the cuda backend on a build without it is an error before anything runs", "[config]") {
  CHECK_THROWS_WITH(parse_experiment("[run]\nbackend = cuda\nprecision = float32\n", {}).expand(),
                    Catch::Contains("built without the CUDA backend"));
}
#endif

#ifdef SGDN_WITH_CUDA
TEST_CASE("timing repeats are checked but not part of a cuda run's identity", "[config]") {
  const auto id_with = [](const std::string& repeats) {
    return parse_experiment(kSmall,
                            {"run.backend=cuda", "run.precision=bfloat16", "run.timing_repeats=" + repeats})
        .expand()
        .front()
        .id;
  };
  CHECK(id_with("1") == id_with("7"));
  CHECK_THROWS_WITH(id_with("0"), Catch::Contains("run.timing_repeats"));
}
#endif

TEST_CASE("variant sections are sweep axes whose values set several keys", "[config]") {
  const char* kVariants = R"(
[workload]
kind = needle
tokens = 256
qk_heads = 2
v_heads = 4
key_dim = 16
value_dim = 16
needle_dims = 4

[variant.base]
workload.positions = depths
[variant.chunk_of_needles]
workload.task = multiquery
workload.needle_spacing = 8
[variant.shape.small]
workload.key_dim = 16
workload.value_dim = 16
[variant.shape.wide]
workload.key_dim = 32
workload.value_dim = 32

[sweep]
selector.name = dense, topk
)";
  const std::vector<RunSpec> runs = parse_experiment(kVariants, {}).expand();
  // 2 constructions x 2 shapes x 2 selectors, the variant axes slowest.
  REQUIRE(runs.size() == 8);
  using Variants = std::vector<std::pair<std::string, std::string>>;
  CHECK(runs[0].variants == Variants{{"", "base"}, {"shape", "small"}});
  CHECK(runs[2].variants == Variants{{"", "base"}, {"shape", "wide"}});
  CHECK(runs[4].variants == Variants{{"", "chunk_of_needles"}, {"shape", "small"}});
  CHECK(runs[0].get("workload.task") == "single");
  CHECK(runs[4].get("workload.task") == "multiquery");
  CHECK(runs[4].get("workload.needle_spacing") == "8");
  CHECK(runs[2].get("workload.key_dim") == "32");
  CHECK(runs[2].get("workload.value_dim") == "32");
  CHECK(runs[1].get("selector.name") == "topk");
  CHECK(runs[4].label().find("[chunk_of_needles] [shape.small]") != std::string::npos);

  // The command line wins over a variant; a key in a variant and in [sweep], or in two axes, is an error.
  const auto overridden =
      parse_experiment(kVariants, {"workload.key_dim=64", "workload.value_dim=64"}).expand();
  for (const RunSpec& r : overridden) CHECK(r.get("workload.key_dim") == "64");
  CHECK_THROWS_WITH(parse_experiment(std::string(kVariants) + "workload.task = single\n", {}),
                    Catch::Contains("workload.task") && Catch::Contains("[variant.chunk_of_needles]"));
  CHECK_THROWS_WITH(
      parse_experiment("[variant.a.x]\nworkload.tokens = 64\n[variant.b.y]\nworkload.tokens = 128\n", {}),
      Catch::Contains("workload.tokens"));
  CHECK_THROWS_WITH(parse_experiment("[variant.a]\nworkload.no_such_key = 1\n", {}),
                    Catch::Contains("workload.no_such_key") && Catch::Contains("[variant.a]"));
}

TEST_CASE("needle construction keys at their defaults leave earlier run and workload ids unchanged",
          "[config]") {
  // The ids this needle run had before the construction keys existed: result files written then resume.
  const char* kRun =
      "[workload]\nkind = needle\ntokens = 256\nqk_heads = 2\nv_heads = 4\nkey_dim = 16\n"
      "value_dim = 16\nneedle_dims = 4\n";
  const RunSpec before = parse_experiment(kRun, {}).expand().at(0);
  CHECK(before.id == "re83e8b1a41d7");
  CHECK(before.workload_id == "w48d1e486513c");
  const RunSpec spelled = parse_experiment(kRun, {"workload.positions=depths", "workload.key_overlap=0.0",
                                                  "workload.strong_writes=0", "workload.decay_spectrum=mixed",
                                                  "workload.value_norm=codebook"})
                              .expand()
                              .at(0);
  CHECK(spelled.id == before.id);
  CHECK(spelled.workload_id == before.workload_id);
  const RunSpec overlapping = parse_experiment(kRun, {"workload.key_overlap=0.02"}).expand().at(0);
  CHECK(overlapping.id != before.id);
  CHECK(overlapping.workload_id != before.workload_id);
}
