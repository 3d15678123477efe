// The GPU engine of SparseGDN (SPEC §3–§7, §12) as seen from host code: plain sizes, enums and device
// pointers. No Eigen, no sgdn::Tensor: both the C ABI (sgdn_cuda_capi.cpp) and the C++ adapter
// (cuda_backend.cpp) translate their inputs into a Problem and a set of DeviceTensors and call forward().
//
// Layouts (row-major; one packed batch of `num_seqs` sequences, as FLA's varlen path):
//   q, k          [total_tokens, H, K]     (float32 or bfloat16, `input_dtype`)
//   v             [total_tokens, HV, V]    (input_dtype)
//   g             [total_tokens, HV]       float32 log decay
//   beta          [total_tokens, HV]       (input_dtype)
//   cu_seqlens    [num_seqs + 1] int32     sequence s holds tokens [cu_seqlens[s], cu_seqlens[s+1])
//   initial_state [num_seqs, HV, K, V]     float32 (optional)
//   o             [total_tokens, HV, V]    (output_dtype)
//   final_state   [num_seqs, HV, K, V]     float32 (optional)
//   per-event arrays (event_mask uint8, event_score float32): sequence s owns the block
//     [chunk_offset[s] * HV, chunk_offset[s+1] * HV) laid out [HV, N_s], where N_s = ceil(len_s / chunk)
//     and chunk_offset is the running sum of N_s. For a fixed-length batch this is exactly [B, HV, N].
//   budget        [num_seqs, units] int32, units = H (pair granularity) or HV (head granularity).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "core/strategy_table.h"

namespace sgdn {
namespace cuda {

enum class DType : int { float32 = 0, bfloat16 = 1 };
// The scores and selectors of core/strategies.def, with its codes (the C ABI's).
enum class ScoreKind : int {
#define SGDN_SCORE(name, NAME, code) name = code,
#include "core/strategies.def"
};
enum class SelectorKind : int {
#define SGDN_SELECTOR(name, NAME, code) name = code,
#include "core/strategies.def"
};

constexpr int kMaxChunk = 64;     // C <= 64
constexpr int kMaxHeadDim = 128;  // K, V <= 128, multiples of 16
constexpr int kMaxValueHeads = 1024;

struct Problem {
  int64_t num_seqs = 1;
  int64_t total_tokens = 0;
  int qk_heads = 0;   // H
  int v_heads = 0;    // HV
  int key_dim = 0;    // K
  int value_dim = 0;  // V
  int chunk = 64;     // C
  int group = 1;      // G, output window in chunks
  int solver_block = 16;
  int solver_band = -1;  // < 0: exact (unbounded band)
  ScoreKind score = ScoreKind::survival;
  bool survival_skip_own_group = false;
  SelectorKind selector = SelectorKind::dense;
  bool pair_granularity = true;
  double rho = 1.0;
  double tau = 1.0;
  uint64_t seed = 0;
  int64_t min_per_head = 0;
  double max_fraction = 1.0;  // head_budget: a unit keeps at most round(max_fraction N) events
  float scale = 0.f;          // <= 0: 1/sqrt(K)
  DType input_dtype = DType::float32;
  DType output_dtype = DType::float32;
  // Tensor-core path: bf16 operands with fp32 accumulation for every matrix product, bf16 U/W.
  // Taken only where it applies (bf16 inputs, K = V = 128, C = 64); elsewhere the fp32 path runs.
  // Error against float64 about 3e-3 (bf16 parity bound 1e-2) instead of 1e-6 on bf16-rounded inputs.
  bool tensor_cores = false;
  // The sparse chain cut into segments of at most `segment_events` selected events, summarised, combined
  // and replayed in parallel (context parallelism, tensor-core path, sparse selector, G = 1): `automatic`
  // where the plan expects it to pay, else as set (the tests force it); segment_events <= 0: the plan's.
  // C++ only: the C ABI always takes `automatic`.
  enum class ContextParallel { automatic, off, on };
  ContextParallel context_parallel = ContextParallel::automatic;
  int64_t segment_events = 0;
  bool uses_tensor_cores() const {
    return tensor_cores && input_dtype == DType::bfloat16 && key_dim == 128 && value_dim == 128 &&
           chunk == 64;
  }

