// What every stage of the GPU forward shares: block sizes, the chunk and group records of the chunk table,
// the workspace's layout, the argument records of the pre-pass, the recurrence and the outputs, the indices
// of the per-event arrays, programmatic dependent launch, and the tensor-core path's tile constants.
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gdn_device.h"

namespace sgdn {
namespace cuda {
namespace detail {
constexpr int kThreads = 256;
constexpr int kValueTile = 64;  // V columns per block in the recurrence and output stages
constexpr int kTcTile = 32;     // V columns per progress flag (and per block, or two) of the tc recurrence

__device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// ---------------------------------------------------------------------------------------------------------
// What a pre-pass block (per chunk) and an output block (per output group) need before their first copy, in
// one 16- or 32-byte load instead of a chain of dependent loads (sequence, its offsets, then addresses).
// Entries past the last sequence's have s = -1.
struct alignas(16) ChunkInfo {
  int32_t s, c, t0, len;  // sequence, chunk within it, first token, tokens
};
struct alignas(16) GroupInfo {
  int32_t s, first, n, chunk0;  // sequence, its first chunk in this group, its chunks, its first chunk's id
  int32_t seq_start, seq_len;
  int32_t id;     // the group's index in the per-(group, value head) records (group_slot, group_log_decay)
  int32_t count;  // the group's chunks (G, fewer at the sequence's end; runs: see group_split)
};
__device__ __forceinline__ ChunkInfo load_chunk_info(const ChunkInfo* table, int64_t id) {
  const int4 x = *reinterpret_cast<const int4*>(table + id);
  return {x.x, x.y, x.z, x.w};
}
__device__ __forceinline__ GroupInfo load_group_info(const GroupInfo* table, int64_t at) {
  const int4 x = reinterpret_cast<const int4*>(table + at)[0],
             y = reinterpret_cast<const int4*>(table + at)[1];
  return {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
}
// Chunk c (within its sequence) of an output group: its first token, its tokens (at most C), and its slot in
// the per-(chunk, value head) arrays (γ, U, W) for value head hv.
struct ChunkPlace {
  int64_t t0;
  int len;
  int64_t cslot;
};
__device__ __forceinline__ ChunkPlace chunk_place(const GroupInfo& gi, int64_t c, int C, int HV, int hv) {
  return {gi.seq_start + c * C, int(min_i64(C, gi.seq_len - c * C)), (gi.chunk0 + c) * HV + hv};
}

// ---------------------------------------------------------------------------------------------------------
// Workspace layout: one function carves it for both the size query and the run.
struct Workspace {
  int32_t* seq_start;       // [S]
  int32_t* seq_len;         // [S]
  int32_t* chunk_offset;    // [S + 1]
  int32_t* group_offset;    // [S + 1]
  ChunkInfo* chunk_info;    // [Nmax]
  GroupInfo* group_info;    // [Nmax]
  float* gamma;             // [Nmax, HV, C]
  float* u;                 // [Nmax, HV, C, V]
  float* w;                 // [Nmax, HV, C, K]
  float* chunk_decay;       // [E] event layout: Γ_c
  float* statistic;         // [E]
  float* head_score;        // [E]
  float* unit_score;        // [E] (units <= HV)
  uint8_t* unit_mask;       // [E]
  uint8_t* head_mask;       // [E]
  int32_t* budget;          // [S, HV]
  uint64_t* keys;           // [E] selection keys
  int32_t* scratch;         // [E] (random selector's permutation)
  float* snapshots;         // [slots, K, V]
  int32_t* snapshot_chunk;  // [slots]
  int32_t* snapshot_count;  // [S, HV]
  int32_t* group_slot;      // [Nmax, HV]
  float* group_log_decay;   // [Nmax, HV]
  int32_t* progress;        // [S, HV, V tiles] recurrence progress in chunks (tensor-core path)
  int32_t* blocks_done;     // [1] output blocks finished, right after `progress`
  int32_t* records_done;    // [1] mask expansion blocks finished (their group records written), after it
  size_t flags_bytes;       // progress and the two counters, zeroed before each tensor-core recurrence
  // Context parallelism (CpArgs), where the plan runs it
  int32_t* seg_first;    // [S, HV, max_segments + 1]
  int32_t* seg_count;    // [S, HV]
  float* cp_local;       // [S, HV, max_segments, K, V]
  float* cp_transition;  // [S, HV, max_segments, K, K]
  int32_t* cp_sink;      // [V / kTcTile]
  size_t total;
};
// The tensor-core recurrence's progress flags: [sequence][value head][V tile], `tiles` = V / kTcTile flags
// per head (one per 32 columns: a 32-column recurrence block sets one, a 64-column block two); the output
// stage waits on its head's.
__host__ __device__ __forceinline__ int64_t progress_flag_index(int64_t s, int HV, int hv, int64_t tiles,
                                                                int64_t z) {
  return (s * HV + hv) * tiles + z;
}
// Index of event (sequence s, value head h, chunk c) in the per-event arrays.
__device__ __forceinline__ int64_t event_index(const int32_t* chunk_offset, int64_t s, int heads, int64_t h,
                                               int64_t c) {
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  return int64_t(chunk_offset[s]) * heads + h * n + c;
}
// ---------------------------------------------------------------------------------------------------------
// Programmatic dependent launch (sm_90): a kernel launched with `early` (launch_kernel) may start while the
// kernel before it in the stream still runs. It calls wait_for_previous_grid() before it reads anything that
// kernel (or any before it) wrote; let_next_grid_start() lets the kernel after it launch early. Both are
// no-ops in a kernel launched plainly.
__device__ __forceinline__ void wait_for_previous_grid() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void let_next_grid_start() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// The first column that row i of L keeps under the solver's band (blocks of `block` rows, `band` blocks below
// the diagonal; band < 0: every column).
__host__ __device__ __forceinline__ int band_first(int i, int block, int band) {
  return band < 0 ? 0 : max(0, (i / block - band) * block);
}
// Whether the 16 x 16 block (I, M), M < I, of a 64-row L has a nonzero entry: the band's first column of its
// first row is left of its end (the later rows' first columns are not left of it).
__host__ __device__ __forceinline__ bool l_block_kept(int I, int M, int block, int band) {
  return band_first(16 * I, block, band) < 16 * (M + 1);
}
// l_block_kept for every block (I, M), M < I, of a 64-row L as bit 4 I + M (the tensor-core pre-pass reads it
// through l_block_in instead of dividing by the solver's block in its steps).
__host__ __device__ __forceinline__ uint32_t l_block_flag(int I, int M) {
  return 1u << (4 * I + M);
}
inline uint32_t l_block_bits(int block, int band) {
  uint32_t bits = 0;
  for (int I = 1; I < 4; ++I)
    for (int M = 0; M < I; ++M)
      if (l_block_kept(I, M, block, band)) bits |= l_block_flag(I, M);
  return bits;
}
// Whether l_block_bits' `bits` keep block (I, M).
__device__ __forceinline__ bool l_block_in(uint32_t bits, int I, int M) {
  return (bits & l_block_flag(I, M)) != 0;
}

struct PrepareArgs {
  const void* k;
  const void* v;
  const float* g;
  const void* beta;
  const int32_t* chunk_offset;
  const ChunkInfo* chunk_info;
  int H, HV, K, V, C;
  int block, band;  // band < 0: exact
  bool want_statistic;
  float* gamma;
  float* u;
  float* w;
  float* chunk_decay;
  float* statistic;
  int64_t prefetch_ahead = 0;  // tensor-core pre-pass: chunks ahead whose inputs it asks L2 for (0: none)
  uint32_t l_blocks = 0;       // tensor-core pre-pass: l_block_bits(block, band)
};

struct RecurrenceArgs {
  const void* k;
  const float* initial_state;
  const int32_t* seq_start;
  const int32_t* seq_len;
  const int32_t* chunk_offset;
  const uint8_t* mask;  // the head mask, or with mask_heads > 1 the unit mask; an event is kept where it is 1
  const float* chunk_decay;
  const float* gamma;
  const float* u;
  const float* w;
  int H, HV, K, V, C, VT;
  float* snapshots;
  int32_t* snapshot_chunk;
  int32_t* snapshot_count;
  float* final_state;
  // Tensor-core path: per (sequence, value head, V tile) the number of chunks whose starting snapshots (named
  // by the group records of the mask expansion) are in memory, so that the output stage can start before the
  // recurrence ends.
  int32_t* progress;
  int mask_heads = 1;  // value heads per row of `mask` (1: the head mask; HV / units: the unit mask)
};
// The first entry of head hv's row of a.mask, for the head whose events start at ev_base (n chunks): its own
// row of the head mask, or its unit's row of the unit mask. From values every chain keeps anyway, so that no
// further 64-bit index stays live across the event loop (one more, and the dense selector's 2-stage
// recurrence block grew past the registers that leave room for an output block beside it: 83 → 89, and the
// dense forwards at B = 1 were 10-14 % slower).
__device__ __forceinline__ int64_t mask_row(const RecurrenceArgs& a, int64_t ev_base, int hv, int64_t n) {
  return ev_base + int64_t(hv / a.mask_heads - hv) * n;
}

// Context parallelism of the sparse chain (segments.cu, recurrence_tc.cu): per (sequence, value head) the
// selected events cut into segments of `events` (the last may hold fewer; a head with no more than `events`
// is one segment). Phase 1 runs segment 0 from S0 (its snapshots, and its end state: segment 1's start) and,
// for segments 1 .. n − 2, the local end state from zero and the transition M (the chain over M's columns,
// from the identity, without U); the combine turns the local states into starts in place; phase 3 replays
// segments 1 .. n − 1 from their starts, writing the snapshots the sequential chain would.
struct CpArgs {
  int phase = 0;                       // 1 or 3
  int events = 0;                      // L_e
  int max_segments = 0;                // per (sequence, value head)
  const int32_t* seg_first = nullptr;  // [S, HV, max_segments + 1]: each segment's first chunk, then n
  const int32_t* seg_count = nullptr;  // [S, HV]
  float* local = nullptr;       // [S, HV, max_segments, K, V] fp32: segment j's end state (from zero, then
                                // after the combine from its true start: segment j + 1's start)
  float* transition = nullptr;  // [S, HV, max_segments, K, K] fp32: segment j's M
  int32_t* sink = nullptr;      // [kVTiles]: where the progress of segments that are not a head's last goes
};
// The first entry of (sequence s, value head hv, segment j)'s K x K block in CpArgs::local / transition.
__host__ __device__ __forceinline__ int64_t cp_block(int64_t s, int HV, int hv, int max_segments, int64_t j) {
  return ((s * HV + hv) * max_segments + j) * kMaxHeadDim * kMaxHeadDim;  // K = V = 128 (tensor cores)
}

struct OutputArgs {
  const void* q;
  const void* k;
  const GroupInfo* group_info;
  const float* gamma;
  const float* u;
  const float* w;
  const float* snapshots;
  const int32_t* group_slot;
  const float* group_log_decay;
  const int32_t* progress;  // the recurrence's progress (tensor-core path)
  int32_t* blocks_done;     // output blocks finished (tensor-core path)
  int H, HV, K, V, C, G, VT;
  float scale;
  void* o;
  // Where the group records are written beside the recurrence (expand_mask_kernel with records_done): the
  // number of its blocks, each of which counts itself in `records_done` once its records are written.
  const int32_t* records_done = nullptr;
  int32_t records_expected = 0;
};

// ---------------------------------------------------------------------------------------------------------
// Tensor-core path: bf16 operands, fp32 accumulation, mma.sync m16n8k16, K = V = 128, C = 64.
// Shared tiles are bf16, rows padded by 8 elements (16 bytes) so that ldmatrix's 8 row addresses fall in
// different banks. U and W are stored in bf16; the carried state stays fp32 in registers (recurrence) and
// is rounded to bf16 only as an mma operand.
namespace tc {
constexpr int kC = 64, kD = 128;       // chunk, head dim (K = V)
constexpr int kLd = kD + 8;            // row stride of 128-wide bf16 tiles
constexpr int kLdC = kC + 8;           // row stride of 64-wide bf16 tiles
constexpr int kVTiles = kD / kTcTile;  // progress flags per (sequence, value head): one per 32 V columns
constexpr int kWindow = 256;           // chunks of mask / decay staged at a time in the recurrence
constexpr int kPublishEvery = 16;      // chunks between two progress stores of a recurrence block
constexpr int kPrepThreads = 128;      // a pre-pass block: one warpgroup
constexpr int kOutThreads = 256;       // an output block: eight warps
using bf16 = __nv_bfloat16;
// The tensor maps of the pre-pass's and the recurrence's copies (kernel parameters): W and U as [slot
// rows][128] (a slot's 64 rows, box 64 x 64 for W, which the pre-pass stores and the recurrence loads, and
// for U's stores, `u_rows`; box 64 x VT for the recurrence's U), K and V as [token][head][128] (box 64 tokens
// x 64 columns; rows past the end of the tensor arrive as zeros), and the snapshots as [slot x 128 rows][128]
// (box 128 rows x VT, stored from Sb).
struct RecTmaMaps {
  CUtensorMap w, u, k, snap, u_rows, v, q, snap_rows;
};
}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
