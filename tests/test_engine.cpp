// The chunked engine against the float64 token recurrence (SPEC §2, §3, §5, §6).
#include <catch2/catch.hpp>

#include "analysis/metrics.h"
#include "support/test_support.h"

using namespace sgdn;
using namespace sgdn::test;

namespace {

// Several shapes: ragged last chunk, a single short chunk, r = 1, 2, 4, batches, K != V.
std::vector<ShapeCase> shapes() {
  return {
      {{1, 100, 2, 2, 16, 16}, 32, false},  // r = 1, ragged (100 = 3 x 32 + 4)
      {{2, 96, 2, 4, 16, 24}, 32, true},    // r = 2, batch 2, K != V, initial state
      {{1, 77, 1, 4, 32, 16}, 16, true},    // r = 4, ragged
      {{1, 5, 2, 4, 8, 8}, 64, false},      // shorter than one chunk
      {{1, 129, 2, 2, 16, 16}, 64, true},   // last chunk of one token
  };
}

}  // namespace

TEST_CASE("token recurrence is its own definition on a hand-checked case", "[engine]") {
  // One head, K = V = 1: S_t = e^g S + β k (v − e^g S k) k, o = scale S q.
  Inputs<double> in = make_inputs<double>({1, 2, 1, 1, 1, 1}, true);
  in.q.values() = {1, 1};
  in.k.values() = {1, 1};
  in.v.values() = {2, -1};
  in.g.values() = {std::log(0.5), 0};
  in.beta.values() = {0.5, 1};
  in.initial_state.values() = {4};
  in.scale = 1;
  const auto out = token_recurrence(in);
  // t0: S̃ = 2, S = 2 + 0.5 (2 − 2) = 2; t1: S̃ = 2, S = 2 + (−1 − 2) = −1.
  CHECK(out.o[0] == Approx(2.0));
  CHECK(out.o[1] == Approx(-1.0));
  CHECK(out.final_state[0] == Approx(-1.0));
}

TEST_CASE("chunked exact equals the token recurrence in float64", "[engine]") {
  for (const ShapeCase& c : shapes()) {
    DYNAMIC_SECTION(c.shape.str() << " C=" << c.chunk << " S0=" << c.initial_state) {
      const Inputs<double> in = random_inputs(c.shape, 7, c.initial_state);
      const auto truth = token_recurrence(in);
      const auto s = make_strategies("exact", "update_norm", "dense");
      const auto res = run_cpu(in, config_of(s, c.chunk, 1, Granularity::pair));
      CHECK(relative_error(res.o, truth.o) < 1e-12);
      CHECK(relative_error(res.final_state, truth.final_state) < 1e-12);
      for (int64_t i = 0; i < res.event_mask.size(); ++i) REQUIRE(res.event_mask[i] == 1);
    }
  }
}

TEST_CASE("every event kept is exact for every group size G", "[engine]") {
  const ShapeCase c = shapes()[1];
  const Inputs<double> in = random_inputs(c.shape, 11, true);
  const auto truth = token_recurrence(in);
  const auto s = make_strategies("exact", "survival", "dense");
  for (int64_t group : {1, 2, 3, 5}) {
    DYNAMIC_SECTION("G=" << group) {
      const auto res = run_cpu(in, config_of(s, c.chunk, group, Granularity::head));
      CHECK(relative_error(res.o, truth.o) < 1e-12);
      CHECK(relative_error(res.final_state, truth.final_state) < 1e-12);
    }
  }
}

