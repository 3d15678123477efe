// The strategy families: shared properties checked for every registered strategy, then the budgets and
// rules SPEC §7 states for each built-in one.
#include <catch2/catch.hpp>
#include <set>

#include "support/test_support.h"

using namespace sgdn;
using namespace sgdn::test;

namespace {

const Shape kShape{2, 300, 2, 4, 16, 16};  // r = 2, N = 10 chunks of 32 (the last one short)
constexpr int64_t kChunk = 32;

UnitScores scores_of(const std::vector<double>& values, int64_t units) {
  return {units, int64_t(values.size()) / units, values.data()};
}

std::vector<uint8_t> select(const Selector& selector, const std::vector<double>& scores, int64_t units,
                            int64_t sequence = 0) {
  std::vector<uint8_t> mask(scores.size(), 0);
  selector.select(scores_of(scores, units), sequence, mask.data());
  return mask;
}

std::unique_ptr<Selector> selector(const std::string& name, std::map<std::string, std::string> params = {}) {
  return selector_registry().create(name, Params("selector", std::move(params)));
}

int64_t kept_in_unit(const std::vector<uint8_t>& mask, int64_t unit, int64_t chunks) {
  int64_t kept = 0;
  for (int64_t c = 0; c < chunks; ++c) kept += mask[size_t(unit * chunks + c)];
  return kept;
}

}  // namespace

TEST_CASE("every registered solver is the identity on L = 0 and runs in the engine", "[solver]") {
  const Inputs<double> in = random_inputs(kShape, 1, true);
  const auto truth = token_recurrence(in);
  for (const std::string& name : solver_registry().names()) {
    DYNAMIC_SECTION(name) {
      const auto solver = solver_registry().create(name, Params("solver", {{"block", "8"}}));
      Mat<double> l = Mat<double>::Zero(kChunk, kChunk), rhs = Mat<double>::Random(kChunk, 5);
      const Mat<double> before = rhs;
      solver->apply(l, rhs);
      CHECK((rhs - before).norm() < 1e-14);
      CHECK(solver->flops_per_chunk(kChunk, 32) > 0);
      const auto s = make_strategies(name, "update_norm", "dense", {{"block", "8"}});
      const auto res = run_cpu(in, config_of(s, kChunk, 1, Granularity::pair));
      const double err = relative_error(res.o, truth.o);
      CHECK(std::isfinite(err));
      CHECK(err < 0.5);
    }
  }
}

TEST_CASE("exact solver: (I + L) T_c rhs = rhs", "[solver]") {
  const auto solver = solver_registry().create("exact", Params("solver", {}));
  Mat<double> l = Mat<double>::Random(40, 40);
  l.triangularView<Eigen::Upper>().setZero();
  const Mat<double> rhs = Mat<double>::Random(40, 7);
  Mat<double> x = rhs;
  solver->apply(l, x);
  const Mat<double> back = x + l * x;
  CHECK((back - rhs).norm() / rhs.norm() < 1e-12);
}

TEST_CASE("every registered selector: a 0/1 mask, reproducible, shared across a head pair", "[selector]") {
  const Inputs<double> in = random_inputs(kShape, 2, false);
  for (const std::string& name : selector_registry().names()) {
    DYNAMIC_SECTION(name) {
      const auto s = make_strategies("exact", "survival", name, {}, {{"rho", "0.3"}});
      const auto a = run_cpu(in, config_of(s, kChunk, 1, Granularity::pair));
      const auto b = run_cpu(in, config_of(s, kChunk, 1, Granularity::pair));
      REQUIRE(a.event_mask.values() == b.event_mask.values());
      const int64_t N = num_chunks(kShape.tokens, kChunk), r = kShape.group_ratio();
      for (int64_t seq = 0; seq < kShape.batch; ++seq) {
        for (int64_t h = 0; h < kShape.v_heads; ++h) {
          int64_t kept = 0;
          for (int64_t c = 0; c < N; ++c) {
            const uint8_t m = a.event_mask[(seq * kShape.v_heads + h) * N + c];
            REQUIRE(m <= 1);
            kept += m;
            // pair granularity: every head of a group shares the group's decision
            REQUIRE(m == a.event_mask[(seq * kShape.v_heads + (h / r) * r) * N + c]);
          }
          REQUIRE(a.budget[seq * kShape.qk_heads + h / r] == kept);
        }
      }
    }
  }
}

