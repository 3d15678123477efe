// Context-parallel evaluation of the sparse carried-state recurrence (SPEC §5), in float64: the reference a
// segment-parallel GPU recurrence is checked against.
//
// Over one chunk the carried state of a value head moves by an affine map,
//     selected:   Ŝ ← A_c Ŝ + B_c,   A_c = e^{Γ_c} I − K̃_cᵀ W_c (K×K),   B_c = K̃_cᵀ U_c (K×V),
//     unselected: Ŝ ← e^{Γ_c} Ŝ,
// with K̃ = e^{Γ−γ} ⊙ K (the keys as the chunk's end sees them). A segment of consecutive chunks therefore
// moves the state by the composition of its chunks' maps, Ŝ_end = M Ŝ_first + Ŝ_local: M (K×K, the
// segment's transition) is the product of the A_c of its SELECTED events times the scalar decay of the
// others, and Ŝ_local is the segment's final state from a zero start. Every segment's (M, Ŝ_local) can be
// computed at once; a short sequential pass over segments (or a prefix scan, the maps being associative)
// then gives each segment's true start, from which each segment replays its chunks, again all at once.
//
// M evolves by the same linear part as the state: the columns [Ŝ | M] of a K×(V+K) block follow
// X ← e^{Γ} X + K̃ᵀ([U | 0] − W X) at a selected event, so a kernel computes M by running its state update
// over K more columns that start at the identity and read no U.
#pragma once
#include <cstdint>
#include <vector>

#include "algorithms/eigen_types.h"
#include "core/inputs.h"

namespace sgdn {

class Solver;

// What the carried-state recurrence of one value head reads.
struct HeadChain {
  std::vector<double> log_decay;  // Γ_c of every chunk, [N]
  std::vector<uint8_t> selected;  // E[h, c], [N]
  // Filled at selected chunks only (empty matrices elsewhere): W_c [len, K], U_c [len, V], K̃_c [len, K].
  std::vector<Mat<double>> w, u, k_to_end;
  Mat<double> initial;  // S0, or zero without an initial state [K, V]
  int64_t chunks() const { return int64_t(log_decay.size()); }
};

// Chunk by chunk pre-pass of value head h of sequence b (SPEC §3, with `solver`); `mask_row` holds the
// head's N event flags.
HeadChain prepare_head_chain(const Inputs<double>& inputs, int64_t b, int64_t h, int64_t chunk,
                             const Solver& solver, const uint8_t* mask_row);

// Carried states of a run over chunks [first, end): the state at each chunk boundary first..end, and the
// state after each selected event (snapshots, SPEC §5) with the chunk it was taken after.
struct ChainStates {
  std::vector<Mat<double>> boundary;    // end − first + 1 states
  std::vector<Mat<double>> snapshots;   // whole-chain runs begin with S0 (chunk −1)
  std::vector<int64_t> snapshot_chunk;  // parallel to snapshots
};

// The sequential recurrence of SPEC §5 over the whole chain: the definition the segments must reproduce.
ChainStates sequential_chain(const HeadChain& chain);

// A run of consecutive chunks [first, end).
struct Segment {
  int64_t first = 0, end = 0;
};

// Cuts N chunks into segments of `length` chunks (the last may be shorter).
std::vector<Segment> segments_by_chunks(int64_t chunks, int64_t length);
// Cuts the chain so that each segment holds at most `events` selected events: a segment ends just after its
// last event, and the unselected chunks after a chain's last event join the last segment. A chain without
// events is one segment. Cutting by events balances the segments' sequential work, which is proportional to
// their events, where a selector concentrates events in a few heads.
std::vector<Segment> segments_by_events(const std::vector<uint8_t>& selected, int64_t events);

// A segment's affine map: Ŝ_end = transition · Ŝ_first + local_final.
struct SegmentSummary {
  Mat<double> transition;   // [K, K]
  Mat<double> local_final;  // [K, V]: Ŝ_end from a zero start
  int64_t events = 0;       // selected events in the segment
};

// The map of one segment, computed without its start state.
SegmentSummary summarize_segment(const HeadChain& chain, Segment segment);
// The map of `earlier` followed by `later`.
SegmentSummary compose(const SegmentSummary& later, const SegmentSummary& earlier);

// The start of every segment and, last, the chain's final state (size = segments + 1), from S0 and the
// segments' summaries in order: Ŝ_{j+1} = M_j Ŝ_j + local_j.
std::vector<Mat<double>> segment_starts(const Mat<double>& initial,
                                        const std::vector<SegmentSummary>& summaries);
// The same states from an inclusive prefix scan of the summaries (Hillis–Steele: log2 of the segment count
// rounds of compose, each round parallel over segments), as a device would combine many segments.
std::vector<Mat<double>> segment_starts_by_scan(const Mat<double>& initial,
                                                const std::vector<SegmentSummary>& summaries);

// Replays one segment from its start: its boundary states and the snapshots of its events.
ChainStates replay_segment(const HeadChain& chain, Segment segment, const Mat<double>& start);

// The whole context-parallel evaluation: summaries of every segment but the last, starts by the sequential
// combine (or the scan), replays of every segment; the result has sequential_chain's layout.
ChainStates segment_parallel_chain(const HeadChain& chain, const std::vector<Segment>& segments,
                                   bool combine_by_scan = false);

}  // namespace sgdn
