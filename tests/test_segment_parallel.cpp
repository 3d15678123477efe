// The context-parallel evaluation of the sparse recurrence (algorithms/segment_parallel.h) against the
// sequential recurrence of SPEC §5, and that recurrence against the engine.
#include <catch2/catch.hpp>

#include "algorithms/segment_parallel.h"
#include "support/test_support.h"

using namespace sgdn;
using namespace sgdn::test;

namespace {

// Ragged last chunks, GVA (r = 2 and 4), K != V, a batch of two, an initial state or none.
std::vector<ShapeCase> cases() {
  return {
      {{2, 100, 2, 4, 16, 8}, 16, true},  // N = 7, last chunk of 4 tokens
      {{1, 161, 1, 4, 8, 16}, 8, false},  // N = 21, last chunk of 1 token
      {{1, 96, 2, 2, 16, 16}, 16, true},  // r = 1, N = 6 full chunks
  };
}

// ‖x − ref‖_F ≤ tol · ‖ref‖_F for every pair (zero states must come out exactly zero).
bool states_match(const std::vector<Mat<double>>& x, const std::vector<Mat<double>>& ref, double tol) {
  if (x.size() != ref.size()) return false;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!((x[i] - ref[i]).norm() <= tol * ref[i].norm())) return false;
  return true;
}

// The segment plans under test: 1 chunk, a few chunks, exactly N, more than N; 1, 2, 3 events and more
// events than the chain holds.
std::vector<std::pair<std::string, std::vector<Segment>>> plans(const HeadChain& chain) {
  const int64_t N = chain.chunks();
  std::vector<std::pair<std::string, std::vector<Segment>>> out;
  for (int64_t length : {int64_t(1), int64_t(2), int64_t(3), N, N + 5})
    out.push_back({"chunks " + std::to_string(length), segments_by_chunks(N, length)});
  for (int64_t events : {int64_t(1), int64_t(2), int64_t(3), N + 1})
    out.push_back({"events " + std::to_string(events), segments_by_events(chain.selected, events)});
  return out;
}

}  // namespace

TEST_CASE("segment cuts cover the chain in order", "[segment_parallel]") {
  const std::vector<uint8_t> mask = {0, 1, 1, 0, 0, 1, 0, 0};
  const auto by_chunks = segments_by_chunks(8, 3);
  REQUIRE(by_chunks.size() == 3);
  CHECK((by_chunks[2].first == 6 && by_chunks[2].end == 8));
  const auto by_events = segments_by_events(mask, 2);  // [0, 3) holds 2 events, [3, 8) the third
  REQUIRE(by_events.size() == 2);
  CHECK((by_events[0].first == 0 && by_events[0].end == 3));
  CHECK((by_events[1].first == 3 && by_events[1].end == 8));
  const auto single = segments_by_events(mask, 1);  // ends after chunks 1, 2 and 5; 6, 7 join the last
  REQUIRE(single.size() == 3);
  CHECK(single[2].end == 8);
  CHECK(segments_by_events(std::vector<uint8_t>(5, 0), 2).size() == 1);
}

TEST_CASE("the sequential chain is the engine's carried-state recurrence", "[segment_parallel]") {
  for (const ShapeCase& c : cases()) {
    DYNAMIC_SECTION(c.shape.str() << " C=" << c.chunk << " S0=" << c.initial_state) {
      const Inputs<double> in = random_inputs(c.shape, 11, c.initial_state);
      const auto s = make_strategies("exact", "survival", "random", {}, {{"rho", "0.5"}, {"seed", "3"}});
      EngineConfig config = config_of(s, c.chunk, 1, Granularity::pair);
      config.keep_snapshots = true;
      const auto res = run_cpu(in, config);
      const int64_t HV = c.shape.v_heads, N = num_chunks(c.shape.tokens, c.chunk);
      const int64_t KV = c.shape.key_dim * c.shape.value_dim;
      int64_t snapshot = 0;
      for (int64_t b = 0; b < c.shape.batch; ++b) {
        for (int64_t h = 0; h < HV; ++h) {
          const HeadChain chain =
              prepare_head_chain(in, b, h, c.chunk, *s.solver, res.event_mask.data() + (b * HV + h) * N);
          const ChainStates states = sequential_chain(chain);
          const Eigen::Map<const Mat<double>> final_state(res.final_state.data() + (b * HV + h) * KV,
                                                          c.shape.key_dim, c.shape.value_dim);
          CHECK((states.boundary.back() - final_state).norm() <= 1e-12 * final_state.norm());
          // The engine keeps its snapshots in float32, in (batch, head, chunk) order.
          for (size_t i = 0; i < states.snapshots.size(); ++i, ++snapshot) {
            REQUIRE(res.snapshot_index[snapshot * 3 + 2] == states.snapshot_chunk[i]);
            const Eigen::Map<const Mat<float>> engine(res.snapshots.data() + snapshot * KV, c.shape.key_dim,
                                                      c.shape.value_dim);
            CHECK((engine.cast<double>() - states.snapshots[i]).norm() <= 1e-6 * states.snapshots[i].norm());
          }
        }
      }
      CHECK(snapshot == res.snapshots.dims()[0]);
    }
  }
}