TEST_CASE("every registered selector: head granularity decides per value head", "[selector]") {
  const Inputs<double> in = random_inputs(kShape, 3, true);
  for (const std::string& name : selector_registry().names()) {
    DYNAMIC_SECTION(name) {
      const auto s = make_strategies("exact", "update_norm", name, {}, {{"rho", "0.5"}});
      const auto res = run_cpu(in, config_of(s, kChunk, 1, Granularity::head));
      REQUIRE(res.budget.dims() == std::vector<int64_t>{kShape.batch, kShape.v_heads});
      const auto oracle = sparse_token_oracle(in, res.event_mask, kChunk, 1);
      CHECK(relative_error(res.o, oracle.o) < 1e-12);
    }
  }
}

TEST_CASE("budgets: dense, random, stride, topk keep exactly round(rho N) per unit", "[selector]") {
  const int64_t units = 3, chunks = 17;
  std::vector<double> scores(size_t(units * chunks));
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = double((i * 7919) % 23);
  for (double rho : {0.05, 0.29, 0.5, 1.0}) {
    const int64_t want = std::llround(rho * chunks);
    for (const char* name : {"random", "stride", "topk"}) {
      const auto mask = select(*selector(name, {{"rho", std::to_string(rho)}}), scores, units);
      for (int64_t u = 0; u < units; ++u) CHECK(kept_in_unit(mask, u, chunks) == want);
    }
  }
  const auto all = select(*selector("dense"), scores, units);
  for (int64_t u = 0; u < units; ++u) CHECK(kept_in_unit(all, u, chunks) == chunks);
}

TEST_CASE("topk keeps the highest scores and breaks ties toward the earlier chunk", "[selector]") {
  const std::vector<double> scores = {1, 5, 5, 2, 5, 0, /* unit 1 */ 3, 3, 3, 3, 3, 3};
  const auto mask = select(*selector("topk", {{"rho", "0.5"}}), scores, 2);
  CHECK(mask == std::vector<uint8_t>{0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0});
}

TEST_CASE("head_budget shares one budget across units by score", "[selector]") {
  // Unit 0 holds the large scores: it takes most of the budget round(0.5 * 4 * 2) = 4.
  const std::vector<double> scores = {9, 8, 7, 1, /* unit 1 */ 6, 0.5, 0.2, 0.1};
  const auto mask = select(*selector("head_budget", {{"rho", "0.5"}}), scores, 2);
  CHECK(mask == std::vector<uint8_t>{1, 1, 1, 0, 1, 0, 0, 0});
  // min_per_head gives unit 1 two events first.
  const auto floor2 = select(*selector("head_budget", {{"rho", "0.5"}, {"min_per_head", "2"}}), scores, 2);
  CHECK(floor2 == std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0});
  // Ties: the earlier chunk first, then the lower unit.
  const std::vector<double> flat(8, 1.0);
  const auto tied = select(*selector("head_budget", {{"rho", "0.375"}}), flat, 2);  // round(3) events
  CHECK(tied == std::vector<uint8_t>{1, 1, 0, 0, 1, 0, 0, 0});
  CHECK_THROWS_WITH(select(*selector("head_budget", {{"rho", "0.25"}, {"min_per_head", "2"}}), scores, 2),
                    Catch::Contains("min_per_head"));
}