TEST_CASE("sparse recurrence and group outputs match the token-level oracle", "[engine]") {
  for (const ShapeCase& c : shapes()) {
    for (int64_t group : {1, 2, 4}) {
      for (const std::string& selector : selector_registry().names()) {
        DYNAMIC_SECTION(c.shape.str() << " G=" << group << " " << selector) {
          const Inputs<double> in = random_inputs(c.shape, 3 + uint64_t(group), c.initial_state);
          const auto s = make_strategies("exact", "survival", selector, {}, {{"rho", "0.4"}, {"seed", "5"}});
          auto cfg = config_of(s, c.chunk, group, Granularity::pair);
          cfg.keep_snapshots = true;
          const auto res = run_cpu(in, cfg);
          const auto oracle = sparse_token_oracle(in, res.event_mask, c.chunk, group);
          CHECK(relative_error(res.o, oracle.o) < 1e-12);
          CHECK(relative_error(res.final_state, oracle.final_state) < 1e-12);
          // One snapshot for S0 plus one after each selected event.
          int64_t selected = 0;
          for (int64_t i = 0; i < res.event_mask.size(); ++i) selected += res.event_mask[i];
          CHECK(res.snapshots.dim(0) == selected + c.shape.batch * c.shape.v_heads);
        }
      }
    }
  }
}

TEST_CASE("outputs are exact whatever the mask when one group spans the sequence", "[engine]") {
  const ShapeCase c = shapes()[2];
  const Inputs<double> in = random_inputs(c.shape, 5, true);
  const auto truth = token_recurrence(in);
  const auto s = make_strategies("exact", "update_norm", "topk", {}, {{"rho", "0.2"}});
  const auto res = run_cpu(in, config_of(s, c.chunk, num_chunks(c.shape.tokens, c.chunk), Granularity::head));
  CHECK(relative_error(res.o, truth.o) < 1e-12);
  CHECK(relative_error(res.final_state, truth.final_state) > 1e-3);  // the final state follows the mask
}

TEST_CASE("snapshots hold the carried state after each selected event", "[engine]") {
  const ShapeCase c = shapes()[1];
  const Inputs<double> in = random_inputs(c.shape, 2, true);
  const auto s = make_strategies("exact", "survival", "topk", {}, {{"rho", "0.5"}});
  auto cfg = config_of(s, c.chunk, 1, Granularity::head);
  cfg.keep_snapshots = true;
  cfg.record_chunk_states = true;
  const auto res = run_cpu(in, cfg);
  const int64_t N = num_chunks(c.shape.tokens, c.chunk), KV = c.shape.key_dim * c.shape.value_dim;
  for (int64_t i = 0; i < res.snapshot_index.dim(0); ++i) {
    const int64_t b = res.snapshot_index[i * 3], h = res.snapshot_index[i * 3 + 1];
    const int64_t chunk = res.snapshot_index[i * 3 + 2];
    if (chunk >= 0) REQUIRE(res.event_mask[(b * c.shape.v_heads + h) * N + chunk] == 1);
    const float* state = res.chunk_states.data() + ((b * c.shape.v_heads + h) * (N + 1) + chunk + 1) * KV;
    for (int64_t j = 0; j < KV; ++j) REQUIRE(res.snapshots[i * KV + j] == Approx(state[j]).margin(1e-6));
  }
}

TEST_CASE("state error against the exact chunk states", "[engine]") {
  const ShapeCase c = shapes()[1];
  const Inputs<double> in = random_inputs(c.shape, 4, true);
  const auto exact = run_exact(in, c.chunk, true);
  const auto dense = make_strategies("exact", "survival", "dense");
  auto cfg = config_of(dense, c.chunk, 1, Granularity::pair);
  cfg.reference_states = &exact.chunk_states;
  const auto same = run_cpu(in, cfg);
  for (int64_t i = 0; i < same.state_error.size(); ++i) REQUIRE(same.state_error[i] < 1e-6);
  const auto sparse = make_strategies("exact", "survival", "stride", {}, {{"rho", "0.34"}});
  auto cfg2 = config_of(sparse, c.chunk, 1, Granularity::pair);
  cfg2.reference_states = &exact.chunk_states;
  const auto approx = run_cpu(in, cfg2);
  double worst = 0;
  for (int64_t i = 0; i < approx.state_error.size(); ++i) worst = std::max(worst, approx.state_error[i]);
  CHECK(worst > 1e-3);
}

