// Metrics of SPEC §8: output error (overall, per value head, per position bucket), state error per chunk
// (computed by the engine against the exact chunk states), retention, and cost against dense.
#pragma once
#include <cstdint>
#include <vector>

#include "algorithms/engine.h"

namespace sgdn {

struct OutputError {
  double overall = 0;                 // ‖O − O_exact‖ / ‖O_exact‖
  std::vector<double> per_head;       // [HV], over the batch
  std::vector<double> per_bucket;     // [buckets]: tokens split into equal position ranges
  std::vector<int64_t> bucket_start;  // [buckets]: first token of each bucket
};

template <class S>
OutputError output_error(const Tensor<S>& o, const Tensor<double>& exact, const Shape& shape,
                         int64_t buckets);

struct Retention {
  double overall = 0;            // kept events / all events
  std::vector<double> per_unit;  // [units]: fraction kept by each head group (or head), batch mean
};
Retention retention(const Tensor<uint8_t>& event_mask, const Tensor<int32_t>& budget);

// The state error of SPEC §8 rebuilt from a run's snapshots, for backends that do not measure it
// themselves: the carried state after chunk c is the latest snapshot times the decay of the unselected chunks
// since, compared with reference_states [B, HV, N + 1, K, V] (the exact states). Returns [B, HV, N].
Tensor<double> state_error_from_snapshots(const Inputs<double>& inputs, int64_t chunk,
                                          const Tensor<uint8_t>& event_mask, const Tensor<float>& snapshots,
                                          const Tensor<int32_t>& snapshot_index,
                                          const Tensor<float>& reference_states);

// Mean over the batch and value heads of the per-chunk state error: [N].
std::vector<double> state_error_by_chunk(const Tensor<double>& state_error);

struct Cost {
  double flops_ratio = 0;        // flops of the configuration / dense flops (NaN: not counted)
  double sequential_ratio = 0;   // flops on the carried-state chain / the dense chain's
  double state_bytes = 0;        // carried states kept (snapshots, fp32)
  double dense_state_bytes = 0;  // a state per chunk and head, as a dense chunked kernel writes (fp32)
};
Cost cost_of(const Shape& shape, int64_t chunk, double flops, double dense_flops, double sequential_flops,
             const Tensor<uint8_t>& event_mask);

}  // namespace sgdn