TEST_CASE("head_budget's max_fraction caps each unit and passes the rest of the budget on", "[selector]") {
  const std::vector<double> scores = {9, 8, 7, 1, /* unit 1 */ 6, 0.5, 0.2, 0.1};
  // Budget 4, cap round(0.5 * 4) = 2: unit 0 stops at 9 and 8; its 7 goes to unit 1's 6 and 0.5.
  const auto capped = select(*selector("head_budget", {{"rho", "0.5"}, {"max_fraction", "0.5"}}), scores, 2);
  CHECK(capped == std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0});
  // A cap of 3 binds less: unit 0 keeps 9, 8, 7 and unit 1 its 6.
  const auto three = select(*selector("head_budget", {{"rho", "0.5"}, {"max_fraction", "0.75"}}), scores, 2);
  CHECK(three == std::vector<uint8_t>{1, 1, 1, 0, 1, 0, 0, 0});
  // The floor counts toward the cap.
  const auto both = select(
      *selector("head_budget", {{"rho", "0.5"}, {"min_per_head", "1"}, {"max_fraction", "0.5"}}), scores, 2);
  CHECK(both == std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0});
  CHECK_THROWS_WITH(selector("head_budget", {{"rho", "0.5"}, {"max_fraction", "0.25"}}),
                    Catch::Contains("max_fraction"));
  CHECK_THROWS_WITH(selector("head_budget", {{"rho", "0.5"}, {"max_fraction", "1.5"}}),
                    Catch::Contains("max_fraction"));
}

TEST_CASE("selector_param_text names the parameters that differ from their defaults", "[selector]") {
  CHECK(selector_param_text("head_budget", {{"selector.max_fraction", "0.4"},
                                            {"selector.min_per_head", "0"}}) == " max_fraction=0.4");
  CHECK(selector_param_text("head_budget", {{"selector.max_fraction", "1.0"}, {"selector.rho", "0.5"}})
            .empty());
  CHECK(selector_param_text("head_budget",
                            {{"selector.min_per_head", "2"}, {"selector.max_fraction", "0.5"}}) ==
        " min_per_head=2 max_fraction=0.5");
  // The score's parameters too, where the selector reads scores.
  CHECK(selector_param_text("head_budget", {{"selector.score", "isolated_write"},
                                            {"selector.sharpness", "2"},
                                            {"selector.min_per_head", "2"}}) ==
        " sharpness=2 min_per_head=2");
  CHECK(
      selector_param_text("head_budget", {{"selector.score", "isolated_write"}, {"selector.sharpness", "4"}})
          .empty());
  CHECK(selector_param_text("no_such_selector", {{"selector.x", "1"}}).empty());
}

TEST_CASE("head_budget keeps round(rho N units) overall on random scores", "[selector]") {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t units : {1, 4, 16}) {
    std::vector<double> scores(size_t(units * 37));
    for (double& x : scores) x = u(rng);
    for (double rho : {0.1, 0.29, 0.77}) {
      const auto mask = select(*selector("head_budget", {{"rho", std::to_string(rho)}}), scores, units);
      int64_t total = 0;
      for (uint8_t m : mask) total += m;
      CHECK(total == std::llround(rho * 37 * units));
      // it is the top of the scores: every kept score >= every dropped score
      double min_kept = 1e9, max_dropped = -1;
      for (size_t i = 0; i < mask.size(); ++i)
        (mask[i] ? min_kept = std::min(min_kept, scores[i]) : max_dropped = std::max(max_dropped, scores[i]));
      CHECK(min_kept >= max_dropped);
    }
  }
}

TEST_CASE("threshold keeps scores >= tau x mean", "[selector]") {
  const std::vector<double> scores = {1, 2, 3, 6};  // mean 3
  CHECK(select(*selector("threshold", {{"tau", "1"}}), scores, 1) == std::vector<uint8_t>{0, 0, 1, 1});
  CHECK(select(*selector("threshold", {{"tau", "0.5"}}), scores, 2) == std::vector<uint8_t>{0, 1, 1, 1});
}

TEST_CASE("random is reproducible by seed, differs across seeds and sequences", "[selector]") {
  const std::vector<double> scores(size_t(4 * 50), 0.0);
  const auto a = select(*selector("random", {{"seed", "1"}}), scores, 4);
  CHECK(a == select(*selector("random", {{"seed", "1"}}), scores, 4));
  CHECK(a != select(*selector("random", {{"seed", "2"}}), scores, 4));
  CHECK(a != select(*selector("random", {{"seed", "1"}}), scores, 4, /*sequence=*/1));
}

