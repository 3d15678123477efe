// The chunked GDN engine (SPEC §3, §5, §6) and what one run produces. The CPU backend implements it with
// Eigen; the CUDA backend (kernels/) fills the same EngineResult.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "algorithms/score.h"
#include "algorithms/selector.h"
#include "algorithms/solver.h"
#include "core/inputs.h"

namespace sgdn {

// `pair`: one decision per head group and chunk (scores summed over the group, the mask shared by its r
// heads). `head`: one decision per value head. With r = 1 the two are the same.
enum class Granularity { pair, head };
Granularity parse_granularity(const std::string& text);
const char* granularity_name(Granularity g);

struct EngineConfig {
  int64_t chunk = 64;  // C
  int64_t group = 1;   // G: output window in chunks (SPEC §6)
  const Solver* solver = nullptr;
  const Score* score = nullptr;
  const Selector* selector = nullptr;
  Granularity granularity = Granularity::pair;
  bool keep_snapshots = false;       // fill snapshots / snapshot_index
  bool record_chunk_states = false;  // fill chunk_states with the carried state at every chunk boundary
  // Exact carried states [B, HV, N + 1, K, V] (as record_chunk_states gives them for an exact dense run):
  // when set, state_error is filled.
  const Tensor<float>* reference_states = nullptr;

  void validate(const Shape& shape) const;
};

template <class S>
struct EngineResult {
  Tensor<S> o;                     // [B, T, HV, V]
  Tensor<S> final_state;           // [B, HV, K, V] = Ŝ_N
  Tensor<uint8_t> event_mask;      // [B, HV, N]
  Tensor<float> event_score;       // [B, HV, N]
  Tensor<int32_t> budget;          // [B, units]: events each unit (head group or head) received
  Tensor<float> snapshots;         // [S, K, V]: S0 and the carried state after each selected event
  Tensor<int32_t> snapshot_index;  // [S, 3]: (batch, head, chunk after which it was taken; -1 for S0)
  Tensor<float> chunk_states;      // [B, HV, N + 1, K, V] when record_chunk_states
  Tensor<double> state_error;  // [B, HV, N]: ‖Ŝ_{c+1} − S_{c+1}‖_F / ‖S_{c+1}‖_F, with reference_states
  double flops = 0;            // floating-point operations of this configuration (cost model)
  double dense_flops = 0;       // the same count for exact solver and every event kept
  double sequential_flops = 0;  // the part on the carried-state chain (selected events only)
  double seconds = 0;           // wall time of the engine call (cuda: median GPU time of the forward)
};

// The cost model (SPEC §8) of a configuration and the event mask it produced: the pre-pass of every chunk
// (L, the solver, the score's write norm where the selector reads scores), the output of every chunk, and the
// state updates at selected events and inside groups. Every backend reports these counts for its run.
struct EngineCost {
  double flops = 0;
  double dense_flops = 0;       // exact solver, every event kept
  double sequential_flops = 0;  // on the carried-state chain (selected events only)
};
EngineCost engine_cost(const Shape& shape, const EngineConfig& config, const Tensor<uint8_t>& event_mask);

// Runs the CPU backend. Validates the inputs and the configuration first (sgdn::Error naming the problem).
template <class S>
EngineResult<S> run_cpu(const Inputs<S>& inputs, const EngineConfig& config);

// The exact dense reference: exact solver, every event kept, optional chunk states. Float64.
struct ExactReference {
  Tensor<double> o;
  Tensor<double> final_state;
  Tensor<float> chunk_states;  // [B, HV, N + 1, K, V] when requested
};
ExactReference run_exact(const Inputs<double>& inputs, int64_t chunk, bool record_chunk_states);

// The float64 token recurrence of SPEC §2: the oracle every other path is checked against.
struct TokenRecurrenceResult {
  Tensor<double> o;            // [B, T, HV, V]
  Tensor<double> final_state;  // [B, HV, K, V]
};
TokenRecurrenceResult token_recurrence(const Inputs<double>& inputs);

}  // namespace sgdn
