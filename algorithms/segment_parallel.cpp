// Context-parallel evaluation of the sparse recurrence (SPEC §5): segment maps, their combination, replays.
#include "algorithms/segment_parallel.h"

#include <cmath>

#include "algorithms/prepared_chunk.h"
#include "core/error.h"

namespace sgdn {

namespace {

// A state (or a block of columns that moves like one) between events: the log decay accumulated since the
// last event is held aside and applied when the next event reads the state, as the engine does.
struct Pending {
  Mat<double>& x;
  double log_decay = 0;
  void materialize() {
    if (log_decay != 0) x *= std::exp(log_decay);
    log_decay = 0;
  }
  Mat<double> value() const { return x * std::exp(log_decay); }
};

// Selected chunk c: x ← e^{Γ} x + K̃ᵀ(U − W x), or without U (x ← A_c x) for columns of a transition.
void apply_event(const HeadChain& chain, int64_t c, Pending& state, bool with_write) {
  state.materialize();
  const size_t i = size_t(c);
  Mat<double> update = -(chain.w[i] * state.x);
  if (with_write) update += chain.u[i];
  state.x *= std::exp(chain.log_decay[i]);
  state.x.noalias() += chain.k_to_end[i].transpose() * update;
}

// Runs chunks [first, end) from `start`, recording what `out` asks for.
void run_chunks(const HeadChain& chain, Segment segment, const Mat<double>& start, ChainStates& out) {
  Mat<double> carried = start;
  Pending state{carried};
  out.boundary.push_back(start);
  for (int64_t c = segment.first; c < segment.end; ++c) {
    if (chain.selected[size_t(c)]) {
      apply_event(chain, c, state, true);
      out.snapshots.push_back(carried);
      out.snapshot_chunk.push_back(c);
    } else {
      state.log_decay += chain.log_decay[size_t(c)];
    }
    out.boundary.push_back(state.value());
  }
}

void check_segments(const HeadChain& chain, const std::vector<Segment>& segments) {
  require(!segments.empty(), "segment-parallel recurrence: no segments");
  int64_t next = 0;
  for (const Segment& s : segments) {
    require(s.first == next && s.end > s.first, "segment-parallel recurrence: segment [", s.first, ", ",
            s.end, ") does not continue at chunk ", next);
    next = s.end;
  }
  require(next == chain.chunks(), "segment-parallel recurrence: the segments end at chunk ", next, " of ",
          chain.chunks());
}

}  // namespace

HeadChain prepare_head_chain(const Inputs<double>& in, int64_t b, int64_t h, int64_t chunk,
                             const Solver& solver, const uint8_t* mask_row) {
  const Shape& s = in.shape;
  const int64_t N = num_chunks(s.tokens, chunk), K = s.key_dim, V = s.value_dim;
  HeadChain chain;
  chain.log_decay.resize(size_t(N));
  chain.selected.assign(mask_row, mask_row + N);
  chain.w.resize(size_t(N));
  chain.u.resize(size_t(N));
  chain.k_to_end.resize(size_t(N));
  chain.initial = Mat<double>::Zero(K, V);
  if (in.has_initial_state())
    chain.initial =
        Eigen::Map<const Mat<double>>(in.initial_state.data() + (b * s.v_heads + h) * K * V, K, V);
  PreparedChunk<double> prepared;
  for (int64_t c = 0; c < N; ++c) {
    gather_chunk(in, b, h, chunk, c, prepared);
    chain.log_decay[size_t(c)] = prepared.chunk_log_decay;
    if (!chain.selected[size_t(c)]) continue;
    solve_chunk(solver, prepared);
    chain.w[size_t(c)] = prepared.w;
    chain.u[size_t(c)] = prepared.u;
    chain.k_to_end[size_t(c)] = prepared.k_to_end;
  }
  return chain;
}

ChainStates sequential_chain(const HeadChain& chain) {
  ChainStates out;
  out.snapshots.push_back(chain.initial);
  out.snapshot_chunk.push_back(-1);
  run_chunks(chain, {0, chain.chunks()}, chain.initial, out);
  return out;
}

std::vector<Segment> segments_by_chunks(int64_t chunks, int64_t length) {
  require(chunks >= 1 && length >= 1, "segments_by_chunks: ", chunks, " chunks in segments of ", length);
  std::vector<Segment> out;
  for (int64_t first = 0; first < chunks; first += length)
    out.push_back({first, std::min(chunks, first + length)});
  return out;
}

std::vector<Segment> segments_by_events(const std::vector<uint8_t>& selected, int64_t events) {
  const int64_t N = int64_t(selected.size());
  require(N >= 1 && events >= 1, "segments_by_events: ", N, " chunks in segments of ", events, " events");
  std::vector<Segment> out;
  int64_t first = 0, held = 0;
  for (int64_t c = 0; c < N; ++c) {
    if (!selected[size_t(c)] || ++held < events) continue;
    out.push_back({first, c + 1});
    first = c + 1;
    held = 0;
  }
  if (first < N) {
    if (held == 0 && !out.empty())
      out.back().end = N;  // only unselected chunks remain: they decay the last segment's state
    else
      out.push_back({first, N});
  }
  return out;
}

SegmentSummary summarize_segment(const HeadChain& chain, Segment segment) {
  const int64_t K = chain.initial.rows(), V = chain.initial.cols();
  SegmentSummary out;
  out.transition = Mat<double>::Identity(K, K);
  out.local_final = Mat<double>::Zero(K, V);
  Pending transition{out.transition}, local{out.local_final};
  for (int64_t c = segment.first; c < segment.end; ++c) {
    if (chain.selected[size_t(c)]) {
      apply_event(chain, c, transition, false);
      apply_event(chain, c, local, true);
      ++out.events;
    } else {
      transition.log_decay += chain.log_decay[size_t(c)];
      local.log_decay += chain.log_decay[size_t(c)];
    }
  }
  transition.materialize();
  local.materialize();
  return out;
}

SegmentSummary compose(const SegmentSummary& later, const SegmentSummary& earlier) {
  SegmentSummary out;
  out.transition.noalias() = later.transition * earlier.transition;
  out.local_final = later.local_final;
  out.local_final.noalias() += later.transition * earlier.local_final;
  out.events = later.events + earlier.events;
  return out;
}

std::vector<Mat<double>> segment_starts(const Mat<double>& initial,
                                        const std::vector<SegmentSummary>& summaries) {
  std::vector<Mat<double>> starts{initial};
  for (const SegmentSummary& s : summaries) {
    Mat<double> next = s.local_final;
    next.noalias() += s.transition * starts.back();
    starts.push_back(std::move(next));
  }
  return starts;
}

std::vector<Mat<double>> segment_starts_by_scan(const Mat<double>& initial,
                                                const std::vector<SegmentSummary>& summaries) {
  // After the round with step d, prefix[j] composes segments (j − 2d, j]; after the last, all of [0, j].
  std::vector<SegmentSummary> prefix = summaries;
  for (size_t step = 1; step < prefix.size(); step *= 2) {
    std::vector<SegmentSummary> next = prefix;
    for (size_t j = step; j < prefix.size(); ++j) next[j] = compose(prefix[j], prefix[j - step]);
    prefix = std::move(next);
  }
  std::vector<Mat<double>> starts{initial};
  for (const SegmentSummary& p : prefix) {
    Mat<double> state = p.local_final;
    state.noalias() += p.transition * initial;
    starts.push_back(std::move(state));
  }
  return starts;
}

ChainStates replay_segment(const HeadChain& chain, Segment segment, const Mat<double>& start) {
  ChainStates out;
  run_chunks(chain, segment, start, out);
  return out;
}

ChainStates segment_parallel_chain(const HeadChain& chain, const std::vector<Segment>& segments,
                                   bool combine_by_scan) {
  check_segments(chain, segments);
  // Phase 1 (parallel over segments): the maps of all segments but the last, whose map no start needs. (A
  // kernel runs segment 0 straight from S0 instead: its start is known, so its transition is never read.)
  std::vector<SegmentSummary> summaries;
  for (size_t j = 0; j + 1 < segments.size(); ++j) summaries.push_back(summarize_segment(chain, segments[j]));
  // Phase 2 (sequential over segments, or a scan): every segment's start.
  const std::vector<Mat<double>> starts = combine_by_scan ? segment_starts_by_scan(chain.initial, summaries)
                                                          : segment_starts(chain.initial, summaries);
  // Phase 3 (parallel over segments): replays from the starts, laid end to end.
  ChainStates out;
  out.snapshots.push_back(chain.initial);
  out.snapshot_chunk.push_back(-1);
  out.boundary.push_back(chain.initial);
  for (size_t j = 0; j < segments.size(); ++j) {
    ChainStates part = replay_segment(chain, segments[j], starts[j]);
    out.boundary.insert(out.boundary.end(), part.boundary.begin() + 1, part.boundary.end());
    out.snapshots.insert(out.snapshots.end(), part.snapshots.begin(), part.snapshots.end());
    out.snapshot_chunk.insert(out.snapshot_chunk.end(), part.snapshot_chunk.begin(),
                              part.snapshot_chunk.end());
  }
  return out;
}

}  // namespace sgdn