TEST_CASE("stride spreads its events evenly", "[selector]") {
  const std::vector<double> scores(10, 0.0);
  CHECK(select(*selector("stride", {{"rho", "0.2"}}), scores, 1) ==
        std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(select(*selector("stride", {{"rho", "0.5"}}), scores, 1) ==
        std::vector<uint8_t>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
}

TEST_CASE("survival satisfies p_c = 1 + e^{Gamma_{c+1}} p_{c+1}, p_{N-1} = 0", "[score]") {
  const Inputs<double> in = random_inputs(kShape, 4, false);
  const auto norm = make_strategies("exact", "update_norm", "dense");
  const auto surv = make_strategies("exact", "survival", "dense");
  const auto a = run_cpu(in, config_of(norm, kChunk, 1, Granularity::head));
  const auto b = run_cpu(in, config_of(surv, kChunk, 1, Granularity::head));
  const int64_t N = num_chunks(kShape.tokens, kChunk);
  for (int64_t seq = 0; seq < kShape.batch; ++seq) {
    for (int64_t h = 0; h < kShape.v_heads; ++h) {
      // Γ_c from the inputs.
      std::vector<double> gamma(size_t(N), 0.0), p(size_t(N), 0.0);
      for (int64_t t = 0; t < kShape.tokens; ++t)
        gamma[size_t(t / kChunk)] += in.g[(seq * kShape.tokens + t) * kShape.v_heads + h];
      for (int64_t c = N - 2; c >= 0; --c)
        p[size_t(c)] = 1 + std::exp(gamma[size_t(c + 1)]) * p[size_t(c + 1)];
      for (int64_t c = 0; c < N; ++c) {
        const int64_t i = (seq * kShape.v_heads + h) * N + c;
        REQUIRE(a.event_score[i] > 0);
        REQUIRE(b.event_score[i] == Approx(a.event_score[i] * p[size_t(c)]).epsilon(1e-5));
      }
      REQUIRE(b.event_score[(seq * kShape.v_heads + h) * N + N - 1] == 0);
    }
  }
}

TEST_CASE("update_norm is the norm of the chunk's write into a zero state", "[score]") {
  // With S = 0 the exact chunk write is Kdᵀ U; run one chunk with a zero state and compare.
  const Shape one{1, 32, 1, 1, 16, 16};
  const Inputs<double> in = random_inputs(one, 6, false);
  const auto s = make_strategies("exact", "update_norm", "dense");
  const auto res = run_cpu(in, config_of(s, 32, 1, Granularity::head));
  double norm = 0;
  const auto truth = token_recurrence(in);
  for (double x : truth.final_state.values()) norm += x * x;
  CHECK(res.event_score[0] == Approx(std::sqrt(norm)).epsilon(1e-5));
}

TEST_CASE("registries: unknown names list the known ones, names register once", "[registry]") {
  CHECK_THROWS_WITH(selector_registry().create("topq", Params()),
                    Catch::Contains("head_budget") && Catch::Contains("unknown selector 'topq'"));
  CHECK_THROWS_WITH(solver_registry().create("neumann", Params()), Catch::Contains("block_adjacent"));
  CHECK_THROWS_WITH(score_registry().create("x", Params()), Catch::Contains("survival"));
  Registry<Selector> r("selector");
  r.add(selector_registry().entry("dense"));
  CHECK_THROWS_WITH(r.add(selector_registry().entry("dense")), Catch::Contains("registered twice"));
}

TEST_CASE("bad parameters are errors that name the key", "[registry]") {
  for (const char* rho : {"0", "-0.1", "1.5", "abc"}) {
    CHECK_THROWS_WITH(selector("topk", {{"rho", rho}}), Catch::Contains("selector.rho"));
  }
  CHECK_THROWS_WITH(solver_registry().create("block_adjacent", Params("solver", {{"band", "-1"}})),
                    Catch::Contains("solver.band"));
  const auto s = make_strategies("block_adjacent", "update_norm", "dense", {{"block", "24"}});
  CHECK_THROWS_WITH(run_cpu(random_inputs(kShape, 1, false), config_of(s, 64, 1, Granularity::pair)),
                    Catch::Contains("solver.block = 24 does not divide run.chunk = 64"));
}

TEST_CASE("bad inputs are errors that name the problem", "[inputs]") {
  const auto s = make_strategies("exact", "update_norm", "dense");
  const EngineConfig cfg = config_of(s, kChunk, 1, Granularity::pair);
  auto expect_error = [&](const Inputs<double>& in, const std::string& what) {
    CHECK_THROWS_WITH(run_cpu(in, cfg), Catch::Contains(what));
  };
  const Inputs<double> good = random_inputs(kShape, 1, true);
  {
    Inputs<double> in = good;
    in.v = Tensor<double>({2, 300, 4, 8});
    expect_error(in, "input v has shape [2, 300, 4, 8]");
  }
  {
    Inputs<double> in = good;
    in.shape.v_heads = 3;
    expect_error(in, "must be a multiple of qk_heads");
  }
  {
    Inputs<double> in = good;
    in.q[17] = std::nan("");
    expect_error(in, "input q holds a non-finite value");
  }
  {
    Inputs<double> in = good;
    in.k[3] = std::numeric_limits<double>::infinity();
    expect_error(in, "input k holds a non-finite value");
  }
  {
    Inputs<double> in = good;
    in.g[5] = 0.1;
    expect_error(in, "g must be <= 0");
  }
  {
    Inputs<double> in = good;
    in.beta[5] = 1.5;
    expect_error(in, "beta must lie in [0, 1]");
    in.allow_negative_eigenvalues = true;
    CHECK_NOTHROW(run_cpu(in, cfg));
    in.beta[5] = -0.1;
    expect_error(in, "beta must lie in [0, 2]");
  }
  {
    Inputs<double> in = good;
    in.initial_state = Tensor<double>({2, 4, 16, 15});
    expect_error(in, "input initial_state has shape");
  }
  EngineConfig bad = cfg;
  bad.group = 0;
  CHECK_THROWS_WITH(run_cpu(good, bad), Catch::Contains("run.group"));
}

TEST_CASE("every registered score is finite, non-negative and tells chunks apart", "[score]") {
  const Inputs<double> in = random_inputs(kShape, 8, true);
  for (const std::string& name : score_registry().names()) {
    DYNAMIC_SECTION(name) {
      const auto s = make_strategies("exact", name, "topk", {}, {{"rho", "0.3"}});
      const auto res = run_cpu(in, config_of(s, kChunk, 2, Granularity::pair));
      std::set<float> distinct;
      for (int64_t i = 0; i < res.event_score.size(); ++i) {
        REQUIRE(std::isfinite(res.event_score[i]));
        REQUIRE(res.event_score[i] >= 0);
        distinct.insert(res.event_score[i]);
      }
      CHECK(distinct.size() > size_t(res.event_score.size() / 2));
    }
  }
}

TEST_CASE("peak_write of a one-token chunk is that token's write norm", "[score]") {
  // With chunk = 1 the write is rank one, ‖k uᵀ‖_F = ‖k‖ ‖u‖: peak_write without persistence equals
  // update_norm.
  const Inputs<double> in = random_inputs({1, 20, 1, 2, 8, 8}, 12, false);
  const auto peak = make_strategies("exact", "peak_write", "dense", {}, {{"persistence", "false"}});
  const auto norm = make_strategies("exact", "update_norm", "dense");
  const auto a = run_cpu(in, config_of(peak, 1, 1, Granularity::head));
  const auto b = run_cpu(in, config_of(norm, 1, 1, Granularity::head));
  for (int64_t i = 0; i < a.event_score.size(); ++i)
    REQUIRE(a.event_score[i] == Approx(b.event_score[i]).epsilon(1e-5));
}

TEST_CASE("survival with skip_own_group leaves out the event's own group", "[score]") {
  const Inputs<double> in = random_inputs(kShape, 9, false);
  const auto full = make_strategies("exact", "survival", "dense");
  const auto skip = make_strategies("exact", "survival", "dense", {}, {{"skip_own_group", "true"}});
  const auto a = run_cpu(in, config_of(full, kChunk, 3, Granularity::head));
  const auto b = run_cpu(in, config_of(skip, kChunk, 3, Granularity::head));
  const int64_t N = num_chunks(kShape.tokens, kChunk);
  for (int64_t i = 0; i < a.event_score.size(); ++i) {
    REQUIRE(b.event_score[i] <= a.event_score[i] * (1 + 1e-6));
    if (i % N == N - 1) REQUIRE(b.event_score[i] == 0);
  }
  // By hand for G = 3: p_c without the chunks c+1 .. end of c's group, each weighted by the decay between.
  for (int64_t seq = 0; seq < kShape.batch; ++seq) {
    for (int64_t h = 0; h < kShape.v_heads; ++h) {
      std::vector<double> gamma(size_t(N), 0.0);
      for (int64_t t = 0; t < kShape.tokens; ++t)
        gamma[size_t(t / kChunk)] += in.g[(seq * kShape.tokens + t) * kShape.v_heads + h];
      for (int64_t c = 0; c < N; ++c) {
        double p = 0, weight = 1;
        for (int64_t later = c + 1; later < N; ++later) {
          if (later >= (c / 3 + 1) * 3) p += weight;  // beyond c's group
          weight *= std::exp(gamma[size_t(later)]);
        }
        const int64_t i = (seq * kShape.v_heads + h) * N + c;
        // a holds update_norm x p_full, so the write's norm is a / p_full.
        double p_full = 0, w_full = 1;
        for (int64_t later = c + 1; later < N; ++later) {
          p_full += w_full;
          w_full *= std::exp(gamma[size_t(later)]);
        }
        if (p_full > 0)
          REQUIRE(b.event_score[i] == Approx(a.event_score[i] / p_full * p).epsilon(1e-4).margin(1e-6));
      }
    }
  }
  // With G = 1 nothing is skipped.
  const auto c = run_cpu(in, config_of(skip, kChunk, 1, Granularity::head));
  for (int64_t i = 0; i < a.event_score.size(); ++i) REQUIRE(c.event_score[i] == Approx(a.event_score[i]));
}

TEST_CASE("isolated_write weights each write by iota = 1 for orthogonal keys and 1 / C for a shared key",
          "[score]") {
  // Chunks of 8 tokens; K = 16; keys of norm 1/2, so that iota's normalisation by ‖k_i‖⁴ matters.
  // peak_write without persistence is the unweighted max_i ‖k̃_i‖ ‖u_i‖.
  const Shape shape{1, 64, 1, 2, 16, 16};
  constexpr int64_t chunk = 8;
  Inputs<double> in = random_inputs(shape, 21, false);
  auto keys = [&](bool orthogonal) {
    for (int64_t t = 0; t < shape.tokens; ++t)
      for (int64_t d = 0; d < shape.key_dim; ++d)
        in.k[t * shape.key_dim + d] = d == (orthogonal ? t % chunk : 0) ? 0.5 : 0.0;
  };
  auto scores = [&](const std::string& name, std::map<std::string, std::string> params) {
    const auto s = make_strategies("exact", name, "dense", {}, std::move(params));
    return run_cpu(in, config_of(s, chunk, 1, Granularity::head)).event_score;
  };
  for (const bool orthogonal : {true, false}) {
    keys(orthogonal);
    const auto peak = scores("peak_write", {{"persistence", "false"}});
    const auto once = scores("isolated_write", {{"sharpness", "1"}});
    const auto twice = scores("isolated_write", {{"sharpness", "2"}});
    const double iota = orthogonal ? 1.0 : 1.0 / chunk;
    for (int64_t i = 0; i < peak.size(); ++i) {
      REQUIRE(peak[i] > 0);
      REQUIRE(once[i] == Approx(iota * peak[i]).epsilon(1e-5));
      REQUIRE(twice[i] == Approx(iota * iota * peak[i]).epsilon(1e-5));
    }
  }
}