TEST_CASE("float32 engine agrees with the float64 oracle", "[engine]") {
  for (const ShapeCase& c : shapes()) {
    DYNAMIC_SECTION(c.shape.str()) {
      const Inputs<double> in = random_inputs(c.shape, 13, c.initial_state);
      const auto truth = token_recurrence(in);
      const auto s = make_strategies("exact", "survival", "dense");
      const auto res = run_cpu(in.cast<float>(), config_of(s, c.chunk, 2, Granularity::pair));
      CHECK(relative_error(res.o, truth.o) < 1e-5);
      CHECK(relative_error(res.final_state, truth.final_state) < 1e-5);
    }
  }
}

TEST_CASE("block_adjacent: full band is exact, and the error does not grow with the band",
          "[engine][solver]") {
  const Shape shape{1, 200, 2, 4, 16, 16};
  const Inputs<double> in = random_inputs(shape, 21, true);
  const auto truth = token_recurrence(in);
  const int64_t chunk = 64, block = 8, blocks = chunk / block;
  double previous = std::numeric_limits<double>::infinity();
  for (int64_t band = 0; band < blocks + 2; ++band) {
    const auto s = make_strategies("block_adjacent", "update_norm", "dense",
                                   {{"block", std::to_string(block)}, {"band", std::to_string(band)}});
    const auto res = run_cpu(in, config_of(s, chunk, 1, Granularity::pair));
    const double err = relative_error(res.o, truth.o);
    INFO("band " << band << " error " << err);
    if (band >= blocks - 1) {
      CHECK(err < 1e-12);
    } else {
      CHECK(err > 1e-12);  // an approximation indeed
    }
    CHECK(err <= previous * (1 + 1e-9) + 1e-14);
    previous = err;
  }
}

TEST_CASE("block_adjacent flop count grows with the band and reaches exact's", "[solver]") {
  const auto exact = solver_registry().create("exact", Params("solver", {}));
  double previous = 0;
  for (int band = 0; band < 4; ++band) {
    const auto s = solver_registry().create(
        "block_adjacent", Params("solver", {{"block", "16"}, {"band", std::to_string(band)}}));
    const double flops = s->flops_per_chunk(64, 256);
    CHECK(flops > previous);
    previous = flops;
  }
  CHECK(previous == Approx(exact->flops_per_chunk(64, 256)));
}

TEST_CASE("state error rebuilt from snapshots equals the engine's own", "[engine]") {
  // What backends without state probes (CUDA) report: the same numbers from their snapshots.
  const ShapeCase c = shapes()[1];
  const Inputs<double> in = random_inputs(c.shape, 14, true);
  const auto exact = run_exact(in, c.chunk, true);
  const auto s = make_strategies("exact", "survival", "topk", {}, {{"rho", "0.5"}});
  auto cfg = config_of(s, c.chunk, 2, Granularity::head);
  cfg.keep_snapshots = true;
  cfg.reference_states = &exact.chunk_states;
  const auto res = run_cpu(in, cfg);
  const Tensor<double> rebuilt = state_error_from_snapshots(in, c.chunk, res.event_mask, res.snapshots,
                                                            res.snapshot_index, exact.chunk_states);
  REQUIRE(rebuilt.dims() == res.state_error.dims());
  double worst = 0;
  for (int64_t i = 0; i < rebuilt.size(); ++i) {
    REQUIRE(rebuilt[i] == Approx(res.state_error[i]).epsilon(1e-4).margin(1e-6));
    worst = std::max(worst, rebuilt[i]);
  }
  CHECK(worst > 1e-3);  // a sparse run: the states do differ
}