TEST_CASE("segment-parallel evaluation reproduces the sequential sparse recurrence", "[segment_parallel]") {
  for (const std::string selector : {"random", "head_budget", "dense"}) {
    for (const ShapeCase& c : cases()) {
      DYNAMIC_SECTION(selector << " " << c.shape.str() << " C=" << c.chunk << " S0=" << c.initial_state) {
        const Inputs<double> in = random_inputs(c.shape, 23, c.initial_state);
        const auto s = make_strategies("block_adjacent", "survival", selector,
                                       {{"block", "4"}, {"band", "1"}}, {{"rho", "0.4"}, {"seed", "9"}});
        const auto res = run_cpu(in, config_of(s, c.chunk, 1, Granularity::pair));
        const int64_t HV = c.shape.v_heads, N = num_chunks(c.shape.tokens, c.chunk);
        for (int64_t b = 0; b < c.shape.batch; ++b) {
          for (int64_t h = 0; h < HV; ++h) {
            const HeadChain chain =
                prepare_head_chain(in, b, h, c.chunk, *s.solver, res.event_mask.data() + (b * HV + h) * N);
            const ChainStates truth = sequential_chain(chain);
            for (const auto& [name, segments] : plans(chain)) {
              for (const bool scan : {false, true}) {
                INFO("head " << h << " batch " << b << ", segments of " << name << (scan ? ", scan" : ""));
                const ChainStates parallel = segment_parallel_chain(chain, segments, scan);
                CHECK(parallel.snapshot_chunk == truth.snapshot_chunk);
                CHECK(states_match(parallel.boundary, truth.boundary, 1e-12));
                CHECK(states_match(parallel.snapshots, truth.snapshots, 1e-12));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a segment's map moves any start state as the recurrence does", "[segment_parallel]") {
  const Shape shape{1, 120, 2, 4, 16, 8};
  const int64_t chunk = 16;
  const Inputs<double> in = random_inputs(shape, 5, true);
  const auto s = make_strategies("exact", "survival", "random", {}, {{"rho", "0.6"}, {"seed", "1"}});
  const auto res = run_cpu(in, config_of(s, chunk, 1, Granularity::head));
  const int64_t N = num_chunks(shape.tokens, chunk);
  for (int64_t h = 0; h < shape.v_heads; ++h) {
    const HeadChain chain = prepare_head_chain(in, 0, h, chunk, *s.solver, res.event_mask.data() + h * N);
    const Segment middle{1, N - 1};
    const SegmentSummary map = summarize_segment(chain, middle);
    int64_t events = 0;
    for (int64_t c = middle.first; c < middle.end; ++c) events += chain.selected[size_t(c)];
    CHECK(map.events == events);
    const Mat<double> start = Mat<double>::Random(shape.key_dim, shape.value_dim);
    const ChainStates replay = replay_segment(chain, middle, start);
    Mat<double> mapped = map.local_final;
    mapped.noalias() += map.transition * start;
    CHECK((mapped - replay.boundary.back()).norm() <= 1e-12 * replay.boundary.back().norm());
    // Two halves composed are the whole segment's map.
    const int64_t cut = (middle.first + middle.end) / 2;
    const SegmentSummary halves =
        compose(summarize_segment(chain, {cut, middle.end}), summarize_segment(chain, {middle.first, cut}));
    CHECK((halves.transition - map.transition).norm() <= 1e-12 * map.transition.norm());
    CHECK((halves.local_final - map.local_final).norm() <= 1e-12 * map.local_final.norm());
  }
}