  int ratio() const { return v_heads / qk_heads; }
  int units() const { return pair_granularity ? qk_heads : v_heads; }
  // An upper bound on the number of chunks of the packed batch: sum ceil(len/C) <= total/C + num_seqs.
  int64_t max_chunks() const { return total_tokens / chunk + num_seqs; }
};

struct DeviceTensors {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* g = nullptr;
  const void* beta = nullptr;
  const int32_t* cu_seqlens = nullptr;  // may be null when num_seqs == 1
  const float* initial_state = nullptr;
  void* o = nullptr;
  float* final_state = nullptr;
  uint8_t* event_mask = nullptr;  // optional: else kept in the workspace
  float* event_score = nullptr;   // optional
  int32_t* budget = nullptr;      // optional
};

// Empty when the problem is supported, else a message naming the offending value and what is allowed.
std::string check_problem(const Problem& p);

// Device bytes of scratch memory that forward() needs for this problem (an upper bound over cu_seqlens).
size_t workspace_bytes(const Problem& p);

// Runs the whole prefill on `stream`: chunk table, pre-pass (decay, solve, U, W, statistics), scores,
// selection, the sparse recurrence over selected events with snapshots, and the outputs. Returns an empty
// string, or a message (CUDA error or bad argument). Asynchronous: nothing is synchronised.
std::string forward(const Problem& p, const DeviceTensors& t, void* workspace, size_t workspace_size,
                    cudaStream_t stream);

// The first snapshot slot of sequence s (first chunk id chunk0 = chunk_offset[s], n chunks), value head hv:
// each head of a sequence owns n + 1 consecutive slots, the sequences' blocks one after another.
__host__ __device__ inline int64_t snapshot_slot_base(int64_t chunk0, int64_t s, int HV, int hv, int64_t n) {
  return (chunk0 + s) * HV + int64_t(hv) * (n + 1);
}
// Where forward() left the snapshots inside the workspace (valid until the workspace is reused).
// Sequence s, value head h owns snapshot slots [slot_base, slot_base + N_s + 1) with
// slot_base = snapshot_slot_base(chunk_offset[s], s, HV, h, N_s); slot 0 is S0, slot m the carried state
// after the m-th selected event; snapshot_chunk[slot] is that event's chunk (-1 for S0) and
// snapshot_count[s*HV+h] the number of slots used.
struct SnapshotView {
  const float* snapshots = nullptr;         // [slots, K, V] float32, or bfloat16 when snapshots_bf16
  bool snapshots_bf16 = false;              // the tensor-core path keeps its snapshots in bf16
  const int32_t* snapshot_chunk = nullptr;  // [slots]
  const int32_t* snapshot_count = nullptr;  // [num_seqs * HV]
  const int32_t* chunk_offset = nullptr;    // [num_seqs + 1]
  int64_t max_slots = 0;
};
SnapshotView snapshot_view(const Problem& p, void* workspace);

// The selector's name as the CPU side registers it ("?" for a code outside the table).
inline const char* selector_name(SelectorKind s) {
  const char* name = strategy_name(StrategyFamily::selector, int(s));
  return name ? name : "?";
}

// The recurrence and output kernels that forward() runs side by side for problem p on this device: the
// recurrence's copy stages, each block's threads and each kernel's registers per thread as ptxas allocated
// them (for the tests that keep an output block fitting beside a 2-stage recurrence block, and a mask
// expansion block beside two). `separate` is false where forward() has no separate output stage there (no
// tensor cores, or the one-pass form).
struct StageRegisters {
  bool separate = false;
  int stages = 0;
  int recurrence_threads = 0, recurrence_registers = 0;
  int output_threads = 0, output_registers = 0;
  // The mask expansion (beside the recurrence under a sparse selector); the recurrence's dynamic and the
  // expansion's static shared memory.
  int expand_threads = 0, expand_registers = 0;
  size_t recurrence_smem = 0, expand_smem = 0;
};
std::string stage_registers(const Problem& p, StageRegisters* r);

}  // namespace cuda
}  // namespace sgdn