TEST_CASE("cost model: hand counts, and what run_cpu reports", "[engine]") {
  // T = 100, C = 64: a full chunk and a ragged one of 36 tokens; K = 8, V = 4; one head.
  const Shape shape = Shape::of(1, 100, 1, 1, 8, 4);
  const auto s = make_strategies("exact", "update_norm", "dense");
  const EngineConfig cfg = config_of(s, 64, 1, Granularity::pair);
  Tensor<uint8_t> all({1, 1, 2}), none({1, 1, 2});
  all.values() = {1, 1};
  none.values() = {0, 0};
  double out = 0, update = 0, seq = 0, prepass = 0, dense = 0;
  for (const double len : {64.0, 36.0}) {
    const double kv = len * 8 * 4;
    out += 4 * kv + 2 * len * len * 8 + 2 * len * len * 4;  // W S, Q S, Q Kᵀ, A v
    update += 2 * kv;                                       // Kᵀ v̂ (v̂ is the output's v when G = 1)
    seq += 4 * kv;
    prepass += 2 * len * len * 8 + s.solver->flops_per_chunk(int64_t(len), 12);
    dense += 2 * len * len * 8 + len * (len - 1) * 12 + 6 * kv + 2 * len * len * 12;
  }
  const EngineCost kept = engine_cost(shape, cfg, all);
  CHECK(kept.flops == Approx(out + update + prepass).epsilon(1e-12));
  CHECK(kept.sequential_flops == Approx(seq).epsilon(1e-12));
  CHECK(kept.dense_flops == Approx(dense).epsilon(1e-12));
  CHECK(kept.flops == Approx(kept.dense_flops).epsilon(1e-12));  // dense exact is the dense count
  const EngineCost dropped = engine_cost(shape, cfg, none);
  CHECK(dropped.flops == Approx(out + prepass).epsilon(1e-12));
  CHECK(dropped.sequential_flops == 0);
  CHECK_THROWS_WITH(engine_cost(shape, cfg, Tensor<uint8_t>({1, 1, 3})), Catch::Contains("event mask"));

  // G = 2, two full chunks (T = 128): a skipped first chunk costs a group-local update (2 kv) and makes the
  // second chunk's event update both states (4 kv); a kept first chunk is the carried state itself (2 kv).
  {
    const Shape two = Shape::of(1, 128, 1, 1, 8, 4);
    const EngineConfig g2 = config_of(s, 64, 2, Granularity::pair);
    const double kv = 64.0 * 8 * 4, out2 = 2 * (4 * kv + 2 * 64.0 * 64 * 8 + 2 * 64.0 * 64 * 4);
    const double pre2 = 2 * (2 * 64.0 * 64 * 8 + s.solver->flops_per_chunk(64, 12));
    Tensor<uint8_t> second({1, 1, 2}), first({1, 1, 2});
    second.values() = {0, 1};
    first.values() = {1, 0};
    const EngineCost late = engine_cost(two, g2, second), early = engine_cost(two, g2, first);
    CHECK(late.flops == Approx(out2 + 2 * kv + 4 * kv + pre2).epsilon(1e-12));
    CHECK(late.sequential_flops == Approx(4 * kv).epsilon(1e-12));
    CHECK(early.flops == Approx(out2 + 2 * kv + pre2).epsilon(1e-12));
    CHECK(early.sequential_flops == Approx(4 * kv).epsilon(1e-12));
  }

  // run_cpu reports the same counts for its own mask, here with G = 2 (group-local updates) and a sparse
  // mask.
  const Inputs<double> in = random_inputs(Shape::of(2, 300, 2, 4, 16, 8), 5, true);
  const auto sparse = make_strategies("block_adjacent", "update_norm", "topk",
                                      {{"block", "8"}, {"band", "1"}}, {{"rho", "0.4"}});
  const EngineConfig grouped = config_of(sparse, 32, 2, Granularity::pair);
  const EngineResult<double> res = run_cpu(in, grouped);
  const EngineCost cost = engine_cost(in.shape, grouped, res.event_mask);
  CHECK(res.flops == cost.flops);
  CHECK(res.sequential_flops == cost.sequential_flops);
  CHECK(res.flops < res.dense_flops);
}
