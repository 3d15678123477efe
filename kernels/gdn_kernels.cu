// SparseGDN on the GPU (SPEC §3–§7, §12): the kernels and the launcher behind gdn_device.h.
//
// Stages, all but the recurrence parallel over chunks (or groups) and value heads:
//   1. chunk table     one block: cu_seqlens -> per-sequence chunk/group offsets, chunk -> sequence,
//                      group -> sequence
//   2. prepare         per (chunk, value head): γ (cumulative log decay), L with the solver's band, the
//                      banded forward substitution giving U = T(β⊙V) and W = T(β⊙e^γ⊙K), Γ, and the
//                      score statistic ‖(e^{Γ−γ}⊙K)ᵀU‖_F
//   3. scores          per (sequence, value head): update_norm or survival (backward recurrence for p_c);
//                      then unit scores (summed over the head group under `pair`)
//   4. selection       dense / random / stride / topk / head_budget / threshold; ranks by radix selects
//                      (one block per unit for topk and head_budget's floor and cap, one per sequence for
//                      head_budget's shared budget), no sort; then the unit mask is expanded to value
//                      heads, budgets counted and the carried state at every group start recorded as
//                      (snapshot slot, log decay since) (the dense selector: that expansion alone, before
//                      stage 2; the tensor-core path's sparse selectors: the expansion beside stage 5,
//                      which reads the unit mask)
//   5. recurrence      per (sequence, value head, V tile): the carried state visits selected events only;
//                      between events it only decays (a scalar accumulated in the exponent); a snapshot is
//                      written after each event
//   6. outputs         per (group, value head[, V tile]): start from the group's carried state and run the
//                      dense chunk step over the group's chunks (SPEC §6)
// Two paths: fp32 arithmetic on fp32 or bf16 inputs (any supported shape), and, where Problem::
// uses_tensor_cores(), the bf16 tensor-core kernels of namespace `tc` below (prepare, recurrence, outputs;
// the outputs run beside the recurrence).
#include <cuda.h>  // CUtensorMap (the driver's encoder is reached through the runtime)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/gdn_device.h"

namespace sgdn {
namespace cuda {
namespace {

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
  size_t total;
};

size_t align_up(size_t x) {
  return (x + 255) & ~size_t(255);
}

// Bits of a selection key's tie part: enough for t = c * units + u < max_chunks * v_heads (at most 31,
// checked by check_problem). The key is the order-preserving score above them, so a radix select reads 32 +
// tie bits, not 64.
int key_tie_bits(const Problem& p) {
  const int64_t count = p.max_chunks() * p.v_heads;
  int bits = 1;
  while ((int64_t(1) << bits) < count) ++bits;
  return bits;
}

// The tensor-core recurrence's progress flags: [sequence][value head][V tile], `tiles` = V / kTcTile flags
// per head (one per 32 columns: a 32-column recurrence block sets one, a 64-column block two); the output
// stage waits on its head's.
__host__ __device__ __forceinline__ int64_t progress_flag_index(int64_t s, int HV, int hv, int64_t tiles,
                                                                int64_t z) {
  return (s * HV + hv) * tiles + z;
}

Workspace carve(const Problem& p, void* base) {
  Workspace ws{};
  char* ptr = static_cast<char*>(base);
  size_t offset = 0;
  auto take = [&](size_t bytes) -> void* {
    void* out = ptr ? ptr + offset : nullptr;
    offset += align_up(bytes);
    return out;
  };
  const size_t S = size_t(p.num_seqs), nmax = size_t(p.max_chunks()), hv = size_t(p.v_heads);
  const size_t C = size_t(p.chunk), K = size_t(p.key_dim), V = size_t(p.value_dim);
  const size_t events = nmax * hv;
  const size_t slots = (nmax + S) * hv;
  ws.seq_start = static_cast<int32_t*>(take(S * 4));
  ws.seq_len = static_cast<int32_t*>(take(S * 4));
  ws.chunk_offset = static_cast<int32_t*>(take((S + 1) * 4));
  ws.group_offset = static_cast<int32_t*>(take((S + 1) * 4));
  ws.chunk_info = static_cast<ChunkInfo*>(take(nmax * sizeof(ChunkInfo)));
  ws.group_info = static_cast<GroupInfo*>(take(nmax * sizeof(GroupInfo)));
  ws.gamma = static_cast<float*>(take(events * C * 4));
  const size_t uw_elem = p.uses_tensor_cores() ? 2 : 4;  // bf16 U/W on the tensor-core path
  ws.u = static_cast<float*>(take(events * C * V * uw_elem));
  ws.w = static_cast<float*>(take(events * C * K * uw_elem));
  ws.chunk_decay = static_cast<float*>(take(events * 4));
  ws.statistic = static_cast<float*>(take(events * 4));
  ws.head_score = static_cast<float*>(take(events * 4));
  ws.unit_score = static_cast<float*>(take(events * 4));
  ws.unit_mask = static_cast<uint8_t*>(take(events));
  ws.head_mask = static_cast<uint8_t*>(take(events));
  ws.budget = static_cast<int32_t*>(take(S * hv * 4));
  ws.keys = static_cast<uint64_t*>(take(events * 8));
  ws.scratch = static_cast<int32_t*>(take(events * 4));
  ws.snapshots = static_cast<float*>(take(slots * K * V * uw_elem));  // bf16 on the tensor-core path
  ws.snapshot_chunk = static_cast<int32_t*>(take(slots * 4));
  ws.snapshot_count = static_cast<int32_t*>(take(S * hv * 4));
  ws.group_slot = static_cast<int32_t*>(take(events * 4));
  ws.group_log_decay = static_cast<float*>(take(events * 4));
  const size_t progress_flags = size_t(progress_flag_index(int64_t(S), int(hv), 0, int64_t(V / kTcTile), 0));
  ws.flags_bytes = (progress_flags + 2) * 4;
  ws.progress = static_cast<int32_t*>(take(ws.flags_bytes));
  ws.blocks_done = ws.progress ? ws.progress + progress_flags : nullptr;
  ws.records_done = ws.progress ? ws.progress + progress_flags + 1 : nullptr;
  ws.total = offset;
  return ws;
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

// Zeroes `bytes` bytes at `p` (16-byte aligned) with the whole block.
__device__ void zero_bytes(void* p, size_t bytes) {
  uint4* p16 = static_cast<uint4*>(p);
  for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) p16[i] = make_uint4(0, 0, 0, 0);
  for (size_t i = bytes / 16 * 16 + threadIdx.x; i < bytes; i += blockDim.x) static_cast<uint8_t*>(p)[i] = 0;
}

// ---------------------------------------------------------------------------------------------------------
// 1. Chunk table, in one block: the sequences' offsets (block scans), then one record per chunk and per
// output group, then the zeroed flags and unit mask the later stages expect. cu_seqlens (null: one sequence
// of all the tokens) is clamped into [0, total] and made monotone, so that bad offsets cannot send a kernel
// out of bounds (the C ABI cannot read them without a synchronisation): sequence s spans [P_s, P_{s+1}) with
// P_j the running maximum of cu_seqlens[0..j] clamped into [0, total].
constexpr int kTableThreads = 1024;
struct TableArgs {
  const int32_t* cu_seqlens;
  int64_t num_seqs, total, nmax;
  int chunk, group;
  int tail;  // output runs (G = 1): a sequence's last `tail` chunks one per group (group_split)
  int32_t *seq_start, *seq_len, *chunk_offset, *group_offset;
  ChunkInfo* chunks;
  GroupInfo* groups;
  void* zero[2];  // regions zeroed before the later stages run (null: none)
  size_t zero_size[2];
};
struct MaxOp {
  __device__ int32_t operator()(int32_t x, int32_t y) const { return max(x, y); }
};
struct MinOp {
  __device__ int32_t operator()(int32_t x, int32_t y) const { return min(x, y); }
};

// The last s in [0, count) with offset[s] <= i (offset non-decreasing, offset[0] <= i).
__device__ __forceinline__ int32_t owner_of(const int32_t* offset, int32_t count, int32_t i) {
  int32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (offset[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A sequence of n chunks in output groups: groups of G chunks over its first n − L chunks, then its last L =
// min(n, tail) one per group. (Output runs, G = 1: a run takes its chunks one after another, each once the
// chain has passed it, so the run that holds the sequence's last chunk would end after the chain does; a
// chunk alone has its operands ready when its state arrives. L = 1 measured 0.2-0.6 % faster from 16K on;
// more than one, slower in the packed batches, see kOutputTail.)
struct GroupSplit {
  int32_t head, tail_from, groups;  // groups of G, the first chunk taken alone, all groups
};
__device__ __forceinline__ GroupSplit group_split(int32_t n, int group, int tail) {
  const int32_t alone = n < tail ? n : int32_t(tail), head = (n - alone + group - 1) / group;
  return {head, n - alone, head + alone};
}

__global__ void __launch_bounds__(kTableThreads) table_kernel(TableArgs a) {
  let_next_grid_start();  // the next kernel's blocks may be placed (they wait for this one to complete)
  using Scan = cub::BlockScan<int32_t, kTableThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t carry[4];  // P at the tile's start, chunks and groups before it, fewest groups so far
  const int32_t total = int32_t(a.total);
  auto clamp_offset = [&](int64_t j) {
    return a.cu_seqlens ? min(max(a.cu_seqlens[j], 0), total) : (j == 0 ? 0 : total);
  };
  if (threadIdx.x == 0) {
    carry[0] = clamp_offset(0);
    carry[1] = carry[2] = 0;
    carry[3] = INT32_MAX;
  }
  __syncthreads();
  for (int64_t tile = 0; tile < a.num_seqs; tile += kTableThreads) {
    const int64_t s = tile + threadIdx.x;
    const bool real = s < a.num_seqs;
    const int32_t p0 = carry[0], x = real ? clamp_offset(s + 1) : 0;
    int32_t begin = 0, agg = 0;
    Scan(scan).ExclusiveScan(x, begin, p0, MaxOp(), agg);  // P_s = max(P at the tile's start, earlier ends)
    const int32_t end = max(begin, x);
    __syncthreads();
    const int32_t len = real ? end - begin : 0;
    const int32_t n = int32_t((int64_t(len) + a.chunk - 1) / a.chunk);
    const int32_t groups = group_split(n, a.group, a.tail).groups;
    int32_t c_before = 0, g_before = 0, c_all = 0, g_all = 0;
    Scan(scan).ExclusiveSum(n, c_before, c_all);
    __syncthreads();
    Scan(scan).ExclusiveSum(groups, g_before, g_all);
    __syncthreads();
    int32_t unused = 0, g_min = 0;
    Scan(scan).ExclusiveScan(real ? groups : INT32_MAX, unused, INT32_MAX, MinOp(), g_min);
    if (real) {
      a.seq_start[s] = begin;
      a.seq_len[s] = len;
      a.chunk_offset[s] = carry[1] + c_before;
      a.group_offset[s] = carry[2] + g_before;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      carry[0] = max(p0, agg);
      carry[1] += c_all;
      carry[2] += g_all;
      carry[3] = min(carry[3], g_min);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    a.chunk_offset[a.num_seqs] = carry[1];
    a.group_offset[a.num_seqs] = carry[2];
  }
  __syncthreads();  // the offsets above are visible to the whole block
  const int32_t S = int32_t(a.num_seqs), chunks = carry[1], groups = carry[2];
  // The output stage's order (its blocks take the table's entries in turn): the first m groups of every
  // sequence round-robin over the sequences, m the fewest groups of a sequence, then the rest sequence by
  // sequence. The outputs of a packed batch then follow the recurrence, which advances in all sequences at
  // once (in sequence order, the blocks of the later sequences' groups would wait behind the earlier
  // sequences' last ones); with one sequence, or an empty one (m = 0), it is the groups' own order.
  const int32_t m = S > 0 ? carry[3] : 0;
  for (int32_t i = threadIdx.x; i < a.nmax; i += kTableThreads) {
    if (i < chunks) {
      const int32_t s = owner_of(a.chunk_offset, S, i), c = i - a.chunk_offset[s];
      a.chunks[i] = {s, c, a.seq_start[s] + c * a.chunk, min(a.chunk, a.seq_len[s] - c * a.chunk)};
    } else {
      a.chunks[i] = {-1, 0, 0, 0};
    }
    if (i < groups) {
      const int32_t s = owner_of(a.group_offset, S, i), g = i - a.group_offset[s];
      const int32_t place = g < m ? g * S + s : m * S + (a.group_offset[s] - s * m) + (g - m);
      const int32_t n = a.chunk_offset[s + 1] - a.chunk_offset[s];
      const GroupSplit split = group_split(n, a.group, a.tail);
      const int32_t first = g < split.head ? g * a.group : split.tail_from + (g - split.head);
      a.groups[place] = {s,
                         first,
                         n,
                         a.chunk_offset[s],
                         a.seq_start[s],
                         a.seq_len[s],
                         i,
                         g < split.head ? min(a.group, split.tail_from - first) : 1};
    } else {
      a.groups[i] = {-1, 0, 0, 0, 0, 0, 0, 0};
    }
  }
  for (int z = 0; z < 2; ++z)
    if (a.zero[z]) zero_bytes(a.zero[z], a.zero_size[z]);
}

// ---------------------------------------------------------------------------------------------------------
// 2. Pre-pass per (chunk, value head). Shared memory: k [C][K], rhs [C][V+K] (β⊙V | β⊙e^γ⊙K, solved in
// place into U | W), L [C][C], γ [C], β [C].
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

template <class In>
__global__ void __launch_bounds__(kThreads) prepare_kernel(PrepareArgs a) {
  const int64_t id = blockIdx.x;
  const int hv = blockIdx.y;
  const ChunkInfo ci = load_chunk_info(a.chunk_info, id);
  if (ci.s < 0) return;
  const int64_t s = ci.s, c = ci.c, t0 = ci.t0;
  const int len = ci.len;
  const int C = a.C, K = a.K, V = a.V, R = V + K;
  const int h = hv / (a.HV / a.H);

  extern __shared__ float smem[];
  float* ks = smem;         // [C][K]
  float* rhs = ks + C * K;  // [C][R]
  float* lm = rhs + C * R;  // [C][C]
  float* gam = lm + C * C;  // [C]
  float* bet = gam + C;     // [C]
  float* red = bet + C;     // [kThreads / 32]

  const In* kp = static_cast<const In*>(a.k);
  const In* vp = static_cast<const In*>(a.v);
  const In* bp = static_cast<const In*>(a.beta);
  for (int e = threadIdx.x; e < len * K; e += blockDim.x) {
    const int i = e / K, d = e % K;
    ks[e] = to_float(kp[((t0 + i) * a.H + h) * K + d]);
  }
  for (int i = threadIdx.x; i < len; i += blockDim.x) bet[i] = to_float(bp[(t0 + i) * a.HV + hv]);
  if (threadIdx.x == 0) {
    float acc = 0.f;
    for (int i = 0; i < len; ++i) {
      acc += a.g[(t0 + i) * a.HV + hv];
      gam[i] = acc;
    }
  }
  __syncthreads();
  // L = strictly_lower(diag(β) K Kᵀ ⊙ D), blocks farther than `band` below the diagonal dropped.
  for (int e = threadIdx.x; e < len * len; e += blockDim.x) {
    const int i = e / len, j = e % len;
    float value = 0.f;
    if (j < i && j >= band_first(i, a.block, a.band)) {
      float dot = 0.f;
      for (int d = 0; d < K; ++d) dot += ks[i * K + d] * ks[j * K + d];
      value = bet[i] * dot * __expf(gam[i] - gam[j]);
    }
    lm[i * C + j] = value;
  }
  for (int e = threadIdx.x; e < len * R; e += blockDim.x) {
    const int i = e / R, col = e % R;
    rhs[i * R + col] = col < V ? bet[i] * to_float(vp[((t0 + i) * a.HV + hv) * V + col])
                               : bet[i] * __expf(gam[i]) * ks[i * K + (col - V)];
  }
  __syncthreads();
  // Forward substitution (I + L) X = rhs, one right-hand-side column per thread: the columns are
  // independent, so no barrier is needed inside. Row i only reads the rows its band keeps.
  for (int col = threadIdx.x; col < R; col += blockDim.x) {
    for (int i = 1; i < len; ++i) {
      const int first = band_first(i, a.block, a.band);
      float x = rhs[i * R + col];
      for (int j = first; j < i; ++j) x -= lm[i * C + j] * rhs[j * R + col];
      rhs[i * R + col] = x;
    }
  }
  __syncthreads();
  const int64_t slot = id * a.HV + hv;
  float* u_out = a.u + slot * C * V;
  float* w_out = a.w + slot * C * K;
  for (int e = threadIdx.x; e < C * V; e += blockDim.x) {
    const int i = e / V, col = e % V;
    u_out[e] = i < len ? rhs[i * R + col] : 0.f;
  }
  for (int e = threadIdx.x; e < C * K; e += blockDim.x) {
    const int i = e / K, col = e % K;
    w_out[e] = i < len ? rhs[i * R + V + col] : 0.f;
  }
  for (int i = threadIdx.x; i < C; i += blockDim.x) a.gamma[slot * C + i] = i < len ? gam[i] : 0.f;
  const float big_gamma = gam[len - 1];
  if (threadIdx.x == 0) a.chunk_decay[event_index(a.chunk_offset, s, a.HV, hv, c)] = big_gamma;
  if (!a.want_statistic) return;
  // ‖(e^{Γ−γ} ⊙ K)ᵀ U‖_F: scale the keys in place, then one K×V entry per thread at a time.
  __syncthreads();
  for (int e = threadIdx.x; e < len * K; e += blockDim.x) ks[e] *= __expf(big_gamma - gam[e / K]);
  __syncthreads();
  float sum_sq = 0.f;
  for (int e = threadIdx.x; e < K * V; e += blockDim.x) {
    const int d = e / V, col = e % V;
    float m = 0.f;
    for (int i = 0; i < len; ++i) m += ks[i * K + d] * rhs[i * R + col];
    sum_sq += m * m;
  }
  for (int off = 16; off > 0; off >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, off);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = sum_sq;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int i = 0; i < int(blockDim.x / 32); ++i) total += red[i];
    a.statistic[event_index(a.chunk_offset, s, a.HV, hv, c)] = sqrtf(total);
  }
}

// ---------------------------------------------------------------------------------------------------------
// The score of unit u's chunk c (a sequence's [units, n] block at `base`): its per_unit heads' scores summed
// in double, rounded once (the CPU selectors' sum).
__device__ __forceinline__ float unit_score_of(const float* head_score, int64_t base, int64_t n, int per_unit,
                                               int u, int64_t c) {
  double sum = 0.0;
  for (int j = 0; j < per_unit; ++j) sum += double(head_score[base + (int64_t(u) * per_unit + j) * n + c]);
  return float(sum);
}

// ---------------------------------------------------------------------------------------------------------
// 3. Scores per (sequence, value head), then unit scores (where `unit_score` is given: the selectors that
// read them). One block per sequence, one warp per value head (1024 threads):
// `survival`'s backward recurrence p_c = 1 + e^{Γ_{c+1}} p_{c+1} runs as 32 contiguous segments, one per
// lane: each lane composes its segment's affine map in double, the maps are chained across lanes (31
// shuffles), then each lane replays its segment from its true p.
__global__ void __launch_bounds__(1024)
    score_kernel(const int32_t* chunk_offset, int HV, int units, int ratio, ScoreKind kind,
                 bool skip_own_group, int group, const float* statistic, const float* chunk_decay,
                 float* head_score, float* unit_score) {
  wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int hv = threadIdx.x >> 5; hv < HV; hv += warps) {
    const float* stat = statistic + base + hv * n;
    const float* decay = chunk_decay + base + hv * n;
    float* out = head_score + base + hv * n;
    if (kind == ScoreKind::none) {
      for (int64_t c = lane; c < n; c += 32) out[c] = 0.f;
    } else if (kind == ScoreKind::update_norm) {
      if (out != stat)  // else the pre-pass wrote the scores in place
        for (int64_t c = lane; c < n; c += 32) out[c] = stat[c];
    } else {
      const int64_t seg = (n + 31) / 32;
      const int64_t first = min_i64(n, lane * seg), end = min_i64(n, first + seg);
      // p_first = A p_end + B over this lane's chunks [first, end); p_{n-1} = 0.
      double A = 1.0, B = 0.0;
      for (int64_t c = end - 1; c >= first; --c) {
        if (c == n - 1) {
          A = 0.0;
          B = 0.0;
        } else {
          const double d = exp(double(decay[c + 1]));
          A *= d;
          B = 1.0 + d * B;
        }
      }
      double p_end = 0.0;  // p at chunk `end` (the next lane's first chunk)
      for (int l = 31; l >= 1; --l) {
        const double p_first = A * p_end + B;
        const double from_next = __shfl_sync(0xffffffffu, p_first, l);
        if (lane == l - 1) p_end = from_next;
      }
      double p = p_end;
      for (int64_t c = end - 1; c >= first; --c) {
        p = c == n - 1 ? 0.0 : 1.0 + exp(double(decay[c + 1])) * p;
        double persistence = p;
        if (skip_own_group && group > 1) {
          const int64_t group_end = min_i64(n, (c / group + 1) * group);
          double weight = 1.0;
          for (int64_t later = c + 1; later < group_end; ++later) {
            persistence -= weight;
            weight *= exp(double(decay[later]));
          }
        }
        out[c] = float(double(stat[c]) * fmax(0.0, persistence));
      }
    }
  }
  if (!unit_score) return;  // no selector after it reads them (head_budget without floor or cap sums its own)
  __syncthreads();
  const int per_unit = HV / units;  // r under pair, 1 under head
  for (int u = 0; u < units; ++u)
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
      unit_score[base + u * n + c] = unit_score_of(head_score, base, n, per_unit, u, c);
  (void)ratio;
}

// ---------------------------------------------------------------------------------------------------------
// 4. Selection. Unit arrays of sequence s live at base = chunk_offset[s] * HV, laid out [units, N_s].
__device__ __forceinline__ int64_t budget_of(double rho, int64_t n) {
  return llround(rho * double(n));
}

// The order-preserving bits of a score (descending scores: descending bits; −0 as +0).
__device__ __forceinline__ uint32_t score_bits(float score) {
  if (score == 0.f) score = 0.f;  // -0 -> +0
  const uint32_t bits = __float_as_uint(score);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
// The tie rank of event t = c * units + u in `tie_bits` bits: its complement, so that in descending order
// equal scores come in order of the earlier chunk, then the lower unit (the CPU selectors' tie rule).
__device__ __forceinline__ uint64_t tie_rank(int64_t c, int units, int u, int tie_bits) {
  return ((uint64_t(1) << tie_bits) - 1) - uint64_t(c * units + u);
}
// Selection key: the score's bits above its tie rank.
__device__ __forceinline__ uint64_t score_key(float score, int64_t c, int units, int u, int tie_bits) {
  return (uint64_t(score_bits(score)) << tie_bits) | tie_rank(c, units, u, tie_bits);
}

// A radix select's result: the eligible keys at or above `key` are the k largest, unless `exact` is false:
// then `key` is a whole key that more eligible keys equal than the `still` of them that the k largest take.
struct KthKey {
  uint64_t key;
  int64_t still;
  bool exact;
};

// The k-th largest of key_of(e), e in [0, items), among those whose index is `eligible`, for a block of
// 1024 threads (every thread calls it), by a radix select: one pass for the eligible keys' count and the
// leading bits they all share (alike scores share their top bits), then 8 bits at a time below those (a
// histogram of the eligible keys that match the digits found so far, then the digit where the count from the
// top reaches k), instead of a sort. It stops at the digit where every key that matches is taken (key: those
// digits, zeros below). Key 0 (at or below every key) when k reaches the number of eligible keys; k >= 1.
// Every thread gets the result. The keys are read four per thread at a time (keys in global memory: one round
// trip per four). One 256-word histogram with plain shared-memory atomics: a copy per lane (so that the lanes
// of a warp whose keys share a digit add to different words) measured no faster once the shared leading bits
// are skipped (v44, 128K under ncu: 48.6 against 46.1-46.3 µs), and warp-aggregated adds (match_any) slower
// (64.5).
template <class KeyOf, class Eligible>
__device__ KthKey kth_largest_key(KeyOf key_of, int64_t items, int64_t k, Eligible eligible) {
  using BlockScan = cub::BlockScan<int, 1024>;
  using BlockReduce = cub::BlockReduce<uint64_t, 1024>;
  __shared__ union {
    typename BlockScan::TempStorage scan;
    typename BlockReduce::TempStorage reduce;
  } temp;
  __shared__ int hist[256];
  __shared__ uint64_t prefix;
  __shared__ int hi;            // the bits from `hi` up are found
  __shared__ int64_t still;     // how many of the largest keys below `prefix`'s digits are still to pass
  __shared__ int64_t matching;  // how many eligible keys have `prefix`'s digits
  __shared__ bool every;        // k reaches the number of eligible keys
  __shared__ bool done;         // every key with `prefix`'s digits passes
  constexpr int kBatch = 4;
  // Each pass visits the keys four per thread at a time.
  auto for_each_key = [&](auto visit) {
    for (int64_t e0 = threadIdx.x; e0 < items; e0 += kBatch * blockDim.x) {
      uint64_t key[kBatch];
      bool counted[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t e = e0 + j * int64_t(blockDim.x);
        counted[j] = e < items && eligible(e);
        key[j] = counted[j] ? key_of(e) : 0;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) visit(counted[j], key[j]);
    }
  };
  uint64_t all_and = ~uint64_t(0), any_or = 0, count = 0;
  for_each_key([&](bool counted, uint64_t key) {
    if (counted) {
      all_and &= key;
      any_or |= key;
      ++count;
    }
  });
  __syncthreads();  // a previous call's results are read
  all_and = BlockReduce(temp.reduce).Reduce(all_and, [](uint64_t a, uint64_t b) { return a & b; });
  __syncthreads();
  any_or = BlockReduce(temp.reduce).Reduce(any_or, [](uint64_t a, uint64_t b) { return a | b; });
  __syncthreads();
  count = BlockReduce(temp.reduce).Sum(count);
  if (threadIdx.x == 0) {
    const uint64_t differ = all_and ^ any_or;  // the bits where eligible keys differ
    hi = differ ? 64 - __clzll(differ) : 0;
    prefix = hi >= 64 ? 0 : all_and >> hi << hi;
    still = k;
    matching = int64_t(count);
    every = k >= int64_t(count);
    done = every || hi == 0;
  }
  __syncthreads();
  auto above = [](uint64_t key, int bits) { return bits >= 64 ? uint64_t(0) : key >> bits; };
  for (int top = hi; top > 0 && !done; top -= 8) {
    const int shift = top > 8 ? top - 8 : 0;
    if (threadIdx.x < 256) hist[threadIdx.x] = 0;
    __syncthreads();
    const uint64_t high = above(prefix, top);  // the digits found so far
    for_each_key([&](bool counted, uint64_t key) {
      // (bits of the digit above `top` are high's)
      if (counted && above(key, top) == high) atomicAdd(&hist[unsigned(key >> shift) & 255u], 1);
    });
    __syncthreads();
    // Thread t holds the count of digit 255 - t; the inclusive sum is the count of keys with that digit or a
    // larger one. The selected digit is where it first reaches `still`.
    const int own = threadIdx.x < 256 ? hist[255 - threadIdx.x] : 0;
    int upto = 0;
    BlockScan(temp.scan).InclusiveSum(own, upto);
    const int64_t need = still;
    __syncthreads();  // every thread has read `still`
    if (threadIdx.x < 256 && upto >= need && upto - own < need) {
      prefix |= uint64_t(255 - threadIdx.x) << shift;
      still = need - (upto - own);
      matching = own;
      done = still == own;
    }
    __syncthreads();
  }
  return {every ? 0 : prefix, still, every || still == matching};
}

// A rank bound within a unit's N events: a fixed count if count >= 0, else round(fraction N); at most N.
struct RankBound {
  double fraction;
  int64_t count;
  __device__ int64_t of(int64_t n) const { return min_i64(n, count >= 0 ? count : budget_of(fraction, n)); }
};

// topk, and head_budget's floor and cap, one block of 1024 threads per (sequence, unit): the unit's keys
// (from the score kernel's unit scores), then its events of rank < `keep` marked 1 (topk; the floor) and
// those of rank >= `cap` not kept marked 2 (the cap: head_budget's select passes over them, and they count
// as not kept after it; a floor above the cap, refused on the C++ path where N is known, keeps the floor).
// Ranks by two radix selects of the unit's keys (until v37 a segmented sort per unit, then a kernel per
// bound).
__global__ void __launch_bounds__(1024)
    mark_unit_ranks_kernel(const int32_t* chunk_offset, int HV, int units, int tie_bits, RankBound keep,
                           RankBound cap, const float* unit_score, uint64_t* keys, uint8_t* unit_mask) {
  wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int u = blockIdx.y;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t first = int64_t(chunk_offset[s]) * HV + int64_t(u) * n;
  uint64_t* unit_keys = keys + first;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    unit_keys[c] = score_key(unit_score[first + c], c, units, u, tie_bits);
  __syncthreads();
  const int64_t kept = keep.of(n), allowed = cap.of(n);
  auto any = [](int64_t) { return true; };
  auto key_of = [&](int64_t c) { return unit_keys[c]; };
  const uint64_t keep_from = kept > 0 ? kth_largest_key(key_of, n, kept, any).key : 0;
  const uint64_t cap_from = allowed > 0 && allowed < n ? kth_largest_key(key_of, n, allowed, any).key : 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const uint64_t key = unit_keys[c];
    if (kept > 0 && key >= keep_from)
      unit_mask[first + c] = 1;
    else if (allowed < n && (allowed == 0 || key < cap_from))
      unit_mask[first + c] = 2;
  }
}

// head_budget, one block of 1024 threads per sequence: the budget B = round(rho N units) goes to the B
// largest keys (score above the event's tie rank, so ties go to the earlier chunk as on the CPU). The units'
// scores are read once into `bits` (their order-preserving bits; in shared memory where the launch gave it
// room, 4 bytes an event, else in `scratch`) and radix-selected there: first on the 32 score bits, then,
// only where more events share the B-th score than the budget takes, on the tie ranks of those events
// (until v44 every pass read 48-bit keys from global memory, one round trip per key and pass: ~0.1 ms at
// 128K). Without floor or cap (Marked = false) the unit scores are summed here from the heads' (no score
// kernel before it for update_norm, whose head scores the pre-pass writes: one kernel fewer on the
// selection's critical path, v36). With them (Marked) they are the score kernel's, and mark_unit_ranks_kernel
// has marked the floor (1) and the cap (2): the B − units min(floor, N) largest of the unmarked events are
// kept, the rest stay as they are (the CPU's walk over the events in score order, taking those not yet
// marked until the budget is spent).
// Room for the scores' bits beside the select's static shared memory (~9 KB): 53 248 events a sequence
// (3 328 chunks of 16 units: T = 212 992 with the default's pairs of heads), else they stay in global memory.
constexpr size_t kSelectSharedBytes = 208 * 1024;
template <bool Marked>
__global__ void __launch_bounds__(1024)
    select_budget_kernel(const int32_t* chunk_offset, int HV, int units, int tie_bits, double rho,
                         int64_t floor_each, const float* head_score, const float* unit_score, bool in_shared,
                         uint32_t* scratch, uint8_t* unit_mask) {
  extern __shared__ uint32_t shared_bits[];  // the scores' bits where `in_shared`
  wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t items = n * units,
                budget = budget_of(rho, items) - (Marked ? min_i64(floor_each, n) * units : 0);
  if (budget <= 0) return;
  uint32_t* bits = in_shared ? shared_bits : scratch + base;
  uint8_t* mask = unit_mask + base;
  // Event e = u n + c of the [units, n] block; 32-bit indices (check_problem: n units < 2^31). The fill sums
  // a unit's head scores as unit_score_of does, eight events per thread at a time, each head's score of them
  // together (one round trip per head and eight events, where a loop per event waited on each load until
  // v44). An event that the floor or the cap marked gets the bits 0, below every score's (no score is NaN),
  // so that the select passes over it without reading the marks again.
  const int32_t n32 = int32_t(n), items32 = int32_t(items), per_unit = HV / units;
  constexpr int kFill = 8;
  for (int32_t e0 = threadIdx.x; e0 < items32; e0 += kFill * int32_t(blockDim.x)) {
    double sum[kFill] = {};
    int32_t at[kFill];  // (u per_unit) n + c: the event's first head's score
    bool open[kFill];   // in range and not marked
#pragma unroll
    for (int j = 0; j < kFill; ++j) {
      const int32_t e = e0 + j * int32_t(blockDim.x), u = e / n32;
      at[j] = (u * per_unit) * n32 + (e - u * n32);
      open[j] = e < items32 && (!Marked || mask[e] == 0);
    }
    for (int h = 0; h < (Marked ? 1 : per_unit); ++h) {
      float x[kFill];
#pragma unroll
      for (int j = 0; j < kFill; ++j)
        x[j] = !open[j] ? 0.f
               : Marked ? unit_score[base + e0 + j * int32_t(blockDim.x)]
                        : head_score[base + at[j] + h * n32];
#pragma unroll
      for (int j = 0; j < kFill; ++j) sum[j] += double(x[j]);
    }
#pragma unroll
    for (int j = 0; j < kFill; ++j)
      if (const int32_t e = e0 + j * int32_t(blockDim.x); e < items32)
        bits[e] = open[j] ? score_bits(float(sum[j])) : 0u;
  }
  __syncthreads();
  auto any = [](int64_t) { return true; };
  const KthKey top = kth_largest_key([&](int64_t e) { return uint64_t(bits[e]); }, items, budget, any);
  const uint32_t at = uint32_t(top.key);
  auto rank = [&](int64_t e) {
    const int32_t u = int32_t(e) / n32;
    return tie_rank(e - int64_t(u) * n, units, u, tie_bits);
  };
  // Where the B-th score is shared by more events than the budget takes: the earliest of them.
  const uint64_t rank_from =
      top.exact || at == 0
          ? 0
          : kth_largest_key(rank, items, top.still, [&](int64_t e) { return bits[e] == at; }).key;
  for (int64_t e = threadIdx.x; e < items; e += blockDim.x) {
    const uint32_t b = bits[e];
    if (b != 0 && (b > at || (b == at && (top.exact || rank(e) >= rank_from)))) mask[e] = 1;
  }
}

// `stride`: chunk ⌊(2i+1)N/(2k)⌋ of each unit, i < k = round(ρN).
__global__ void mark_stride_kernel(const int32_t* chunk_offset, int HV, int units, double rho,
                                   uint8_t* unit_mask) {
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t keep = min_i64(n, budget_of(rho, n));
  for (int64_t e = threadIdx.x; e < keep * units; e += blockDim.x) {
    const int64_t u = e / keep, i = e % keep;
    unit_mask[base + u * n + ((2 * i + 1) * n) / (2 * keep)] = 1;
  }
}

// `random`: the CPU selector's generator (splitmix64, rejection sampling, partial Fisher–Yates) so that a
// seed picks the same chunks on both backends. One thread per (sequence, unit).
__device__ uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % bound);
  uint64_t x;
  do x = splitmix64(state);
  while (x >= limit);
  return x % bound;
}
__global__ void mark_random_kernel(const int32_t* chunk_offset, int64_t num_seqs, int HV, int units,
                                   double rho, uint64_t seed, int32_t* scratch, uint8_t* unit_mask) {
  const int64_t task = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (task >= num_seqs * units) return;
  const int64_t s = task / units;
  const int u = int(task % units);
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV + u * n;
  const int64_t keep = min_i64(n, budget_of(rho, n));
  uint64_t state = seed * 0x100000001B3ull ^ (uint64_t(s) << 32) ^ uint64_t(u);
  int32_t* chunks = scratch + base;
  for (int64_t c = 0; c < n; ++c) chunks[c] = int32_t(c);
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t j = i + int64_t(uniform_below(state, uint64_t(n - i)));
    const int32_t tmp = chunks[i];
    chunks[i] = chunks[j];
    chunks[j] = tmp;
    unit_mask[base + chunks[i]] = 1;
  }
}

// `threshold`: keep unit scores >= tau x the sequence's mean unit score (mean in double, as the CPU).
__global__ void mark_threshold_kernel(const int32_t* chunk_offset, int HV, int units, double tau,
                                      const float* unit_score, uint8_t* unit_mask) {
  using BlockReduce = cub::BlockReduce<double, 1024>;
  __shared__ typename BlockReduce::TempStorage storage;
  __shared__ double mean;
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t count = n * units;
  double part = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) part += double(unit_score[base + e]);
  const double total = BlockReduce(storage).Sum(part);
  if (threadIdx.x == 0) mean = count > 0 ? total / double(count) : 0.0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x)
    unit_mask[base + e] = double(unit_score[base + e]) >= tau * mean ? 1 : 0;
}

// What a group's outputs start from: the events before its first chunk (the snapshot slot, slot 0 being the
// initial state) and the log decay of the skipped chunks since the last of them (the snapshot's factor).
// Scanned over a head's chunks left to right: an event resets the decay.
struct GroupStart {
  int32_t events;
  float log_decay;
  bool event;  // the span holds an event (the decay before it no longer counts)
};
struct GroupStartScan {
  __device__ GroupStart operator()(const GroupStart& a, const GroupStart& b) const {
    return {a.events + b.events, b.event ? b.log_decay : a.log_decay + b.log_decay, a.event || b.event};
  }
};

// Unit mask -> value-head mask, one block per (sequence, value head), the budget each unit received (counted
// by the block of the unit's first head), and the head's group records (group_slot, group_log_decay: the
// output stage reads them at its blocks' start, before the recurrence has reached them). With no unit mask
// (the dense selector) every event is kept (no decay is read: it is launched before the pre-pass), and
// `zero_score`, where given, receives the head's scores (all zero: a dense run without a score computes
// none), so that a dense run needs no other selection kernel.
// With `records_done` (the tensor-core path's sparse selectors) it runs beside the recurrence, which reads
// the unit mask itself and is launched before it: it does not wait for the recurrence (the selection that
// wrote the unit mask completed before the recurrence's blocks let it start; read through L2), each block
// counts itself there once its records are written (the output blocks wait for all of them), and the last
// block waits for the recurrence grid, so that this grid completes after it (see finish_output_block).
struct ExpandMaskArgs {
  const int32_t* chunk_offset;
  const int32_t* group_offset;
  int HV, units, G;
  const uint8_t* unit_mask;
  const float* chunk_decay;
  uint8_t* head_mask;
  int32_t* budget;
  float* zero_score;
  int32_t* group_slot;
  float* group_log_decay;
  int32_t* records_done = nullptr;
};
// 128 threads: beside the recurrence, a block has to fit on a multiprocessor that two 2-stage 32-column
// chain blocks hold (2 x 288 threads at 88 registers leave 14 848 registers; 256 threads at 74-80 did not
// fit there, so at 2 x 16K the 64 blocks waited for the few multiprocessors with one chain block, and the
// output grid, placed only once every block of this one has started, began ~38 µs after the selection).
constexpr int kExpandThreads = 128;
__global__ void __launch_bounds__(kExpandThreads) expand_mask_kernel(ExpandMaskArgs a) {
  const bool beside = a.records_done != nullptr;
  if (!beside) wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int hv = blockIdx.y;
  const int64_t n = __ldcg(a.chunk_offset + s + 1) - __ldcg(a.chunk_offset + s);  // (through L2: see above)
  const int64_t base = int64_t(__ldcg(a.chunk_offset + s)) * a.HV;
  const int per_unit = a.HV / a.units, u = hv / per_unit;
  const uint8_t* from = a.unit_mask ? a.unit_mask + base + u * n : nullptr;
  uint8_t* to = a.head_mask + base + hv * n;
  const int64_t group0 = __ldcg(a.group_offset + s);
  using BlockScan = cub::BlockScan<GroupStart, kExpandThreads>;
  using BlockReduce = cub::BlockReduce<int, kExpandThreads>;
  __shared__ union {
    typename BlockScan::TempStorage scan;
    typename BlockReduce::TempStorage reduce;
  } temp;
  // Tiles of kExpandThreads x kSpan chunks, thread t's kSpan consecutive ones read at once (one round trip a
  // tile: one tile up to 64K, two at 128K; at 256 threads a tile of one chunk a thread had taken eight round
  // trips and eight block scans at 128K).
  constexpr int kSpan = 8;
  const float* decay = a.chunk_decay + base + hv * n;
  GroupStart before{0, 0.f, false};  // the chunks of the tiles done
  int kept = 0;
  for (int64_t c0 = 0; c0 < n; c0 += int64_t(kExpandThreads) * kSpan) {
    const int64_t first = c0 + int64_t(threadIdx.x) * kSpan;
    GroupStart chunk[kSpan];
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      const int64_t c = first + j;
      const bool keep = c < n && (!from || __ldcg(from + c) == 1);  // 2: blocked by a cap
      chunk[j] = {keep, keep || c >= n ? 0.f : __ldcg(decay + c), keep};
      kept += keep;
    }
    GroupStart mine{0, 0.f, false};
#pragma unroll
    for (int j = 0; j < kSpan; ++j) mine = GroupStartScan()(mine, chunk[j]);
    GroupStart prefix, total;
    BlockScan(temp.scan).ExclusiveScan(mine, prefix, GroupStart{0, 0.f, false}, GroupStartScan(), total);
    prefix = GroupStartScan()(before, prefix);
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      const int64_t c = first + j;
      if (c >= n) break;
      to[c] = chunk[j].event;
      if (a.zero_score) a.zero_score[base + hv * n + c] = 0.f;
      if (c % a.G == 0) {
        const int64_t gid = group0 + c / a.G;
        a.group_slot[gid * a.HV + hv] = prefix.events;
        a.group_log_decay[gid * a.HV + hv] = prefix.log_decay;
      }
      prefix = GroupStartScan()(prefix, chunk[j]);
    }
    before = GroupStartScan()(before, total);
    __syncthreads();  // the scan's storage is free again
  }
  if (hv % per_unit == 0) {
    const int total = BlockReduce(temp.reduce).Sum(kept);
    if (threadIdx.x == 0) a.budget[s * a.units + u] = total;
  }
  if (!beside) return;
  __syncthreads();  // every record of the block written
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(a.records_done, 1) == int32_t(gridDim.x * gridDim.y) - 1) wait_for_previous_grid();
  }
}

// ---------------------------------------------------------------------------------------------------------
// 5. The sparse recurrence per (sequence, value head, V tile). Shared: state [K][VT], v̂ [C][VT],
// e^{Γ−γ}⊙K [C][K]. Only selected chunks do matrix work; the others add Γ to the pending log decay.
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

template <class In>
__global__ void __launch_bounds__(kThreads) recurrence_kernel(RecurrenceArgs a) {
  const int64_t s = blockIdx.x;
  const int hv = blockIdx.y;
  const int col0 = blockIdx.z * a.VT;
  const int K = a.K, V = a.V, C = a.C, VT = a.VT;
  const int h = hv / (a.HV / a.H);
  const int64_t n = a.chunk_offset[s + 1] - a.chunk_offset[s];
  const int64_t slot_base = snapshot_slot_base(a.chunk_offset[s], s, a.HV, hv, n);
  const int64_t ev_base = int64_t(a.chunk_offset[s]) * a.HV + int64_t(hv) * n;

  extern __shared__ float smem[];
  float* state = smem;           // [K][VT]
  float* vnew = state + K * VT;  // [C][VT]
  float* kend = vnew + C * VT;   // [C][K]

  for (int e = threadIdx.x; e < K * VT; e += blockDim.x) {
    const int d = e / VT, col = e % VT;
    state[e] = a.initial_state ? a.initial_state[((s * a.HV + hv) * K + d) * V + col0 + col] : 0.f;
  }
  __syncthreads();
  auto write_snapshot = [&](int64_t slot, int32_t chunk) {
    float* dst = a.snapshots + (slot_base + slot) * K * V;
    for (int e = threadIdx.x; e < K * VT; e += blockDim.x) dst[(e / VT) * V + col0 + (e % VT)] = state[e];
    if (blockIdx.z == 0 && threadIdx.x == 0) a.snapshot_chunk[slot_base + slot] = chunk;
  };
  write_snapshot(0, -1);
  int64_t slot = 0;
  float pending = 0.f;  // log decay accumulated since the last snapshot
  const In* kp = static_cast<const In*>(a.k);
  for (int64_t c = 0; c < n; ++c) {
    const float big_gamma = a.chunk_decay[ev_base + c];
    if (a.mask[mask_row(a, ev_base, hv, n) + c] != 1) {
      pending += big_gamma;
      continue;
    }
    const int64_t id = a.chunk_offset[s] + c;
    const int64_t t0 = a.seq_start[s] + c * C;
    const int len = int(min_i64(C, a.seq_len[s] - c * C));
    const int64_t cslot = id * a.HV + hv;
    const float* gam = a.gamma + cslot * C;
    const float* u = a.u + cslot * C * V;
    const float* w = a.w + cslot * C * K;
    const float carried = __expf(pending);
    pending = 0.f;
    for (int e = threadIdx.x; e < K * VT; e += blockDim.x) state[e] *= carried;
    for (int e = threadIdx.x; e < C * K; e += blockDim.x) {
      const int i = e / K, d = e % K;
      // Rows past a short last chunk hold U = W = 0 and get a zero key, so they contribute nothing.
      kend[e] = i < len ? to_float(kp[((t0 + i) * a.H + h) * K + d]) * __expf(big_gamma - gam[i]) : 0.f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < C * VT; e += blockDim.x) {
      const int i = e / VT, col = e % VT;
      float x = u[i * V + col0 + col];
      for (int d = 0; d < K; ++d) x -= w[i * K + d] * state[d * VT + col];
      vnew[e] = x;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < K * VT; e += blockDim.x) {
      const int d = e / VT, col = e % VT;
      float x = __expf(big_gamma) * state[e];
      for (int i = 0; i < C; ++i) x += kend[i * K + d] * vnew[i * VT + col];
      state[e] = x;
    }
    __syncthreads();
    ++slot;
    write_snapshot(slot, int32_t(c));
  }
  if (a.final_state) {
    const float carried = __expf(pending);
    for (int e = threadIdx.x; e < K * VT; e += blockDim.x)
      a.final_state[((s * a.HV + hv) * K + e / VT) * V + col0 + e % VT] = state[e] * carried;
  }
  if (blockIdx.z == 0 && threadIdx.x == 0) a.snapshot_count[s * a.HV + hv] = int32_t(slot + 1);
}

// ---------------------------------------------------------------------------------------------------------
// 6. Outputs per (group, value head, V tile). Shared: S_loc [K][VT], q [C][K], k [C][K], v [C][VT],
// A = QKᵀ⊙D⊙lower_incl [C][C], γ [C].
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

template <class In, class Out>
__global__ void __launch_bounds__(kThreads) output_kernel(OutputArgs a) {
  const int hv = blockIdx.y;
  const int col0 = blockIdx.z * a.VT;
  const GroupInfo gi = load_group_info(a.group_info, blockIdx.x);  // in the table's (output) order
  if (gi.s < 0) return;
  const int64_t gid = gi.id;
  const int K = a.K, V = a.V, C = a.C, VT = a.VT;
  const int h = hv / (a.HV / a.H);
  const int64_t s = gi.s, n = gi.n, first = gi.first;
  const int64_t last = first + gi.count;
  const int64_t slot_base = snapshot_slot_base(gi.chunk0, s, a.HV, hv, n);

  extern __shared__ float smem[];
  float* state = smem;         // [K][VT]
  float* qs = state + K * VT;  // [C][K]
  float* ks = qs + C * K;      // [C][K]
  float* vs = ks + C * K;      // [C][VT]
  float* am = vs + C * VT;     // [C][C]
  float* gam = am + C * C;     // [C]

  {
    const int32_t slot = a.group_slot[gid * a.HV + hv];
    const float carried = __expf(a.group_log_decay[gid * a.HV + hv]);
    const float* src = a.snapshots + (slot_base + slot) * K * V;
    for (int e = threadIdx.x; e < K * VT; e += blockDim.x)
      state[e] = src[(e / VT) * V + col0 + e % VT] * carried;
  }
  const In* qp = static_cast<const In*>(a.q);
  const In* kp = static_cast<const In*>(a.k);
  Out* op = static_cast<Out*>(a.o);
  for (int64_t c = first; c < last; ++c) {
    const auto [t0, len, cslot] = chunk_place(gi, c, C, a.HV, hv);
    const float* u = a.u + cslot * C * V;
    const float* w = a.w + cslot * C * K;
    for (int e = threadIdx.x; e < C * K; e += blockDim.x) {
      const int i = e / K, d = e % K;
      qs[e] = i < len ? to_float(qp[((t0 + i) * a.H + h) * K + d]) : 0.f;
      ks[e] = i < len ? to_float(kp[((t0 + i) * a.H + h) * K + d]) : 0.f;
    }
    for (int i = threadIdx.x; i < C; i += blockDim.x) gam[i] = a.gamma[cslot * C + i];
    __syncthreads();
    for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
      const int i = e / C, j = e % C;
      float value = 0.f;
      if (j <= i && i < len) {
        float dot = 0.f;
        for (int d = 0; d < K; ++d) dot += qs[i * K + d] * ks[j * K + d];
        value = dot * __expf(gam[i] - gam[j]);
      }
      am[e] = value;
    }
    for (int e = threadIdx.x; e < C * VT; e += blockDim.x) {
      const int i = e / VT, col = e % VT;
      float x = u[i * V + col0 + col];
      for (int d = 0; d < K; ++d) x -= w[i * K + d] * state[d * VT + col];
      vs[e] = i < len ? x : 0.f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < len * VT; e += blockDim.x) {
      const int i = e / VT, col = e % VT;
      float inter = 0.f, intra = 0.f;
      for (int d = 0; d < K; ++d) inter += qs[i * K + d] * state[d * VT + col];
      for (int j = 0; j <= i; ++j) intra += am[i * C + j] * vs[j * VT + col];
      const float value = a.scale * (__expf(gam[i]) * inter + intra);
      op[((t0 + i) * a.HV + hv) * V + col0 + col] = from_float<Out>(value);
    }
    __syncthreads();
    if (c + 1 < last) {
      const float big_gamma = gam[len - 1];
      for (int e = threadIdx.x; e < K * VT; e += blockDim.x) {
        const int d = e / VT, col = e % VT;
        float x = __expf(big_gamma) * state[e];
        for (int i = 0; i < len; ++i) x += ks[i * K + d] * __expf(big_gamma - gam[i]) * vs[i * VT + col];
        state[e] = x;
      }
      __syncthreads();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Tensor-core path (issue 5): bf16 operands, fp32 accumulation, mma.sync m16n8k16, K = V = 128, C = 64.
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

// Progress flags between the recurrence and the output stage, which runs beside it (programmatic dependent
// launch). The publisher calls publish() after a barrier that follows every store it covers; the waiter's
// threads 0-3 acquire a head's four flags, then a barrier hands the data to the block.
__device__ __forceinline__ void publish_progress(int32_t* flag, int32_t value) {
  __threadfence();
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}
__device__ __forceinline__ int32_t acquire_progress(const int32_t* flag) {
  int32_t value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// A value the compiler must keep in a register: it cannot recompute what it cannot see (thread-constant
// offsets used at every event of a loop would otherwise be rebuilt from the thread index each time).
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// This lane's element offset for a fragment's ldmatrix (a thread constant plus the tile position): the A
// fragment (16 x 16) at (m0, k0) of a [m][k] tile whose element (r, c) is at at(r, c) ...
template <class At>
__device__ __forceinline__ int a_lane_at(At at, int m0, int k0) {
  const int lane = threadIdx.x & 31;
  return at(m0 + (lane & 15), k0 + (lane >> 4) * 8);
}
// ... of a tile stored transposed, [k][m] ...
template <class At>
__device__ __forceinline__ int a_t_lane_at(At at, int m0, int k0) {
  const int lane = threadIdx.x & 31;
  return at(k0 + (lane & 7) + (lane >> 4) * 8, m0 + ((lane >> 3) & 1) * 8);
}
// ... and the B fragments of two n-tiles (k0..k0+15, n0..n0+15) of a [k][n] tile with row stride ld.
__device__ __forceinline__ int b_kn_lane(int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  return (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8;
}
// A fragment (16 x 16) at (m0, k0) of a [m][k] tile whose element (r, c) is at base + at(r, c).
template <class At>
__device__ __forceinline__ void load_a_at(uint32_t a[4], const bf16* base, At at, int m0, int k0) {
  ldsm_x4(a, base + a_lane_at(at, m0, k0));
}
// A fragment (16 x 16) at (m0, k0) of a tile stored transposed, [k][m], element (r, c) at base + at(r, c).
template <class At>
__device__ __forceinline__ void load_a_t_at(uint32_t a[4], const bf16* base, At at, int m0, int k0) {
  ldsm_x4_t(a, base + a_t_lane_at(at, m0, k0));
}
// The same from row-major tiles with row stride ld.
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16* base, int ld, int m0, int k0) {
  load_a_at(
      a, base, [ld](int r, int c) { return r * ld + c; }, m0, k0);
}
__device__ __forceinline__ void load_a_t(uint32_t a[4], const bf16* base, int ld, int m0, int k0) {
  load_a_t_at(
      a, base, [ld](int r, int c) { return r * ld + c; }, m0, k0);
}
// B fragments of two n-tiles (k0..k0+15, n0..n0+15) of a [k][n] tile: b[0..1] tile n0, b[2..3] tile n0+8.
// (b_kn_lane's offset, added to the pointer in steps: as one integer offset the output stage compiles to
// other code, not yet measured on the device.)
__device__ __forceinline__ void load_b_kn(uint32_t b[4], const bf16* base, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4_t(b, base + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}
// The same from a tile stored [n][k] (e.g. K for Q Kᵀ).
__device__ __forceinline__ void load_b_nk(uint32_t b[4], const bf16* base, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4(b, base + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// e^x for the tensor-core kernels' decays: the hardware's 2^x of x log2 e, as __expf, without __expf's three
// instructions that keep results below 2^-126 (those flush to zero); e^-inf = 0, so that a masked entry's
// decay is zero without a branch around it.
__device__ __forceinline__ float exp_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16(uint32_t x) {
  __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&x);
  return __bfloat1622float2(v);
}
// One warp's m16 x (16 NP) tile: acc[2 NP][4] += A (16 rows from m0, k in [0, K)) B (k, 16 NP columns from
// n0). A is stored [m][k] (AT = false) or [k][m]; B is stored [k][n] (BT = false) or [n][k].
template <int NP, int K, bool AT, bool BT>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[2 * NP][4], const bf16* a, int lda, int m0,
                                              const bf16* b, int ldb, int n0) {
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t af[4];
    if constexpr (AT)
      load_a_t(af, a, lda, m0, k0);
    else
      load_a(af, a, lda, m0, k0);
    for (int np = 0; np < NP; ++np) {
      uint32_t bf[4];
      if constexpr (BT)
        load_b_nk(bf, b, ldb, k0, n0 + np * 16);
      else
        load_b_kn(bf, b, ldb, k0, n0 + np * 16);
      mma(acc[2 * np], af, bf[0], bf[1]);
      mma(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}
// One warp's m16 x (8 NT) accumulator tile, rounded to bf16, into a row-major tile (row stride ld) at (m0,
// n0); the _at form takes this thread's first element, dst + (m0 + gq) ld + n0 + 2 tq.
template <int NT>
__device__ __forceinline__ void store_tile_bf16_at(bf16* at, int ld, const float (&acc)[NT][4]) {
  for (int nt = 0; nt < NT; ++nt) {
    *reinterpret_cast<uint32_t*>(at + nt * 8) = pack_bf16(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<uint32_t*>(at + 8 * ld + nt * 8) = pack_bf16(acc[nt][2], acc[nt][3]);
  }
}
template <int NT>
__device__ __forceinline__ void store_tile_bf16(bf16* dst, int ld, int m0, int n0,
                                                const float (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  store_tile_bf16_at(dst + (m0 + gq) * ld + n0 + tq * 2, ld, acc);
}

// 16-byte asynchronous copy; src_bytes = 0 writes zeros (rows past a sequence's end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// Waits for all committed copy groups but the newest `Pending`.
template <int Pending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
// The same for a count known at run time, at most Max (1 or 2): Max, ..., 1, or 0 or less (all of them).
template <int Max = 1>
__device__ __forceinline__ void cp_async_wait_but(int pending) {
  static_assert(Max == 1 || Max == 2, "one or two groups pending");
  if (Max == 2 && pending >= 2)
    cp_async_wait_group<2>();
  else if (pending >= 1)
    cp_async_wait_group<1>();
  else
    cp_async_wait_all();
}

// rows x 128 bf16 from global rows (row stride `gstride` elements) into a tile whose element (r, c) is at
// dst + at(r, c); rows >= len become zeros. `Threads` threads take part (the block's, or those of rank 0 ..
// Threads − 1 by `rank`, e.g. one warpgroup's), 16
// consecutive threads per row, `rows` a multiple of Threads / 16. With the thread count known at compile
// time each thread's column and row step are constants, and the passes unroll into back-to-back copies
// (Unrolled) or stay a loop that issues one copy per turn (for blocks that run beside a dense recurrence,
// see output_tc_block).
template <int Threads, bool Unrolled, class At>
__device__ __forceinline__ void copy_rows_at(bf16* dst, At at, const bf16* src, int64_t gstride, int len,
                                             int rows = kC, int rank = int(threadIdx.x)) {
  constexpr int kPieces = kD / 8, kRowStep = Threads / kPieces;  // 16-byte pieces per row; rows per pass
  static_assert(Threads % kPieces == 0, "whole rows per pass");
  const int r0 = rank / kPieces, col = (rank % kPieces) * 8;
  constexpr int kUnroll = Unrolled ? 8 : 1;  // every pass (rows / kRowStep is at most 8), or one at a time
  const bf16* from = src + r0 * gstride + col;
#pragma unroll kUnroll
  for (int pass = 0; pass < rows / kRowStep; ++pass, from += kRowStep * gstride) {
    const int i = r0 + pass * kRowStep;
    const bool valid = i < len;
    cp_async16(dst + at(i, col), valid ? from : src, valid);
  }
}
// The same into a [rows][kLd] tile.
template <int Threads, bool Unrolled>
__device__ __forceinline__ void copy_rows(bf16* dst, const bf16* src, int64_t gstride, int len,
                                          int rows = kC) {
  copy_rows_at<Threads, Unrolled>(
      dst, [](int r, int c) { return r * kLd + c; }, src, gstride, len, rows);
}

// ---- prepare: γ, L (band), T = (I + L)^-1 in fp32, U = T diag(β) V, W = T diag(β e^γ) K in bf16, Γ,
// statistic. 128 threads (4 warps, one warpgroup); warp w owns rows 16w..16w+15 of every 64-row product.
// Shared memory, 53 KB so that 4 blocks share a multiprocessor: K; L (fp32), then V; T (fp32), then W and U.
constexpr int kLdL = kC + 8;   // fp32 row stride of L
constexpr int kLdTm = kC + 4;  // fp32 row stride of T
// ---- warpgroup products (wgmma, sm_90a) for the pre-pass: the block's four warps issue one 64-row product
// together; B (and A, unless it comes from registers) is read from shared memory through a descriptor, once
// for the whole warpgroup (mma.sync has every warp load its own copy of B through ldmatrix). The
// accumulator's thread layout is mma.sync's m16n8 C fragment: warp w on rows 16w.., entries 4j..4j+3 for
// columns 8j...
// Operand tiles (64 x 128 bf16) use the 128-byte swizzle that wgmma reads (sw128): two halves of 64 columns,
// each 64 rows of 128 bytes whose 16-byte pieces are permuted by the row (piece p of row r at p ^ r % 8),
// aligned to 1024 bytes. A copy or a read of one row's half by a quarter-warp is one 128-byte line, and a
// warp's copies take two whole rows of memory. The descriptor's strides are 1024 bytes (8 rows); a step of k
// (16) moves the start by 32 bytes read k-major (k along the columns: K Kᵀ, U Uᵀ) or by 2048 bytes read
// mn-major (k along the rows: the second operand of A V and A K, whose 64 columns are one half).
// (sw128_rows: the same for a tile of R rows, whose halves are R rows apart: the output stage's 128-row
// state.)
template <int R>
__device__ __forceinline__ int sw128_rows(int r, int c) {
  return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}
__device__ __forceinline__ int sw128(int r, int c) {
  return sw128_rows<kC>(r, c);
}
constexpr uint32_t kSwKMajorStep = 32 >> 4, kSwMnMajorStep = 2048 >> 4;  // k steps, in descriptor units
__device__ __forceinline__ uint64_t sw128_desc(const bf16* tile) {
  return uint64_t(smem_addr(tile) >> 4) | (uint64_t(1024 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
// Before the first product of a group: the accumulator and A registers written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits for this warpgroup's committed products; the empty asm keeps the accumulator's uses below the wait.
template <int N>
__device__ __forceinline__ void wgmma_wait_all(float (&d)[N]) {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared-memory writes by ordinary stores and cp.async made visible to later wgmma reads (then a barrier).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Bulk copies by the tensor memory accelerator (TMA) into shared memory, each completing its bytes on an
// mbarrier that the waiting threads test by phase parity.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  while (!done);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int x, int y, int z,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}
// A sw128 tile of `Rows` rows x 128 columns as its two 64-column boxes, from row `row` of a 2D map or token
// `token` of a head of a 3D one ([token][head][128]), completing on `bar` (one thread issues them).
template <int Rows = kC>
__device__ __forceinline__ void tma_load_tile(bf16* tile, const CUtensorMap* map, int row, uint64_t* bar) {
  tma_load_2d(tile, map, 0, row, bar);
  tma_load_2d(tile + Rows * 64, map, 64, row, bar);
}
__device__ __forceinline__ void tma_load_tile(bf16* tile, const CUtensorMap* map, int head, int token,
                                              uint64_t* bar) {
  tma_load_3d(tile, map, 0, head, token, bar);
  tma_load_3d(tile + kC * 64, map, 64, head, token, bar);
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// A tile from shared memory to global memory by the tensor memory accelerator (this thread's bulk
// async-group; the writers of the tile fence_proxy_async() and a barrier before it is issued).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int x, int y, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
               "r"(x), "r"(y), "r"(smem_addr(src))
               : "memory");
}
// The bulk async-groups of this thread's copies from shared to global memory.
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until this thread's bulk groups but the newest `Pending` have read their source (the shared memory
// may be written again) ...
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
}
// ... or have written their destination, which is then ordered before this thread's later ordinary
// accesses (a release by another thread of the block after a barrier publishes it).
template <int Pending>
__device__ __forceinline__ void bulk_wait_written() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// The 32 fp32 accumulators of an m64n64 warpgroup product: asm operands %0..%31 of the helpers below.
#define SGDN_WGMMA_ACC32_REGS                                                                                \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%" \
  "28,%29,%30,%31}"
#define SGDN_WGMMA_ACC32(d)                                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),            \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),            \
      "+f"(d[30]), "+f"(d[31])
// d (64 x 64) (+)= A B, both from shared memory through descriptors, both stored k-major. Accumulates when
// `accumulate` is nonzero, else overwrites.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SGDN_WGMMA_ACC32_REGS
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : SGDN_WGMMA_ACC32(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
// The same with B stored mn-major (transposed: its 16-byte pieces run along n).
__device__ __forceinline__ void wgmma_m64n64k16_ss_t(float (&d)[32], uint64_t da, uint64_t db,
                                                     int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SGDN_WGMMA_ACC32_REGS
      ", %32, %33, p, 1, 1, 0, 1;\n}\n"
      : SGDN_WGMMA_ACC32(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
// d (64 x 64) (+)= A B, A from registers (this warp's 16 x 16 fragment, mma.sync's A layout), B from shared
// memory stored mn-major (transposed: its 16-byte pieces run along n).
__device__ __forceinline__ void wgmma_m64n64k16_rs_t(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                     int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SGDN_WGMMA_ACC32_REGS
      ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : SGDN_WGMMA_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
// This warp's rows of a wgmma accumulator (16 x 64 at column c0; the warp's rank in its warpgroup picks the
// rows), rounded to bf16, into an sw128 tile (a warp's 4-byte stores for one n8 tile fall in 32 distinct
// banks).
__device__ __forceinline__ void store_acc_sw128(bf16* tile, const float (&acc)[32], int c0) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  const int r = ((threadIdx.x >> 5) & 3) * 16 + gq;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = c0 + j * 8 + tq * 2;
    *reinterpret_cast<uint32_t*>(tile + sw128(r, c)) = pack_bf16(acc[4 * j], acc[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(tile + sw128(r + 8, c)) = pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
  }
}
// The 16 fp32 accumulators of an m64n32 warpgroup product: asm operands %0..%15.
#define SGDN_WGMMA_ACC16_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define SGDN_WGMMA_ACC16(d)                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
// 32-column operands stored mn-major in the 64-byte swizzle (sw64: rows of 64 bytes whose 16-byte pieces are
// permuted by the row pair, piece p of row r at p ^ (r / 2) % 4; the tensor copies' SWIZZLE_64B and the
// recurrence's swz_u<32>), aligned to 512 bytes: 8-row groups 512 bytes apart, a step of k (16 rows) 1024.
constexpr uint32_t kSw64MnMajorStep = 1024 >> 4;
__device__ __forceinline__ uint64_t sw64_desc(const bf16* tile) {
  return uint64_t(smem_addr(tile) >> 4) | (uint64_t(512 >> 4) << 16) | (uint64_t(512 >> 4) << 32) |
         (uint64_t(2) << 62);
}
// d (64 x 32) (+)= A B, A k-major through its descriptor (sw128), B mn-major (sw64).
__device__ __forceinline__ void wgmma_m64n32k16_ss_t(float (&d)[16], uint64_t da, uint64_t db,
                                                     int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " SGDN_WGMMA_ACC16_REGS
      ", %16, %17, p, 1, 1, 0, 1;\n}\n"
      : SGDN_WGMMA_ACC16(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
// d (64 x 32) += A B, A from registers (this warp's 16 x 16 fragment), B mn-major (sw64).
__device__ __forceinline__ void wgmma_m64n32k16_rs_t(float (&d)[16], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " SGDN_WGMMA_ACC16_REGS
      ", {%16,%17,%18,%19}, %20, p, 1, 1, 1;\n}\n"
      : SGDN_WGMMA_ACC16(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// Rows len.. of a 64-row sw128 tile (two 64-column halves) set to zero: the tokens after a short chunk's
// end, which a tensor copy brings (block-wide; a barrier before the tile is read).
__device__ __forceinline__ void zero_rows_sw128(bf16* tile, int len) {
  for (int e = threadIdx.x; e < (kC - len) * (kD / 8); e += blockDim.x) {
    const int i = len + e / (kD / 8), col = (e % (kD / 8)) * 8;
    *reinterpret_cast<uint4*>(tile + sw128(i, col)) = make_uint4(0u, 0u, 0u, 0u);
  }
}
// Asks L2 for bytes [first, first + bytes) of a tensor (widened to 16-byte bounds, which never leave the
// allocation's pages): a hint, completing on nothing.
__device__ __forceinline__ void prefetch_l2(const void* base, int64_t first, int64_t bytes) {
  const int64_t lo = first & ~int64_t(15), hi = (first + bytes + 15) & ~int64_t(15);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(static_cast<const char*>(base) + lo),
               "r"(uint32_t(hi - lo))
               : "memory");
}
// Bytes of a 64 x 128 bf16 tile, what its two 64-column tensor copies deliver.
constexpr uint32_t kTileBytes = kC * kD * sizeof(bf16);
// Orders this thread's earlier generic accesses to global memory (an acquire) before its later tensor copies.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// acc (16 x 16: two n8 tiles) += A B for 16 x 16 fp32 tiles in shared memory (row strides lda, ldb), tf32
// operands, fp32 accumulation.
__device__ __forceinline__ void mma_16x16_tf32(float (&acc)[2][4], const float* a, int lda, const float* b,
                                               int ldb) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  for (int k0 = 0; k0 < 16; k0 += 8) {
    const uint32_t a0 = to_tf32(a[gq * lda + k0 + tq]), a1 = to_tf32(a[(gq + 8) * lda + k0 + tq]);
    const uint32_t a2 = to_tf32(a[gq * lda + k0 + tq + 4]), a3 = to_tf32(a[(gq + 8) * lda + k0 + tq + 4]);
    for (int nt = 0; nt < 2; ++nt) {
      const int r0 = k0 + tq, r1 = k0 + tq + 4, c = nt * 8 + gq;
      const uint32_t b0 = to_tf32(b[r0 * ldb + c]);
      const uint32_t b1 = to_tf32(b[r1 * ldb + c]);
      asm volatile(
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(acc[nt][0]), "+f"(acc[nt][1]), "+f"(acc[nt][2]), "+f"(acc[nt][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
}
// The tensor maps of the pre-pass's and the recurrence's copies (kernel parameters): W and U as [slot
// rows][128] (a slot's 64 rows, box 64 x 64 for W, which the pre-pass stores and the recurrence loads, and
// for U's stores, `u_rows`; box 64 x VT for the recurrence's U), K and V as [token][head][128] (box 64 tokens
// x 64 columns; rows past the end of the tensor arrive as zeros), and the snapshots as [slot x 128 rows][128]
// (box 128 rows x VT, stored from Sb).
struct RecTmaMaps {
  CUtensorMap w, u, k, snap, u_rows, v, q, snap_rows;
};
struct PrepSmem {
  bf16 k[kC * kD];       // K (sw128)
  float lm[kC * kLdL];   // L (the blocks the solve reads; the Y tiles above them); then V (sw128 bf16)
  float tm[kC * kLdTm];  // T; then U (sw128 bf16) on its way out and for the statistic
  float gam[kC];
  float f[kC];   // e^{Γ−γ}, 0 past the chunk's end (the statistic's weights)
  float eg[kC];  // e^γ
  float bet[kC];
  float red[4];
  uint64_t bar[2];  // K's and V's tensor copies complete here
};
static_assert(sizeof(float) * kC * kLdL >= sizeof(bf16) * kC * kD, "V overlays L");
static_assert(sizeof(float) * kC * kLdTm >= sizeof(bf16) * kC * kD, "U overlays T");
static_assert(sizeof(PrepSmem::k) % 1024 == 0 && sizeof(PrepSmem::lm) % 1024 == 0,
              "sw128 tiles 1024-aligned");
// Four blocks per multiprocessor: 228 KB of shared memory, 1 KB of it reserved per block, 1 KB to align the
// block's region to 1024 bytes.
constexpr size_t kPrepSmemBytes = sizeof(PrepSmem) + 1024;
static_assert(4 * (kPrepSmemBytes + 1024) <= 228 * 1024, "prepare: four blocks per multiprocessor");

// This warp's A fragments (rows 16w.., k = 64 in four steps) of bf16(T diag(β)) or, with `decayed`,
// bf16(T diag(β e^γ)), from T (fp32, shared).
__device__ __forceinline__ void t_fragments(uint32_t (&f)[4][4], const PrepSmem& sm, bool decayed) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int j = ks * 16 + hi * 8 + tq * 2;
      float s0 = sm.bet[j], s1 = sm.bet[j + 1];
      if (decayed) s0 *= sm.eg[j], s1 *= sm.eg[j + 1];
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const float2 t = *reinterpret_cast<const float2*>(&sm.tm[(warp * 16 + gq + rh * 8) * kLdTm + j]);
        f[ks][rh + 2 * hi] = pack_bf16(t.x * s0, t.y * s1);
      }
    }
}
// D (64 x 64) = A B (or D += A B) over k = 64: A this warp's fragments `f`, B columns c0..c0+63 of an sw128
// tile read mn-major (V, K, U, W: k runs along the tile's rows).
__device__ __forceinline__ void rs_product(float (&acc)[32], const uint32_t (&f)[4][4], const bf16* b, int c0,
                                           bool accumulate = false) {
  const uint64_t desc = sw128_desc(b + (c0 >> 6) * (kC * 64));
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks)
    wgmma_m64n64k16_rs_t(acc, f[ks], desc + ks * kSwMnMajorStep, accumulate || ks);
  wgmma_commit();
  wgmma_wait_all(acc);
}
// D (64 x 128) = A B (k = 64) into `out` (sw128, this warp's rows), two products of 64 columns so that half
// the accumulator registers are live; `before_store` runs between each half's product and its store (a
// barrier where `out` is B's tile, so that every warp's product has read that half first).
template <class BeforeStore>
__device__ __forceinline__ void wy_product(bf16* out, const uint32_t (&f)[4][4], const bf16* b,
                                           BeforeStore before_store) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float acc[32];
    rs_product(acc, f, b, half * 64);
    before_store();
    store_acc_sw128(out, acc, half * 64);
  }
}
__device__ __forceinline__ void wy_product(bf16* out, const uint32_t (&f)[4][4], const bf16* b) {
  wy_product(out, f, b, [] {});
}
// d (64 x 64) = X Yᵀ over k = 128 for sw128 tiles X, Y (Q Kᵀ): four steps in each 64-column half. Issued, not
// committed.
__device__ __forceinline__ void times_abt(float (&d)[32], const bf16* x, const bf16* y) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks)
    wgmma_m64n64k16_ss(d, sw128_desc(x + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep,
                       sw128_desc(y + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep, ks);
}
// D (64 x 64) = X Yᵀ committed and waited for (K Kᵀ, U Uᵀ).
__device__ __forceinline__ void abt_product(float (&acc)[32], const bf16* x, const bf16* y) {
  wgmma_fence();
  times_abt(acc, x, y);
  wgmma_commit();
  wgmma_wait_all(acc);
}

template <bool Stat>
__global__ void __launch_bounds__(kPrepThreads, 4)
    prepare_tc_kernel(PrepareArgs a, const __grid_constant__ RecTmaMaps tma) {
  // The chunk table (and a dense run's selection) complete. No early start for the kernel after this one: a
  // 2-stage recurrence placed while the last pre-pass blocks run would put two blocks on some
  // multiprocessors (measured: dense 32K-128K 3-4 % slower), where one each leaves room for an output block.
  // (A dense run with the survival score has the score kernel, S blocks, between them.)
  wait_for_previous_grid();
  // One block per (chunk record, value head), the value heads of a chunk side by side: they read the same
  // rows of K (a head pair the same K), and together whole rows of K and V.
  const int64_t id = blockIdx.x / unsigned(a.HV);
  const int hv = int(blockIdx.x % unsigned(a.HV));
  const ChunkInfo ci = load_chunk_info(a.chunk_info, id);
  if (ci.s < 0) return;
  const int64_t s = ci.s, c = ci.c, t0 = ci.t0;
  const int len = ci.len;
  const int h = hv / (a.HV / a.H);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  // The chunk `prefetch_ahead` records on (a wave of blocks later): thread 0 of its value head 0's block asks
  // L2 for that chunk's K, V, g and β rows of every head once L is built (its record has arrived by then), so
  // that the blocks starting then wait for L2 rather than memory (a block's start, its record then g and β,
  // took ~3 900 of its ~20 000 cycles, v48's trace).
  const int64_t far_id = id + a.prefetch_ahead;
  const bool prefetcher =
      a.prefetch_ahead > 0 && hv == 0 && threadIdx.x == 0 && far_id < int64_t(gridDim.x / unsigned(a.HV));
  const ChunkInfo far = prefetcher ? load_chunk_info(a.chunk_info, far_id) : ChunkInfo{-1, 0, 0, 0};
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PrepSmem& sm = *reinterpret_cast<PrepSmem*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
  bf16* vs = reinterpret_cast<bf16*>(sm.lm);
  bf16* us = reinterpret_cast<bf16*>(sm.tm);

  // K and V (later) by tensor copies, two 64-column boxes each, issued by thread 0.
  auto load_tile = [&](bf16* tile, const CUtensorMap* map, int head, uint64_t* bar) {
    if (threadIdx.x == 0) {
      mbar_expect_bytes(bar, kTileBytes);
      tma_load_tile(tile, map, head, int(t0), bar);
    }
  };
  if (threadIdx.x == 0) {
    mbar_init(&sm.bar[0], 1);
    mbar_init(&sm.bar[1], 1);
    mbar_init_fence();
    fence_proxy_async();  // the initialised mbarriers seen by the tensor copies issued below
  }
  load_tile(sm.k, &tma.k, h, &sm.bar[0]);
  // A tile once its copy is complete (after a barrier that follows the mbarriers' initialisation), rows past
  // a short chunk's end zeroed (then a barrier before products read it).
  auto tile_arrived = [&](bf16* tile, uint64_t* bar) {
    mbar_wait(bar, 0);
    if (len < kC) {
      zero_rows_sw128(tile, len);
      fence_proxy_async();
    }
  };
  const bf16* bp = static_cast<const bf16*>(a.beta);
  if (warp == 0) {
    // γ: inclusive scan of g over the chunk, two tokens per lane.
    const int i0 = 2 * lane, i1 = 2 * lane + 1;
    const float g0 = i0 < len ? a.g[(t0 + i0) * a.HV + hv] : 0.f;
    const float g1 = i1 < len ? a.g[(t0 + i1) * a.HV + hv] : 0.f;
    float x = g0 + g1;
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    const float before = x - g0 - g1;
    sm.gam[i0] = before + g0;
    sm.gam[i1] = x;
    if constexpr (Stat) {  // f = e^{Γ−γ} with Γ = γ of the chunk's last token
      const int last = len - 1;
      const float even = __shfl_sync(0xffffffffu, before + g0, last >> 1),
                  odd = __shfl_sync(0xffffffffu, x, last >> 1);
      const float big_gamma = last & 1 ? odd : even;
      sm.f[i0] = i0 < len ? exp_ftz(big_gamma - (before + g0)) : 0.f;
      sm.f[i1] = i1 < len ? exp_ftz(big_gamma - x) : 0.f;
    }
  } else if (warp == 1) {
    for (int i = lane; i < kC; i += 32)
      sm.bet[i] = i < len ? __bfloat162float(bp[(t0 + i) * a.HV + hv]) : 0.f;
  }
  __syncthreads();  // γ, β; the mbarriers initialised
  tile_arrived(sm.k, &sm.bar[0]);
  if (len < kC) __syncthreads();

  // L = strictly_lower(diag(β) K Kᵀ ⊙ D) with the band (K Kᵀ: warp w rows 16w.., all 64 columns). For the
  // statistic K Kᵀ stays in registers, weighted by f_i f_j, until U Uᵀ (until v45 it was recomputed there).
  float kk[32];
  abt_product(kk, sm.k, sm.k);
  {
    // This thread's two rows i = 16w + gq (+ 8): β, γ and the band's first column once per row.
    int row[2], first[2];
    float brow[2], grow[2], frow[2] = {};
    for (int half = 0; half < 2; ++half) {
      row[half] = warp * 16 + gq + half * 8;
      first[half] = band_first(row[half], a.block, a.band);
      brow[half] = sm.bet[row[half]];
      grow[half] = sm.gam[row[half]];
      if constexpr (Stat) frow[half] = sm.f[row[half]];
    }
    // γ and f at this thread's columns, read before L's stores (which the compiler would not move loads
    // above: each column pair's loads waited for the stores before them). v54, with the column-form solve
    // below and the band's blocks as bits: the sparse pre-pass at 16K 0.188 → 0.166-0.169 ms.
    float2 gcol[8], fcol[8] = {};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      gcol[nt] = *reinterpret_cast<const float2*>(&sm.gam[nt * 8 + tq * 2]);
      if constexpr (Stat) fcol[nt] = *reinterpret_cast<const float2*>(&sm.f[nt * 8 + tq * 2]);
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + tq * 2;  // columns j, j + 1 in one 8-byte store (each half-warp's fill 32 banks)
      // Only the 16 x 16 blocks of L that the solve reads are written (warp-uniform): the diagonal one and
      // those left of it with an entry in the band (block_adjacent with band 1: 7 of the 16).
      const int m = nt >> 1;
      const bool read = m == warp || (m < warp && l_block_in(a.l_blocks, warp, m));
      for (int half = 0; half < 2; ++half) {
        const int i = row[half];
        const float x0 = kk[4 * nt + 2 * half], x1 = kk[4 * nt + 2 * half + 1];
        constexpr float kOut = -INFINITY;  // outside the band: a zero decay, no branch
        if (read) {
          const float e0 = exp_ftz(j < i && j >= first[half] ? grow[half] - gcol[nt].x : kOut);
          const float e1 = exp_ftz(j + 1 < i && j + 1 >= first[half] ? grow[half] - gcol[nt].y : kOut);
          *reinterpret_cast<float2*>(&sm.lm[i * kLdL + j]) =
              make_float2(brow[half] * x0 * e0, brow[half] * x1 * e1);
        }
        if constexpr (Stat) {
          kk[4 * nt + 2 * half] = x0 * frow[half] * fcol[nt].x;
          kk[4 * nt + 2 * half + 1] = x1 * frow[half] * fcol[nt].y;
        }
      }
    }
  }
  if (far.s >= 0) {
    const int64_t row_k = int64_t(a.H) * kD * sizeof(bf16), row_v = int64_t(a.HV) * kD * sizeof(bf16);
    prefetch_l2(a.k, far.t0 * row_k, far.len * row_k);
    prefetch_l2(a.v, far.t0 * row_v, far.len * row_v);
    prefetch_l2(a.g, far.t0 * int64_t(a.HV) * sizeof(float), far.len * int64_t(a.HV) * sizeof(float));
    prefetch_l2(a.beta, far.t0 * int64_t(a.HV) * sizeof(bf16), far.len * int64_t(a.HV) * sizeof(bf16));
  }
  __syncthreads();
  // T = (I + L)^-1 by 16 x 16 blocks (the band is in L's entries): the diagonal blocks by forward
  // substitution, one column per thread with the column in registers (threads 0..63); the blocks above the
  // diagonal zeroed meanwhile (threads 64..127); then the blocks below the diagonal (below).
  if (threadIdx.x < kC) {
    const int col = threadIdx.x, b0 = col & ~15, c = col - b0;
    // Column by column: once x_j is final every later row takes its term −L_ij x_j, so the dependent path is
    // 16 steps where row by row (each row's sum after the last) it was 120. Each row still sums its terms
    // in the order j = 0, 1, ..., so the roundings are those of the row form.
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = i == c ? 1.f : 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      x[j] = j < c ? 0.f : x[j];
#pragma unroll
      for (int i = j + 1; i < 16; ++i) x[i] -= sm.lm[(b0 + i) * kLdL + b0 + j] * x[j];
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) sm.tm[(b0 + i) * kLdTm + col] = x[i];
  } else {
    sm.eg[threadIdx.x - kC] = exp_ftz(sm.gam[threadIdx.x - kC]);
    for (int e = threadIdx.x - kC; e < 6 * 64; e += blockDim.x - kC) {
      // the six blocks (I, J) with J > I: (0,1) (0,2) (0,3) (1,2) (1,3) (2,3), four columns per store
      const int blk = e >> 6, r = (e >> 2) & 15, cc = (e & 3) * 4;
      const int bi = blk < 3 ? 0 : (blk < 5 ? 1 : 2);
      const int bj = blk < 3 ? blk + 1 : (blk < 5 ? blk - 1 : 3);
      *reinterpret_cast<float4*>(&sm.tm[(bi * 16 + r) * kLdTm + bj * 16 + cc]) =
          make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  __syncthreads();
  // Below the diagonal, in three steps of 16 x 16 products on tensor cores in tf32 (fp32 accumulation;
  // operands rounded to 10-bit mantissas, below the bf16 rounding of T diag(β) and T diag(β e^γ) that
  // follows), one tile per warp and step. With T's 32-row halves A (blocks 0, 1) and B (blocks 2, 3) and
  // R = L's lower-left 32 x 32, T's lower-left half is −B R A:
  //   1. T_10 = −T_11 (L_10 T_00), T_32 = −T_33 (L_32 T_22), Y_21 = L_21 T_11, Y_31 = L_31 T_11;
  //   2. Y_20 = L_20 T_00 + L_21 T_10, Y_30 = L_30 T_00 + L_31 T_10;
  //   3. T_2J = −T_22 Y_2J, T_3J = −(T_32 Y_2J + T_33 Y_3J) for J = 0, 1.
  // Six products deep (column by column it was nine, on one warp). Blocks of L that the solver's band zeroes
  // are skipped (block_adjacent with band 1: four deep). The Y tiles live in L's blocks above the diagonal,
  // which L's build leaves unwritten; each is written before it is read.
  {
    auto lb = [&](int I, int M) { return sm.lm + I * 16 * kLdL + M * 16; };
    auto tb = [&](int I, int J) { return sm.tm + I * 16 * kLdTm + J * 16; };
    auto kept = [&](int I, int M) { return l_block_in(a.l_blocks, I, M); };
    auto y_tile = [&](int I, int J) { return lb(J, I); };  // Y_IJ (I = 2, 3; J = 0, 1) in L's block (J, I)
    auto y_kept = [&](int I, int J) { return kept(I, 1) || (J == 0 && kept(I, 0)); };  // Y_IJ may be nonzero
    auto store_tile = [&](float* dst, int ld, const float(&x)[2][4], float sign) {
      for (int nt = 0; nt < 2; ++nt)
        for (int half = 0; half < 2; ++half)
          *reinterpret_cast<float2*>(dst + (gq + half * 8) * ld + nt * 8 + tq * 2) =
              make_float2(sign * x[nt][2 * half], sign * x[nt][2 * half + 1]);
    };
    if (warp < 2) {  // T_10 (warp 0), T_32 (warp 1); X = L_{I,I−1} T_{I−1,I−1} through Y_20's / Y_30's tile
      const int I = warp ? 3 : 1;
      float t[2][4] = {};
      if (kept(I, I - 1)) {
        float x[2][4] = {};
        mma_16x16_tf32(x, lb(I, I - 1), kLdL, tb(I - 1, I - 1), kLdTm);
        store_tile(y_tile(2 + warp, 0), kLdL, x, 1.f);
        __syncwarp();
        mma_16x16_tf32(t, tb(I, I), kLdTm, y_tile(2 + warp, 0), kLdL);
        __syncwarp();  // X read: the tile is free for step 2
      }
      store_tile(tb(I, I - 1), kLdTm, t, -1.f);
    } else {  // Y_21 (warp 2), Y_31 (warp 3)
      float y[2][4] = {};
      if (kept(warp, 1)) mma_16x16_tf32(y, lb(warp, 1), kLdL, tb(1, 1), kLdTm);
      store_tile(y_tile(warp, 1), kLdL, y, 1.f);
    }
    __syncthreads();
    if (warp < 2) {  // Y_20 (warp 0), Y_30 (warp 1)
      const int I = 2 + warp;
      float y[2][4] = {};
      if (kept(I, 0)) mma_16x16_tf32(y, lb(I, 0), kLdL, tb(0, 0), kLdTm);
      if (kept(I, 1)) mma_16x16_tf32(y, lb(I, 1), kLdL, tb(1, 0), kLdTm);
      store_tile(y_tile(I, 0), kLdL, y, 1.f);
    }
    __syncthreads();
    {  // T_IJ, I = 2 + (warp >> 1), J = warp & 1
      const int I = 2 + (warp >> 1), J = warp & 1;
      float t[2][4] = {};
      if (y_kept(2, J)) mma_16x16_tf32(t, tb(I, 2), kLdTm, y_tile(2, J), kLdL);
      if (I == 3 && y_kept(3, J)) mma_16x16_tf32(t, tb(3, 3), kLdTm, y_tile(3, J), kLdL);
      store_tile(tb(I, J), kLdTm, t, -1.f);
    }
  }
  fence_proxy_async();  // L's and the Y tiles' stores before V's tensor copy overwrites them
  __syncthreads();
  // L is read no more: V is copied into its region while W = bf16(T diag(β e^γ)) K runs (A from registers,
  // built from T; K's tile read mn-major). W leaves through K's tile (each 64-column half of W where the half
  // of K that its product read was), U through T's region, both by tensor copies. U's fragments are built
  // from T after W's product, before W's stores: beside the weighted K Kᵀ, W's and U's fragments built
  // together spill (measured, v44); with U's fragments after W's stores, sparse forwards 0.5-1 % slower than
  // with them before. Without the statistic the same order: until v54 that kernel built both fragment sets
  // first and stored W and U by every thread's 16-byte stores (128 registers, 48 bytes of spills, against
  // 80 and none now; the dense pre-pass at 16K 0.164-0.169 → 0.154-0.157 ms).
  const int64_t slot = id * a.HV + hv;
  load_tile(vs, &tma.v, hv, &sm.bar[1]);
  // U = bf16(T diag(β)) V once V is in place (every read of T is done by then); `after_barrier` runs once
  // the block's earlier shared-memory writes are visible to tensor copies.
  auto u_product = [&](const uint32_t(&fu)[4][4], auto after_barrier) {
    tile_arrived(vs, &sm.bar[1]);
    fence_proxy_async();
    __syncthreads();
    after_barrier();
    wy_product(us, fu, vs);
  };
  // A 64-row tile (sw128, two 64-column halves) to its slot's rows in memory by two tensor copies (thread 0).
  const int slot_row = int(slot * kC);
  auto copy_out = [&](const CUtensorMap* map, const bf16* tile) {
    if (threadIdx.x == 0) {
      tma_store_2d(map, 0, slot_row, tile);
      tma_store_2d(map, 64, slot_row, tile + kC * 64);
      bulk_commit();
    }
  };
  uint32_t fw[4][4];
  t_fragments(fw, sm, true);
  wy_product(sm.k, fw, sm.k, [] { __syncthreads(); });  // W over K, each half once every warp has read it
  uint32_t fu[4][4];
  t_fragments(fu, sm, false);
  u_product(fu, [&] { copy_out(&tma.w, sm.k); });
  for (int i = threadIdx.x; i < kC; i += blockDim.x) a.gamma[slot * kC + i] = i < len ? sm.gam[i] : 0.f;
  const float big_gamma = sm.gam[len - 1];
  if (threadIdx.x == 0) a.chunk_decay[event_index(a.chunk_offset, s, a.HV, hv, c)] = big_gamma;
  fence_proxy_async();
  __syncthreads();  // U (bf16) complete in its tile
  copy_out(&tma.u_rows, us);
  if constexpr (Stat) {
    // ‖(e^{Γ−γ} ⊙ K)ᵀ U‖_F² = Σ_ij f_i f_j (K Kᵀ)_ij (U Uᵀ)_ij with f_i = e^{Γ−γ_i} (0 past the chunk's end):
    // U Uᵀ (64 x 64, k = 128) against the weighted K Kᵀ kept from L's product, instead of Mᵀ = Kᵀ U itself
    // (128 x 128).
    float uu[32];
    abt_product(uu, us, us);
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) sum_sq += kk[i] * uu[i];
    for (int off = 16; off > 0; off >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, off);
    if (lane == 0) sm.red[warp] = sum_sq;
    __syncthreads();
    if (threadIdx.x == 0)
      a.statistic[event_index(a.chunk_offset, s, a.HV, hv, c)] =
          sqrtf(fmaxf(sm.red[0] + sm.red[1] + sm.red[2] + sm.red[3], 0.f));
  }
  // The tiles' copies have read shared memory before the block leaves.
  if (threadIdx.x == 0) bulk_wait_read<0>();
}

// ---- recurrence: per (sequence, value head, V tile of VT = 32 or 64 columns), NW = 8 or 4 warps (two or one
// per scheduler; the plan takes 8 at 32 columns). The state tile (128 x VT fp32) lives in registers: warp w
// owns rows 16 (8 / NW) w.., 8 / NW m-tiles x VT / 8 n-tiles. Each selected event, with Sb = bf16(S) as the
// last event left it (shared) and S = e^{pending} x that state (the skipped chunks since):
//   v̂ = U − e^{pending} W Sb (warp w: rows 16(w & 3).., columns (VT / 2)(w >> 2).. with 8 warps, all VT
//   with 4; in the warpgroup form, Wg, all of it on warps 0-3);  Vh = bf16(e^{Γ−γ} ⊙ v̂);  S = e^Γ S + Kᵀ Vh
//   (warp w: its state rows);  Sb = bf16(S), which is also the snapshot, copied out of shared memory by one
//   tensor copy (TMA) during the next event. A producer warp after the NW math warps issues the copies.
// Two barriers per event (Sb written, Vh written), whether or not chunks were skipped before it. The next
// NS − 1 selected events' W, K, U, γ are in flight (TMA, NS stages), the next one's issued as an event
// starts. NS = 3 (127 KB of shared memory; 4, 164 KB, for the warpgroup form's blocks) keeps a lone busy
// chain fed; NS = 2 (90 KB) leaves room on the multiprocessor for an output block (or a second recurrence
// block) beside it, which pays where every chain is busy (the dense selector). VT = 64 (half the blocks, each
// copying W and K once for twice the columns) was for runs with more 32-column blocks than multiprocessors
// (packed batches), whose 32-column recurrence the copies' traffic through L2 bounded; 2 stages of it (110
// KB) still let two blocks share a multiprocessor. Since v33 those runs take recurrence_wg_kernel, and the
// plan takes this kernel at 32 columns only. The copied tiles come from
// the tensor memory accelerator (one thread issues an event's copies; they complete on the stage's mbarrier)
// in its swizzled layouts, whose 16-byte pieces are permuted by the row so that the 8 rows an ldmatrix reads
// and the rows the epilogue reads fall in distinct banks: W and K as sw128 (two 64-column halves), U's VT
// columns with the 64-byte swizzle for 32 (piece p of row r at p ^ ((r >> 1) & 3), two rows per 128-byte
// line) and the 128-byte one for 64 (p ^ (r & 7), one row per line). (Until v34 every thread issued cp.async
// copies, ~135 of an event's 370 instructions per warp.)
template <int VT>
__device__ __forceinline__ int swz_u(int r, int c) {
  static_assert(VT == 32 || VT == 64, "32 or 64 columns");
  constexpr int kPieces = VT / 8, kRowShift = VT == 32 ? 1 : 0;
  return r * VT + ((((c >> 3) ^ (r >> kRowShift)) & (kPieces - 1)) * 8) + (c & 7);
}
template <int VT>
struct alignas(1024) RecStage {
  bf16 w[kC * kD];
  bf16 k[kC * kD];
  bf16 u[kC * VT];  // VOut: the event's v = U − W Sb takes U's place, on its way to memory
  float gam[kC];
};
template <int VT>
constexpr uint32_t kRecStageBytes = sizeof(bf16) * (2 * kC * kD + kC * VT) + sizeof(float) * kC;
// What the stage's copies deliver and its mbarrier expects (a mismatch would wait forever): W, K, U, then γ.
static_assert(kRecStageBytes<32> == offsetof(RecStage<32>, gam) + sizeof(float) * kC &&
                  kRecStageBytes<64> == offsetof(RecStage<64>, gam) + sizeof(float) * kC,
              "the stage's bytes are its tiles'");
template <int NS, int VT>
struct RecSmem {
  static_assert(NS >= 2 && NS <= 4, "two to four copy stages");
  static constexpr int kLdT = VT + 8;  // row stride of Vh
  RecStage<VT> stage[NS];
  alignas(1024) bf16 sb[kD * VT];    // swz_u<VT>: the layout of the snapshots' tensor copies
  alignas(1024) bf16 vh[kC * kLdT];  // row stride kLdT, or swz_u<VT> for the warpgroup products (Wg)
  uint8_t mask[kWindow];
  float decay[kWindow];
  uint64_t full[NS];  // a stage's copies complete here
};
template <int NS, int VT>
constexpr size_t rec_smem_bytes() {
  return sizeof(RecSmem<NS, VT>) + 1024;  // and the alignment of the block's region to 1024 bytes
}

// A recurrence block's place: one block per (sequence, value head, V tile of `Tiles`), the tile fastest; its
// chunks, first snapshot slot and first event index. Read after wait_for_previous_grid().
struct ChainPlace {
  int64_t s;
  int hv, tile;
  int64_t n, slot_base, ev_base;
};
template <int Tiles>
__device__ __forceinline__ ChainPlace chain_place(const RecurrenceArgs& a) {
  ChainPlace p;
  p.tile = int(blockIdx.x % Tiles);
  p.hv = int(blockIdx.x / Tiles % unsigned(a.HV));
  p.s = blockIdx.x / Tiles / unsigned(a.HV);
  p.n = a.chunk_offset[p.s + 1] - a.chunk_offset[p.s];
  p.slot_base = snapshot_slot_base(a.chunk_offset[p.s], p.s, a.HV, p.hv, p.n);
  p.ev_base = int64_t(a.chunk_offset[p.s]) * a.HV + int64_t(p.hv) * p.n;
  return p;
}
// Chunks [0, upto) have the snapshots their groups start from in memory (each block its columns; the group
// records that name them are written with the mask): the flags of the block's 32-column parts, `Flags` of
// them from `flags`, by threads First..First + Flags − 1 (0 by default; the producer warp in the warpgroup
// form with more than 2 stages, where the fence before the release, which waits for the thread's own memory
// operations, is better off the chain's math warps). Called after a barrier that follows the stores.
template <int Flags, int First = 0>
struct Publisher {
  int32_t* flags;
  int64_t published = 0;
  __device__ __forceinline__ void operator()(int64_t upto) {
    if (unsigned(threadIdx.x - First) < unsigned(Flags))
      publish_progress(flags + (threadIdx.x - First), int32_t(upto));
    published = upto;
  }
};

// The event loop of the recurrence kernels, after the block has put the initial state in Sb (and a barrier).
// The head's mask and chunk decays are staged kWindow chunks at a time in `mask` and `decay` (shared memory);
// a skipped chunk adds its decay to the pending one, which `rescale(e^pending, flush)` applies before the
// next event; up to NS − 1 selected events' copies are in flight (`fetch(buffer, chunk)`), each event's own
// waited for before it starts (`wait(buffer, copies in flight)`, then a barrier). `event(buffer, chunk, Γ,
// flush, fetch_next)` computes one event and calls fetch_next() where the next copy is to be issued.
// Snapshots: `write(slot)` copies Sb to snapshot `slot` (the initial state's first); an event's snapshot is
// written by the next flush() (the event after it calls it while its first products run: before the next
// copies in the warpgroup form with more than 2 stages, after them otherwise; before Sb changes in any case),
// and `chunks` (null but in a head's first block) receives the events' chunks. At the end every chunk is
// published; `drain()` is called before the barriers that precede those publications (snapshots stored
// asynchronously complete there). Returns the log decay after the last event; `slot` is then the number of
// events.
template <int NS, class Publish, class Fetch, class Wait, class Write, class Drain, class Rescale,
          class Event>
__device__ __forceinline__ float for_each_event(const RecurrenceArgs& a, uint8_t* mask, float* decay,
                                                const ChainPlace& place, Publish& publish, Fetch fetch,
                                                Wait wait, Write write, Drain drain, int32_t* chunks,
                                                Rescale rescale, Event event, int64_t& slot) {
  const int64_t n = place.n;
  int64_t snap_slot = -1;
  int32_t snap_chunk = 0;
  auto flush = [&]() {
    if (snap_slot >= 0) {
      write(snap_slot);
      if (chunks && threadIdx.x == 0) chunks[snap_slot] = snap_chunk;
    }
    snap_slot = -1;
  };
  write(0);
  if (chunks && threadIdx.x == 0) chunks[0] = -1;
  // The next buffer after b + k (b < NS, k < NS): no division.
  auto ring = [](int x) { return x >= NS ? x - NS : x; };
  float pending = 0.f;
  int buf = 0;
  for (int64_t w0 = 0; w0 < n; w0 += kWindow) {
    const int wn = int(min_i64(kWindow, n - w0));
    flush();
    drain();
    __syncthreads();  // the previous window's mask / decay reads and the snapshot stores are done
    if (w0 > publish.published) publish(w0);
    for (int i = threadIdx.x; i < wn; i += blockDim.x) {
      mask[i] = a.mask[mask_row(a, place.ev_base, place.hv, n) + w0 + i] == 1;
      decay[i] = a.chunk_decay[place.ev_base + w0 + i];
    }
    __syncthreads();
    auto next_selected = [&](int from) {
      while (from < wn && !mask[from]) ++from;
      return from;
    };
    // Up to NS − 1 selected events in flight, in the buffers after `buf`; the first one's data is waited for
    // here, each next one's at the end of the event before it. `inflight` counts those not yet computed.
    int to_fetch = next_selected(0), inflight = 0;
    for (; inflight < NS - 1 && to_fetch < wn; ++inflight) {
      fetch(ring(buf + inflight), w0 + to_fetch);
      to_fetch = next_selected(to_fetch + 1);
    }
    wait(buf, inflight);
    __syncthreads();
    for (int i = 0; i < wn; ++i) {
      const int64_t c = w0 + i;
      const float big_gamma = decay[i];
      if (!mask[i]) {
        pending += big_gamma;
        continue;
      }
      // i is the current event: its data is in `buf` and visible (waited for before the last barrier).
      if (pending != 0.f) {  // block-uniform
        const float carried = exp_ftz(pending);
        pending = 0.f;
        rescale(carried, flush);
      }
      --inflight;  // this one
      // Into the buffer after those in flight (the previous event's, for NS - 1 of them).
      auto fetch_next = [&]() {
        if (to_fetch < wn) {
          fetch(ring(buf + 1 + inflight), w0 + to_fetch);
          ++inflight;
          to_fetch = next_selected(to_fetch + 1);
        }
      };
      event(buf, c, big_gamma, flush, fetch_next);
      // The next event's data must be visible after the barrier below, so its copies are waited for first.
      wait(ring(buf + 1), inflight);
      __syncthreads();
      ++slot;
      snap_slot = slot;
      snap_chunk = int32_t(c);
      buf = buf == NS - 1 ? 0 : buf + 1;
    }
  }
  flush();
  drain();
  __syncthreads();
  publish(n);
  return pending;
}

// VOut (the dense selector, G = 1): each event's v = U − W Sb (bf16, this block's columns) also goes to
// memory over the chunk's U, which this block alone reads and has read; the output stage takes it from there.
// Only for a run in which every chunk is an event (no form the plan picks): a skipped chunk would leave U in
// its place. Wg (8 warps, 32 columns, no VOut): an event's two products as warpgroup products (the plan's
// 32-column form). Every form has one more warp than its NW math warps: the producer, which issues the copies
// and the snapshots' tensor copies and waits for them. (Two 64-column blocks per multiprocessor cap the
// registers: the 8-warp 64-column form, which the plan does not pick, spills a few dozen bytes since it has
// the producer warp.) The 2-stage Wg block (the dense selector's at B = 1) has to stay at 88 registers or
// fewer, so that a dense output block fits beside it (see output_wg_kernel): at 89, with one more 64-bit
// index live across the event loop, it did not.
template <int NS, bool VOut, int VT, int NW, bool Wg>
__global__ void __launch_bounds__(NW * 32 + 32, VT == 64 ? 2 : 0)  // 64: two blocks per multiprocessor
    recurrence_tc_kernel(RecurrenceArgs a, bf16* u_all, const bf16* w_all,
                         const __grid_constant__ RecTmaMaps tma) {
  static_assert(NW == 8 || NW == 4, "8 or 4 warps");
  static_assert(!Wg || (NW == 8 && VT == 32 && !VOut),
                "warpgroup products: 8 warps, 32 columns, v not stored");
  // NW math warps and one producer warp, whose first thread issues the copies (in and out) and waits for
  // them; the math warps' path through an event has no copy instructions in it.
  constexpr int kBlockThreads = NW * 32, kProducer = kBlockThreads;
  constexpr int kTiles = kD / VT, kLdT = RecSmem<NS, VT>::kLdT;
  constexpr int kFlags = VT / kTcTile;           // progress flags this block publishes
  constexpr int kVCols = NW == 8 ? VT / 2 : VT;  // v̂: columns per warp
  constexpr int kNP = kVCols / 16;               // v̂: n16 tiles per warp
  // v̂: accumulator sets (independent mma chains) per n8 tile: two for the 8-warp 32-column block (four
  // measured 2.2-2.7 % slower in sparse forwards: 16 more FADD per warp and event to sum them), else 4 / kNP.
  constexpr int kSets = kNP == 1 ? 2 : 4 / kNP;
  static_assert(kSets == 1 || kSets == 2 || kSets == 4, "one, two or four accumulator sets");
  constexpr int kMT = 8 / NW;                                               // state: m16 tiles per warp
  constexpr int kUPieces = VT / 8;                                          // 16-byte pieces per row of U
  constexpr int kURows = kBlockThreads / kUPieces, kUCopies = kC / kURows;  // VOut: v rows stored at once
  // The blocks that read the same W (a value head's tiles) and the same K (a head pair's) are launched
  // together, so that they run in the same wave when a packed batch has more blocks than fit at once, and the
  // later ones find W and K in L2.
  wait_for_previous_grid();  // the selection (and the pre-pass before it) complete
  const ChainPlace place = chain_place<kTiles>(a);
  const int64_t s = place.s, slot_base = place.slot_base;
  const int hv = place.hv, tile = place.tile;
  const int col0 = tile * VT;
  const int V = kD;
  const int h = hv / (a.HV / a.H);
  // (The warp index through a shuffle: visibly warp-uniform to the compiler, so that the warpgroup products
  // under `math` are not serialised: ptxas note C7518 without it.)
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x >> 5), 0), lane = threadIdx.x & 31,
            gq = lane >> 2, tq = lane & 3;
  const bool math = warp < NW;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  RecSmem<NS, VT>& sm =
      *reinterpret_cast<RecSmem<NS, VT>*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
  if (threadIdx.x == 0) {
    for (int b = 0; b < NS; ++b) mbar_init(&sm.full[b], 1);
    mbar_init_fence();
  }
  // Every block of this grid is resident once all have passed here, and the kernels before it are complete:
  // the kernel after it may launch beside it (the output stage, whose blocks wait on `progress`, or with a
  // sparse selector the mask expansion and then the output stage; never the other way round, so no block
  // can starve this grid; they read the selection's and the pre-pass's results at once).
  let_next_grid_start();
  // (The warpgroup form with more than 2 stages publishes from the producer warp; the others from warp 0: the
  // two changes of v43 together measured ~1.5 % slower at 128K dense, whose 2-stage copies have one event's
  // lead.)
  constexpr int kPublisher = Wg && NS > 2 ? kProducer : 0;
  Publisher<kFlags, kPublisher> publish{a.progress +
                                        progress_flag_index(s, a.HV, hv, kVTiles, tile * kFlags)};

  // State registers: st[mt][nt][r] at row 16 (kMT w + mt) + gq + 8(r>>1), column col0 + 8nt + 2tq + (r&1).
  float st[kMT][VT / 8][4];
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < VT / 8; ++nt)
      for (int r = 0; r < 4; ++r) {
        const int d = (warp * kMT + mt) * 16 + gq + (r >> 1) * 8, col = col0 + nt * 8 + tq * 2 + (r & 1);
        st[mt][nt][r] = math && a.initial_state ? a.initial_state[((s * a.HV + hv) * kD + d) * V + col] : 0.f;
      }
  // Snapshot `slot` from Sb (bf16(S), written, fenced for the async proxy and made visible by a barrier):
  // one tensor copy (128 rows x VT columns) issued by the producer thread, which waits for its read of Sb
  // (sb_reads_done) before a barrier after which Sb is written again, and for its writes before a barrier
  // that precedes a publication (drain; the events' publications wait for all but the newest). Sb is kept in
  // the copy's swizzled layout (swz_u<VT>: 64-byte rows at 32 columns, 128-byte rows at 64). (Until v38 every
  // thread stored 16-byte pieces read from Sb, kMT VT / 16 loads and stores per thread and event: 0.655 →
  // 0.590 ms of a 32K sparse chain without them; one bulk copy per row, 128 per event, made it 0.93.)
  auto write_snapshot = [&](int64_t slot) {
    if (threadIdx.x != kProducer) return;
    tma_store_2d(&tma.snap, col0, int((slot_base + slot) * kD), sm.sb);
    bulk_commit();
  };
  auto sb_reads_done = [&] {
    if (threadIdx.x == kProducer) bulk_wait_read<0>();
  };
  auto drain = [&] {
    if (threadIdx.x == kProducer) bulk_wait_written<0>();
  };
  // This thread's Sb rows r0 (+ 8) of each m-tile: element (r, c) at swz_u<VT>(r, c), the rows 8 apart in
  // the same permutation.
  auto store_sb = [&] {
    if (!math) return;
    for (int mt = 0; mt < kMT; ++mt) {
      const int r0 = (warp * kMT + mt) * 16 + gq;
      for (int nt = 0; nt < VT / 8; ++nt) {
        bf16* at = sm.sb + swz_u<VT>(r0, nt * 8 + tq * 2);
        *reinterpret_cast<uint32_t*>(at) = pack_bf16(st[mt][nt][0], st[mt][nt][1]);
        *reinterpret_cast<uint32_t*>(at + 8 * VT) = pack_bf16(st[mt][nt][2], st[mt][nt][3]);
      }
    }
    fence_proxy_async();  // read by the next snapshot's tensor copy
  };
  store_sb();
  __syncthreads();

  // The sequence's offsets once, in registers: fetch() must not wait on global loads before its copies.
  const int64_t seq_chunk0 = a.chunk_offset[s], seq_t0 = a.seq_start[s], seq_len = a.seq_len[s];
  // An event's copies, issued by the producer thread: W (two boxes), K (two), U (this block's columns), γ.
  // The rows of W and U are the slot's (chunk record, value head) 64; K's are tokens.
  auto fetch = [&](int buf, int64_t c) {
    if (threadIdx.x != kProducer) return;
    RecStage<VT>& st_ = sm.stage[buf];
    uint64_t* bar = &sm.full[buf];
    const int64_t slot_id = (seq_chunk0 + c) * a.HV + hv;
    const int row = int(slot_id * kC), token = int(seq_t0 + c * kC);
    mbar_expect_bytes(bar, kRecStageBytes<VT>);
    tma_load_tile(st_.w, &tma.w, row, bar);
    tma_load_tile(st_.k, &tma.k, h, token, bar);
    tma_load_2d(st_.u, &tma.u, col0, row, bar);
    bulk_load(st_.gam, a.gamma + slot_id * kC, sizeof(float) * kC, bar);
  };
  // Every thread waits for a stage's copies itself, by the parity of the stage's use.
  uint32_t parity = 0;
  auto wait = [&](int buf, int inflight) {
    if (inflight <= 0) return;
    mbar_wait(&sm.full[buf], (parity >> buf) & 1);
    parity ^= 1u << buf;
  };
  // VOut: the thread-constant parts of the stores of v (rows ur + kURows j, 16-byte part up).
  const int ur = threadIdx.x / kUPieces, up = (threadIdx.x % kUPieces) * 8;
  const int u_dst = swz_u<VT>(ur, up);
  const int64_t uw_step = int64_t(a.HV) * (kC * kD);
  bf16* const u_src0 = u_all + (seq_chunk0 * a.HV + hv) * (kC * kD) + ur * kD + col0 + up;
  // A sequence's last chunk, when it is short: K's rows past its end (the next sequence's tokens) are zeroed
  // before they multiply Vh's zero rows, so that they add exact zeros whatever they hold.
  const int64_t short_chunk = seq_len % kC ? seq_len / kC : -1;

  // A short last chunk's K rows past its end, zeroed (block-uniform; the barrier after v̂ orders the zeros
  // before Kᵀ Vh).
  auto zero_short_k = [&](RecStage<VT>& cs, int64_t c) {
    if (c != short_chunk || !math) return;
    const int len = int(seq_len % kC);
    for (int e = len * 8 + threadIdx.x; e < kC * 8; e += kBlockThreads) {  // 16-byte pieces per row
      const int r = e >> 3, p = e & 7;
      *reinterpret_cast<uint4*>(cs.k + r * 64 + p * 8) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(cs.k + kC * 64 + r * 64 + p * 8) = make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async();  // before the stage's next copies overwrite them
  };

  int64_t slot = 0;
  const int vrow = (warp & 3) * 16, vcol = (warp >> 2) * kVCols;  // this warp's tile of v̂
  // This thread's element offsets in the tiles, once (the tiles' k-steps add constants): its W fragment rows
  // at k-steps 0-3 (steps 4-7 are the second sw128 half, kC x 64 elements on, the same swizzle), its Kᵀ
  // fragment, its Sb and Vh fragments, its U pairs (n-tiles 0 .. 2 kNP − 1; the second row half is 8 rows
  // on), its row of v̂ (Vh stores, γ) and its state rows (Sb stores).
  int w_off[4];
  for (int kk = 0; kk < 4; ++kk) w_off[kk] = opaque(a_lane_at(sw128, vrow, kk * 16));
  int k_off[kMT];
  for (int mt = 0; mt < kMT; ++mt) k_off[mt] = opaque(a_t_lane_at(sw128, (warp * kMT + mt) * 16, 0));
  const int b_off = opaque(b_kn_lane(kLdT, 0, 0));
  int u_off[2 * kNP];
  for (int nt = 0; nt < 2 * kNP; ++nt) u_off[nt] = opaque(swz_u<VT>(vrow + gq, vcol + nt * 8 + tq * 2));
  const int v_row = opaque(vrow + gq), vh_off = opaque((vrow + gq) * kLdT + vcol + tq * 2);
  int sb_b_off[kNP];  // Sb's B fragments (k-steps add 16 rows: 16 VT elements)
  for (int np = 0; np < kNP; ++np)
    sb_b_off[np] = opaque(swz_u<VT>((lane & 7) + ((lane >> 3) & 1) * 8, vcol + np * 16 + (lane >> 4) * 8));
  // Chunks [0, safe_upto) have their snapshots' copies issued in an earlier event than the current one.
  int64_t safe_upto = 0;
  float sb_scale = 1.f;  // the state is sb_scale x the state that Sb holds (skipped chunks since the event)
  const float pending = for_each_event<NS>(
      a, sm.mask, sm.decay, place, publish, fetch, wait, write_snapshot, drain,
      tile == 0 ? a.snapshot_chunk + slot_base : nullptr,
      // The skipped chunks' decay into the state; Sb (the last event's snapshot, not yet copied out) stays,
      // and the next event's W Sb is scaled by it instead (W (e^p S) = e^p (W S), rounded differently: the
      // product of bf16(S) scaled in fp32, not the product of bf16(e^p S)). (Until v38 Sb was rewritten here
      // after the snapshot's copy, two barriers, which the tensor copy made a wait for its read.)
      [&](float carried, auto) {
        for (int mt = 0; mt < kMT; ++mt)
          for (int nt = 0; nt < VT / 8; ++nt)
            for (int r = 0; r < 4; ++r) st[mt][nt][r] *= carried;
        sb_scale = carried;
      },
      [&](int buf, int64_t c, float big_gamma, auto flush_snapshot, auto fetch_next) {
        RecStage<VT>& cs = sm.stage[buf];
        if constexpr (Wg) {  // v̂ = U − W Sb as one warpgroup product (64 x 32, k = 128) on warps 0-3
          // With 2 stages, whose copies have one event's lead, the next copies first (the snapshot after
          // them, below). With more, both after the product's issue, the snapshot first (its read of Sb,
          // which the middle barrier waits for, then does not queue behind 36 KB of loads): the producer
          // warp, which issues no product, reaches them at once, and warps 0-3 do their part of the
          // bookkeeping while the product runs (with the publications by the producer warp, 0.5-1 % faster
          // sparse forwards than v42's order, where they came first).
          if constexpr (NS == 2) fetch_next();
          float acc[16] = {};
          const uint64_t sb_desc = sw64_desc(sm.sb);
          if (warp < 4) {
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kD / 16; ++ks)
              wgmma_m64n32k16_ss_t(acc, sw128_desc(cs.w + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep,
                                   sb_desc + ks * kSw64MnMajorStep, ks);
            wgmma_commit();
          }
          if constexpr (NS > 2) {
            flush_snapshot();
            fetch_next();
          }
          // While the product runs: this thread's γ factors and U pairs, which do not depend on it, so that
          // the epilogue below has no shared-memory load between its stores (the compiler keeps a load after
          // a store that may alias it; alternating, they took ~500 cycles per event, ~80 without loads).
          float f[2] = {};
          float2 uu[2][VT / 8] = {};
          int at[2][VT / 8] = {};
#pragma unroll
          for (int half = 0; half < (warp < 4 ? 2 : 0); ++half) {
            const int row = warp * 16 + gq + half * 8;
            f[half] = exp_ftz(big_gamma - cs.gam[row]);
#pragma unroll
            for (int j = 0; j < VT / 8; ++j) {
              at[half][j] = swz_u<VT>(row, j * 8 + tq * 2);
              uu[half][j] = unpack_bf16(*reinterpret_cast<const uint32_t*>(cs.u + at[half][j]));
            }
          }
          if constexpr (NS == 2) flush_snapshot();
          zero_short_k(cs, c);
          if (warp < 4) {
            wgmma_wait_all(acc);
#pragma unroll
            for (int half = 0; half < 2; ++half)
#pragma unroll
              for (int j = 0; j < VT / 8; ++j) {
                const float x0 = fmaf(-sb_scale, acc[4 * j + 2 * half], uu[half][j].x);
                const float x1 = fmaf(-sb_scale, acc[4 * j + 2 * half + 1], uu[half][j].y);
                *reinterpret_cast<uint32_t*>(sm.vh + at[half][j]) = pack_bf16(x0 * f[half], x1 * f[half]);
              }
            fence_proxy_async();  // Vh, read by the state's warpgroup product
          }
        } else {  // v̂ = U − W Sb: this warp's 16 x kVCols tile, k = 128, kSets accumulator sets
          // The next copies first: one thread's few instructions, and the copies' longest lead (measured 4-5
          // % faster than issuing them after the products).
          fetch_next();
          float acc[kSets][2 * kNP][4] = {};
#pragma unroll
          for (int kk = 0; kk < (math ? kD / 16 : 0); ++kk) {
            uint32_t af[4];
            ldsm_x4(af, cs.w + w_off[kk & 3] + (kk >> 2) * (kC * 64));
#pragma unroll
            for (int np = 0; np < kNP; ++np) {
              uint32_t bf[4];
              ldsm_x4_t(bf, sm.sb + sb_b_off[np] + kk * 16 * VT);
              mma(acc[kk % kSets][2 * np], af, bf[0], bf[1]);
              mma(acc[kk % kSets][2 * np + 1], af, bf[2], bf[3]);
            }
          }
          // While the products run: the previous event's snapshot.
          flush_snapshot();
          zero_short_k(cs, c);
#pragma unroll
          for (int half = 0; half < (math ? 2 : 0); ++half) {
            const float f = exp_ftz(big_gamma - cs.gam[v_row + half * 8]);
#pragma unroll
            for (int nt = 0; nt < 2 * kNP; ++nt) {
              uint32_t* u_pair = reinterpret_cast<uint32_t*>(cs.u + u_off[nt] + half * 8 * VT);
              const float2 uu = unpack_bf16(*u_pair);
              float x[2];
              for (int e = 0; e < 2; ++e) {
                const int r = 2 * half + e;
                float ws = acc[0][nt][r];
                if constexpr (kSets >= 2) ws += acc[1][nt][r];
                if constexpr (kSets == 4) ws += acc[2][nt][r] + acc[3][nt][r];
                x[e] = fmaf(-sb_scale, ws, e ? uu.y : uu.x);
              }
              if constexpr (VOut) *u_pair = pack_bf16(x[0], x[1]);  // v over U: this thread read the pair
              *reinterpret_cast<uint32_t*>(sm.vh + vh_off + half * 8 * kLdT + nt * 8) =
                  pack_bf16(x[0] * f, x[1] * f);
            }
          }
        }
        if constexpr (VOut) fence_proxy_async();  // v over U, before the stage's next copies
        // The snapshots whose copies were issued before this event (all but the newest group: the previous
        // event's, issued above) are waited for when a publication is due, so that the wait is for copies
        // issued an event ago; they cover the chunks up to the previous event's (and VOut's v, stored after
        // that event's barrier, up to it too).
        const bool due = safe_upto - publish.published >= kPublishEvery;  // block-uniform
        if (due && threadIdx.x == kProducer) bulk_wait_written<1>();
        sb_reads_done();
        __syncthreads();
        if (due) publish(safe_upto);
        safe_upto = c + 1;
        if constexpr (VOut)
#pragma unroll
          for (int j = 0; j < (math ? kUCopies : 0); ++j)
            *reinterpret_cast<uint4*>(u_src0 + c * uw_step + j * kURows * kD) =
                *reinterpret_cast<const uint4*>(cs.u + u_dst + j * kURows * VT);
        // S = e^Γ S + Kᵀ Vh on the math warps: as warpgroup products, warpgroup g the state rows 64 g.. (Wg),
        // or as this warp's kMT x 16 rows, VT columns, k = 64 (with one m-tile the second half of k goes into
        // a second set: two mma chains per tile).
        if (math) {
          if constexpr (Wg) {
            const float decay = exp_ftz(big_gamma);
            float(&stf)[16] = *reinterpret_cast<float(*)[16]>(&st[0][0][0]);
            uint32_t af[kC / 16][4];
#pragma unroll
            for (int k0 = 0; k0 < kC / 16; ++k0) load_a_t_at(af[k0], cs.k, sw128, warp * 16, k0 * 16);
#pragma unroll
            for (int e = 0; e < 16; ++e) stf[e] *= decay;
            const uint64_t vh_desc = sw64_desc(sm.vh);
            wgmma_fence();
#pragma unroll
            for (int k0 = 0; k0 < kC / 16; ++k0)
              wgmma_m64n32k16_rs_t(stf, af[k0], vh_desc + k0 * kSw64MnMajorStep);
            wgmma_commit();
            wgmma_wait_all(stf);
          } else {
            const float decay = exp_ftz(big_gamma);
            [[maybe_unused]] float st2[kMT == 1 ? VT / 8 : 1][4] = {};
            for (int mt = 0; mt < kMT; ++mt)
              for (int nt = 0; nt < VT / 8; ++nt)
                for (int r = 0; r < 4; ++r) st[mt][nt][r] *= decay;
#pragma unroll
            for (int k0 = 0; k0 < kC; k0 += 16) {
              uint32_t af[kMT][4];
#pragma unroll
              for (int mt = 0; mt < kMT; ++mt) ldsm_x4_t(af[mt], cs.k + k_off[mt] + k0 * 64);
#pragma unroll
              for (int j = 0; j < VT / 16; ++j) {
                uint32_t bf[4];
                ldsm_x4_t(bf, sm.vh + b_off + k0 * kLdT + 16 * j);
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                  if constexpr (kMT == 1) {
                    float(&d)[VT / 8][4] = k0 < kC / 2 ? st[0] : st2;
                    mma(d[2 * j], af[0], bf[0], bf[1]);
                    mma(d[2 * j + 1], af[0], bf[2], bf[3]);
                  } else {
                    mma(st[mt][2 * j], af[mt], bf[0], bf[1]);
                    mma(st[mt][2 * j + 1], af[mt], bf[2], bf[3]);
                  }
                }
              }
            }
            if constexpr (kMT == 1)
              for (int nt = 0; nt < VT / 8; ++nt)
                for (int r = 0; r < 4; ++r) st[0][nt][r] += st2[nt][r];
          }
        }
        // Sb = bf16(S): every read of the old Sb (W Sb, the snapshot's copy) is behind the barrier.
        store_sb();
        sb_scale = 1.f;
      },
      slot);
  if (a.final_state && math) {
    const float carried = exp_ftz(pending);
    for (int mt = 0; mt < kMT; ++mt)
      for (int nt = 0; nt < VT / 8; ++nt)
        for (int half = 0; half < 2; ++half) {
          const int d = (warp * kMT + mt) * 16 + gq + half * 8, col = col0 + nt * 8 + tq * 2;
          *reinterpret_cast<float2*>(a.final_state + ((s * a.HV + hv) * kD + d) * V + col) =
              make_float2(st[mt][nt][2 * half] * carried, st[mt][nt][2 * half + 1] * carried);
        }
  }
  if (tile == 0 && threadIdx.x == 0) a.snapshot_count[s * a.HV + hv] = int32_t(slot + 1);
}

// This thread's part of a 128 x 64 state block (columns col0..) as a warpgroup's two accumulators: rows
// 64 mt + row0 (+ 8), columns col0 + 8 j + 2 tq (+ 1), st[mt][4 j + (i & 1) + 2 (half)], from `from`
// ([128][128] fp32) or zero ...
__device__ __forceinline__ void load_state_block(float (&st)[2][32], const float* from, int row0, int col0) {
  const int tq = threadIdx.x & 3;
  for (int mt = 0; mt < 2; ++mt)
    for (int i = 0; i < 32; ++i) {
      const int d = mt * 64 + row0 + ((i >> 1) & 1) * 8, col = col0 + (i >> 2) * 8 + tq * 2 + (i & 1);
      st[mt][i] = from ? from[d * kD + col] : 0.f;
    }
}
// ... and into `to`, times `factor`.
__device__ __forceinline__ void store_state_block(float* to, const float (&st)[2][32], float factor, int row0,
                                                  int col0) {
  const int tq = threadIdx.x & 3;
  for (int mt = 0; mt < 2; ++mt)
    for (int j = 0; j < 8; ++j)
      for (int half = 0; half < 2; ++half) {
        const int d = mt * 64 + row0 + half * 8, col = col0 + j * 8 + tq * 2;
        *reinterpret_cast<float2*>(to + d * kD + col) =
            make_float2(st[mt][4 * j + 2 * half] * factor, st[mt][4 * j + 2 * half + 1] * factor);
      }
}
// S = e^Γ S + Kᵀ Vh for a warpgroup's 128 x 64 state block (two accumulators of 64 rows, k = 64): Kᵀ's
// fragments from the sw128 tile k (rows 16 w.. of each 64-row half, w this warp's rank in its warpgroup), Vh
// through its descriptor. Issued and committed, not waited for.
__device__ __forceinline__ void issue_state_update(float (&st)[2][32], const bf16* k, uint64_t vh_desc,
                                                   float big_gamma, int warp) {
  const float decay = exp_ftz(big_gamma);
  uint32_t af[2][kC / 16][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int k0 = 0; k0 < kC / 16; ++k0) load_a_t_at(af[mt][k0], k, sw128, mt * 64 + warp * 16, k0 * 16);
  for (int mt = 0; mt < 2; ++mt)
    for (int e = 0; e < 32; ++e) st[mt][e] *= decay;
  wgmma_fence();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int k0 = 0; k0 < kC / 16; ++k0)
      wgmma_m64n64k16_rs_t(st[mt], af[mt][k0], vh_desc + k0 * kSwMnMajorStep, 1);
  wgmma_commit();
}

// ---- the recurrence on one warpgroup with wgmma: 64 V columns per block, 4 warps. Per event both products
// are warpgroup products with A from registers (this warp's ldmatrix fragments: W's rows 16w.., Kᵀ's rows
// 16w.. of each 64-row half) and B read once per warpgroup from shared memory (Sb, Vh: sw128, mn-major),
// where the 4-warp mma.sync block reads B once per warp. The state is the second product's accumulator: rows
// 64 mt + 16 w + gq (+ 8), columns 8 j + 2 tq (+ 1), st[mt][4 j + (r & 1) + 2 (r >> 1)].
constexpr int kWgThreads = 128, kWgCols = 64, kLdWgU = kWgCols + 8;
struct alignas(1024) WgStage {
  bf16 w[kC * kD];  // sw128 (two 64-column halves)
  bf16 k[kC * kD];  // sw128
  bf16 u[kC * kLdWgU];
  float gam[kC];
};
template <int NS>
struct WgSmem {
  WgStage stage[NS];
  bf16 sb[kD * kWgCols];  // bf16(S), sw128: 128 rows of one 64-column half (k of W Sb along the rows)
  bf16 vh[kC * kWgCols];  // e^{Γ−γ} ⊙ v̂, sw128
  uint8_t mask[kWindow];
  float decay[kWindow];
};
template <int NS>
constexpr size_t wg_smem_bytes() {
  return sizeof(WgSmem<NS>) + 1024;  // and the alignment of the block's region to 1024 bytes
}
template <int NS, bool VOut>
__global__ void __launch_bounds__(kWgThreads)
    recurrence_wg_kernel(RecurrenceArgs a, bf16* u_all, const bf16* w_all,
                         const __grid_constant__ RecTmaMaps) {
  constexpr int kTiles = kD / kWgCols, kFlags = kWgCols / kTcTile;
  wait_for_previous_grid();
  const ChainPlace place = chain_place<kTiles>(a);
  const int64_t s = place.s, slot_base = place.slot_base;
  const int hv = place.hv, tile = place.tile;
  const int col0 = tile * kWgCols;
  const int h = hv / (a.HV / a.H);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  WgSmem<NS>& sm = *reinterpret_cast<WgSmem<NS>*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
  const bf16* kp = static_cast<const bf16*>(a.k);
  let_next_grid_start();
  Publisher<kFlags> publish{a.progress + progress_flag_index(s, a.HV, hv, kVTiles, tile * kFlags)};
  const int row0 = warp * 16 + gq;  // this thread's rows: row0 (+ 8) of each 64-row half
  float st[2][32];
  load_state_block(st, a.initial_state ? a.initial_state + (s * a.HV + hv) * kD * kD : nullptr, row0, col0);
  auto store_sb = [&]() {
    for (int mt = 0; mt < 2; ++mt) store_acc_sw128(sm.sb + mt * kC * kWgCols, st[mt], 0);
  };
  // Snapshot `slot` from Sb: 128 rows x 8 16-byte pieces, eight per thread, eight threads a row.
  auto write_snapshot = [&](int64_t slot) {
    bf16* dst = reinterpret_cast<bf16*>(a.snapshots) + (slot_base + slot) * kD * kD + col0;
#pragma unroll
    for (int i = 0; i < kD * 8 / kWgThreads; ++i) {
      const int e = i * kWgThreads + int(threadIdx.x), row = e >> 3, col = (e & 7) * 8;
      *reinterpret_cast<uint4*>(dst + row * kD + col) =
          *reinterpret_cast<const uint4*>(sm.sb + sw128(row, col));
    }
  };
  store_sb();
  fence_proxy_async();  // Sb, written by ordinary stores, is read by the first event's wgmma
  __syncthreads();

  const int64_t seq_chunk0 = a.chunk_offset[s], seq_t0 = a.seq_start[s], seq_len = a.seq_len[s];
  const int64_t uw_step = int64_t(a.HV) * (kC * kD);
  const bf16* w_src0 = w_all + (seq_chunk0 * a.HV + hv) * (kC * kD);
  bf16* const u_src0 = u_all + (seq_chunk0 * a.HV + hv) * (kC * kD) + col0;
  const bf16* k_src0 = kp + (seq_t0 * a.H + h) * kD;
  const int64_t k_row = int64_t(a.H) * kD;
  const int ur = threadIdx.x >> 3, up = (threadIdx.x & 7) * 8;  // U: rows ur + 16 j, piece up
  // Every thread's cp.async (TMA for W, K and γ, as the 32-column blocks take them, measured 1-1.5 % slower
  // here: 4 x 8K dense 1.201 → 1.220 ms).
  auto fetch = [&](int buf, int64_t c) {
    const int len = int(min_i64(kC, seq_len - c * kC));
    WgStage& d = sm.stage[buf];
    copy_rows_at<kWgThreads, true>(d.w, sw128, w_src0 + c * uw_step, kD, kC);
    copy_rows_at<kWgThreads, true>(d.k, sw128, k_src0 + c * kC * k_row, k_row, len);
#pragma unroll
    for (int j = 0; j < kC / 16; ++j)
      cp_async16(d.u + (ur + 16 * j) * kLdWgU + up, u_src0 + c * uw_step + (ur + 16 * j) * kD + up, true);
    if (threadIdx.x < kC / 4)
      cp_async16(d.gam + threadIdx.x * 4,
                 a.gamma + (seq_chunk0 * a.HV + hv) * kC + c * a.HV * kC + threadIdx.x * 4, true);
    cp_async_commit();
  };
  const uint64_t sb_desc = sw128_desc(sm.sb), vh_desc = sw128_desc(sm.vh);

  int64_t slot = 0;
  auto wait = [](int, int inflight) { cp_async_wait_but(inflight - 1); };
  const float pending = for_each_event<NS>(
      a, sm.mask, sm.decay, place, publish, fetch, wait, write_snapshot, [] {},
      tile == 0 ? a.snapshot_chunk + slot_base : nullptr,
      [&](float carried, auto flush_snapshot) {  // the skipped chunks' decay into the state and Sb
        for (int mt = 0; mt < 2; ++mt)
          for (int e = 0; e < 32; ++e) st[mt][e] *= carried;
        flush_snapshot();
        __syncthreads();
        store_sb();
        fence_proxy_async();
        __syncthreads();
      },
      [&](int buf, int64_t c, float big_gamma, auto flush_snapshot, auto fetch_next) {
        WgStage& cs = sm.stage[buf];
        float acc[32];
        {  // v̂ = U − W Sb: rows 16w.. of W from registers, Sb from shared memory, k = 128
          uint32_t af[kD / 16][4];
#pragma unroll
          for (int kk = 0; kk < kD / 16; ++kk) load_a_at(af[kk], cs.w, sw128, warp * 16, kk * 16);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kD / 16; ++kk)
            wgmma_m64n64k16_rs_t(acc, af[kk], sb_desc + kk * kSwMnMajorStep, kk);
          wgmma_commit();
        }
        // While the product runs: the previous event's snapshot, the next copies.
        flush_snapshot();
        fetch_next();
        wgmma_wait_all(acc);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = row0 + half * 8;
          const float f = exp_ftz(big_gamma - cs.gam[r]);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int col = j * 8 + tq * 2;
            uint32_t* u_pair = reinterpret_cast<uint32_t*>(cs.u + r * kLdWgU + col);
            const float2 uu = unpack_bf16(*u_pair);
            const float x0 = uu.x - acc[4 * j + 2 * half], x1 = uu.y - acc[4 * j + 2 * half + 1];
            if constexpr (VOut) *u_pair = pack_bf16(x0, x1);
            *reinterpret_cast<uint32_t*>(sm.vh + sw128(r, col)) = pack_bf16(x0 * f, x1 * f);
          }
        }
        fence_proxy_async();
        __syncthreads();
        if (c + 1 - publish.published >= kPublishEvery) publish(VOut ? c : c + 1);
        if constexpr (VOut)
#pragma unroll
          for (int j = 0; j < kC / 16; ++j)
            *reinterpret_cast<uint4*>(u_src0 + c * uw_step + (ur + 16 * j) * kD + up) =
                *reinterpret_cast<const uint4*>(cs.u + (ur + 16 * j) * kLdWgU + up);
        // S = e^Γ S + Kᵀ Vh
        issue_state_update(st, cs.k, vh_desc, big_gamma, warp);
        wgmma_wait_all(st[0]);
        wgmma_wait_all(st[1]);
        store_sb();
        fence_proxy_async();
      },
      slot);
  if (a.final_state)
    store_state_block(a.final_state + (s * a.HV + hv) * kD * kD, st, exp_ftz(pending), row0, col0);
  if (tile == 0 && threadIdx.x == 0) a.snapshot_count[s * a.HV + hv] = int32_t(slot + 1);
}

// ---- outputs: per (group, value head), 256 threads, all 128 V columns. Per chunk of the group, with S its
// start state (S_loc; the first chunk's is the snapshot times e^{pending}):
//   O = scale (e^γ ⊙ (Q S) + A (U − W S)) = scale (Q̃ S + A U),
//   A = Q Kᵀ ⊙ D ⊙ lower_incl,  Q̃ = e^γ ⊙ Q − A W,
// so that A, Q̃ and P = A U are computed from the chunk's own operands while the block waits for the
// recurrence, and only Q̃ S is left once the state arrives (one product instead of W S, Q S and A v).
// Warp w: rows 16 (w & 3).., columns 64 (w >> 2)..  With G > 1 the fp32 S_loc is kept in shared memory and
// updated by S_loc = e^Γ S_loc + Kᵀ (e^{Γ−γ} ⊙ (U − W S)) (warp w: rows 16w.., all 128 columns).
// VIn (no form the plan picks): the recurrence has left each chunk's v = U − W S in
// U's place, so the block reads v with the snapshot, once the recurrence has passed, instead of W and U, and
// computes O = scale (e^γ ⊙ (Q S) + A v): two products after A instead of three.
struct OutSmem {
  bf16 sb[kD * kLd];
  bf16 q[kC * kLd];  // Q, then Q̃ once A is done, then O (bf16) on its way out
  bf16 k[kC * kLd];
  bf16 w[kC * kLd];  // W, then e^{Γ−γ} ⊙ (U − W S) for the in-group update (G > 1)
  bf16 u[kC * kLd];
  bf16 am[kC * kLdC];
  float gam[kC];
};
// Wg (G = 1, see output_kernel_for): the same operands in sw128 tiles, read by warpgroup products (wgmma):
// warpgroup g computes O's columns 64 g.. (its warp w the rows 16 (w & 3)..: the mma.sync blocks' warp
// tiles), both warpgroups A = Q Kᵀ ⊙ D whole, in registers, as the A operand of the products with U, W and v.
// Each operand is read once per warpgroup instead of once per warp.
struct alignas(1024) OutWgSmem {
  bf16 sb[kD * kD];  // sw128_rows<kD>: two halves of 128 rows (k of Q̃ S along the rows)
  bf16 q[kC * kD];   // Q, then Q̃ (each warpgroup its own half), then O (bf16) on its way out
  bf16 k[kC * kD];
  bf16 w[kC * kD];
  bf16 u[kC * kD];  // U, or v (VIn)
  float gam[kC];
  uint64_t bar[3];  // the tensor copies of Q, K, γ; of W, U; of the snapshot (not VIn)
};

// Each output block ends here. The last one to finish waits for the grid before it (the recurrence, or the
// mask expansion beside it, whose last block waits for the recurrence) to complete, so that the output grid
// completes after the recurrence and the work behind it in the stream may rely on all of them (the other
// blocks leave at once: their multiprocessors go to the next output blocks while the recurrence runs).
__device__ __forceinline__ void finish_output_block(int32_t* blocks_done) {
  if (threadIdx.x == 0 && atomicAdd(blocks_done, 1) == int32_t(gridDim.x) - 1) wait_for_previous_grid();
}

// The factor of A = Q Kᵀ ⊙ D ⊙ lower_incl at row i, column j: e^{γ_i − γ_j} on and below the diagonal, else
// 0 (e^−inf: no branch).
__device__ __forceinline__ float causal_decay(int i, int j, float gamma_i, const float* gam) {
  return exp_ftz(j <= i ? gamma_i - gam[j] : -INFINITY);
}
// One warp's m16 x (8 NT) accumulator tile at (m0, n0), rounded to bf16, into a tile whose element (r, c)
// lies at dst + at(r, c) (row-major or sw128).
template <int NT, class At>
__device__ __forceinline__ void store_tile_bf16_in(bf16* dst, At at, int m0, int n0,
                                                   const float (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  for (int nt = 0; nt < NT; ++nt)
    for (int half = 0; half < 2; ++half)
      *reinterpret_cast<uint32_t*>(dst + at(m0 + gq + half * 8, n0 + nt * 8 + tq * 2)) =
          pack_bf16(acc[nt][2 * half], acc[nt][2 * half + 1]);
}

// Runs (G = 1, not VIn): each block takes a run of a.G chunks (the table's groups), each chunk from its own
// start state, whose record (snapshot slot, pending decay) is per chunk.
// The kernels are output_tc_kernel (mma.sync) and output_wg_kernel (the warpgroup form), below.
template <class Out, bool VIn, bool Runs, bool Wg, bool Tma>
__device__ __forceinline__ void output_tc_block(OutputArgs a, const bf16* u_all, const bf16* w_all,
                                                const RecTmaMaps& tma) {
  static_assert(!(VIn && Runs), "v through memory takes one chunk per block");
  static_assert(!Tma || (Wg && !VIn), "tensor copies only in the warpgroup form without v from memory");
  // The copies unrolled, except where the blocks run beside a dense recurrence (VIn): issued back to back
  // there, they slowed the chains beside them by more than the blocks gained (dense 32K 1.44 → 1.50 ms,
  // packed and sparse runs 1-2 % faster). The warpgroup blocks (Wg) unroll them everywhere: their loop form
  // spilled 116 bytes at 128 registers (v35), and the B = 1 dense runs beside the chains measured no slower.
  constexpr bool kUnrolled = !VIn || Wg;
  constexpr int kUnroll = kUnrolled ? 8 : 1;  // the same for the stores of O
  // Tma: the tiles by tensor copies (issued by thread 0, each group completing on its mbarrier, whose phase
  // the block counts), else by every thread's cp.async; see output_kernel_for for where.
  // Blocks in the group table's order (the value heads of one group side by side; a packed batch's sequences
  // round-robin, see table_kernel), so that the blocks the scheduler hands out while the recurrence runs are
  // the ones its progress reaches first.
  const int hv = int(blockIdx.x % a.HV);
  const GroupInfo gi = load_group_info(a.group_info, blockIdx.x / a.HV);
  if (gi.s < 0) return finish_output_block(a.blocks_done);
  const int64_t gid = gi.id;
  const int V = kD;
  const int h = hv / (a.HV / a.H);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  const int wm = (warp & 3) * 16, wn = (warp >> 2) * 64;
  const int64_t s = gi.s, n = gi.n, first = gi.first;
  const int64_t last = first + gi.count;
  const int64_t slot_base = snapshot_slot_base(gi.chunk0, s, a.HV, hv, n);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using Smem = std::conditional_t<Wg, OutWgSmem, OutSmem>;
  Smem& sm =
      *reinterpret_cast<Smem*>(Wg ? smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023) : smem_raw);
  // [kD][kD] fp32 behind OutSmem, only when G > 1 (never in the warpgroup form)
  float* sf = Wg ? nullptr : reinterpret_cast<float*>(smem_raw + sizeof(OutSmem));
  if constexpr (Tma) {
    if (threadIdx.x == 0) {
      for (int b = 0; b < 3; ++b) mbar_init(&sm.bar[b], 1);
      mbar_init_fence();
      fence_proxy_async();
    }
  }
  // Where element (r, c) of a 64-row tile and of the 128-row state lies.
  auto tile_at = [](int r, int c) { return Wg ? sw128(r, c) : r * kLd + c; };
  auto state_at = [](int r, int c) { return Wg ? sw128_rows<kD>(r, c) : r * kLd + c; };
  constexpr bool runs = Runs;
  const bool multi = !Wg && last - first > 1 && !runs;
  const bf16* qp = static_cast<const bf16*>(a.q);
  const bf16* kp = static_cast<const bf16*>(a.k);
  Out* op = static_cast<Out*>(a.o);
  // A chunk's own operands (inputs, or written before the recurrence started) in two copy groups: what A
  // needs (Q, K, γ), then W and U (VIn: one group, v travels with the snapshot).
  auto fetch_qk = [&](int64_t c) {
    const auto [t0, len, cslot] = chunk_place(gi, c, kC, a.HV, hv);
    if constexpr (Tma) {
      if (threadIdx.x == 0) {
        uint64_t* bar = &sm.bar[0];
        mbar_expect_bytes(bar, 2 * kTileBytes + kC * sizeof(float));
        tma_load_tile(sm.q, &tma.q, h, int(t0), bar);
        tma_load_tile(sm.k, &tma.k, h, int(t0), bar);
        bulk_load(sm.gam, a.gamma + cslot * kC, kC * sizeof(float), bar);
      }
      return;
    }
    copy_rows_at<kOutThreads, kUnrolled>(sm.q, tile_at, qp + (t0 * a.H + h) * kD, int64_t(a.H) * kD, len);
    copy_rows_at<kOutThreads, kUnrolled>(sm.k, tile_at, kp + (t0 * a.H + h) * kD, int64_t(a.H) * kD, len);
    if (threadIdx.x < kC / 4)
      cp_async16(sm.gam + threadIdx.x * 4, a.gamma + cslot * kC + threadIdx.x * 4, true);
    cp_async_commit();
  };
  auto fetch_wu = [&](int64_t c) {
    if constexpr (Tma) {
      if (threadIdx.x == 0) {
        uint64_t* bar = &sm.bar[1];
        const int row = int(chunk_place(gi, c, kC, a.HV, hv).cslot * kC);
        mbar_expect_bytes(bar, 2 * kTileBytes);
        tma_load_tile(sm.w, &tma.w, row, bar);
        tma_load_tile(sm.u, &tma.u_rows, row, bar);
      }
    } else if constexpr (!VIn) {
      const int64_t cslot = chunk_place(gi, c, kC, a.HV, hv).cslot;
      copy_rows_at<kOutThreads, kUnrolled>(sm.w, tile_at, w_all + cslot * kC * kD, kD, kC);
      copy_rows_at<kOutThreads, kUnrolled>(sm.u, tile_at, u_all + cslot * kC * kD, kD, kC);
      cp_async_commit();
    }
  };
  // The group's record (written by the mask expansion: before the recurrence began, or beside it, then
  // waited for here): the snapshot it starts from and e^{pending}, a factor that the first chunk applies to
  // Q̃ (and that S_loc takes in fp32 when G > 1).
  const int64_t rec0 = runs ? (gi.chunk0 + first) * a.HV + hv : gid * a.HV + hv;
  if (a.records_expected > 0) {  // the records written beside the recurrence: wait until all are
    if (threadIdx.x == 0)
      while (acquire_progress(a.records_done) < a.records_expected) __nanosleep(128);
    __syncthreads();
  }
  const int32_t start_slot = __ldcg(a.group_slot + rec0);
  float carried = exp_ftz(__ldcg(a.group_log_decay + rec0));
  // Runs: the next chunk's record, loaded a chunk ahead; the slot of the snapshot in sm.sb.
  int32_t next_slot = 0, sb_slot = start_slot;
  float next_log_decay = 0.f;
  auto load_record = [&](int64_t c) {
    if (c < last) {
      next_slot = __ldcg(a.group_slot + rec0 + (c - first) * a.HV);
      next_log_decay = __ldcg(a.group_log_decay + rec0 + (c - first) * a.HV);
    }
  };
  if (runs) load_record(first + 1);
  // The snapshot (bf16, copied as is; VIn: and the chunk's v), written by the recurrence while this grid
  // runs: read through L2 (cp.async.cg, or a tensor copy), never from a multiprocessor's L1, which another
  // block may have filled before the write.
  // (By tensor copy: after the acquire of the flags that said it is there, which a proxy fence orders before
  // the copy.)
  uint32_t phase_qk = 0, phase_wu = 0, phase_sb = 0;  // of the mbarriers (Tma)
  bool sb_coming = false;                             // a snapshot's tensor copy is in flight
  auto copy_snapshot = [&](int32_t slot) {
    if constexpr (Tma) {
      if (threadIdx.x == 0) {
        uint64_t* bar = &sm.bar[2];
        const int row = int((slot_base + slot) * kD);
        fence_proxy_async_global();
        mbar_expect_bytes(bar, 2 * kTileBytes);
        tma_load_tile<kD>(sm.sb, &tma.snap_rows, row, bar);
      }
      sb_coming = true;
    } else {
      copy_rows_at<kOutThreads, kUnrolled>(
          sm.sb, state_at, reinterpret_cast<const bf16*>(a.snapshots) + (slot_base + slot) * kD * V, kD, kD,
          kD);
    }
  };
  auto fetch_state = [&]() {
    copy_snapshot(start_slot);
    if constexpr (VIn)
      copy_rows_at<kOutThreads, kUnrolled>(
          sm.u, tile_at, u_all + chunk_place(gi, first, kC, a.HV, hv).cslot * kC * kD, kD, kC);
    cp_async_commit();
  };
  // The flags of the head's four 32-column parts, one thread each: has the recurrence passed this group?
  const int32_t* flags = a.progress + progress_flag_index(s, a.HV, hv, kVTiles, 0);
  // Waits until the recurrence has passed chunk c (its flags are beyond c).
  auto wait_for_state = [&](int64_t c) {
    if (threadIdx.x < kVTiles)
      while (acquire_progress(flags + threadIdx.x) <= c) __nanosleep(256);
    __syncthreads();
  };
  // The first chunk's copy groups, in the order they are committed; `qk_behind` and `wu_behind` count the
  // groups committed after Q, K, γ's and after W and U's (VIn: after the state's, which brings v), for the
  // waits below.
  int qk_behind = 1, wu_behind = 0;
  if constexpr (VIn) {
    // Q, K, γ leave before the flags are read (one round trip sooner), then the state and v, which the two
    // products after A need.
    fetch_qk(first);
    wait_for_state(first);
    fetch_state();
  } else {
    // If the recurrence has passed the group, the state is copied first, ahead of the chunk's operands (its
    // copy would otherwise start last and end after the products that do not need it); if not, the operands
    // travel while the block waits.
    const bool ready =
        __syncthreads_and(threadIdx.x >= kVTiles || acquire_progress(flags + threadIdx.x) > first);
    if (ready) fetch_state();
    fetch_qk(first);
    fetch_wu(first);
    if (!ready) {
      wait_for_state(first);
      fetch_state();
    }
    qk_behind = ready ? 1 : 2;
    wu_behind = ready ? 0 : 1;
  }
  if (multi) {
    cp_async_wait_all();
    __syncthreads();
    for (int e = threadIdx.x; e < kD * kD / 2; e += blockDim.x) {
      const int d = e >> 6, col = (e & 63) * 2;
      const float2 x = unpack_bf16(*reinterpret_cast<const uint32_t*>(sm.sb + d * kLd + col));
      sf[d * kD + col] = x.x * carried;
      sf[d * kD + col + 1] = x.y * carried;
    }
  }
  for (int64_t c = first; c < last; ++c) {
    const auto [t0, len, cslot] = chunk_place(gi, c, kC, a.HV, hv);
    if (c > first && runs) {
      if constexpr (Tma) fence_proxy_async();  // O's stores through Q's tile before its next tensor copy
      __syncthreads();                         // every warp is done with the chunk before's tiles
      fetch_qk(c);
      fetch_wu(c);
      carried = exp_ftz(next_log_decay);
      qk_behind = 1;
      wu_behind = 0;
      if (next_slot != sb_slot) {  // an event in the chunk before: its snapshot, once the recurrence is past
        sb_slot = next_slot;
        wait_for_state(c);
        copy_snapshot(sb_slot);
        cp_async_commit();
        qk_behind = 2;
        wu_behind = 1;
      }
      load_record(c + 1);
    } else if (c > first) {  // G > 1: never the warpgroup form, so never tensor copies
      fetch_qk(c);
      fetch_wu(c);
    }
    // Q, K, γ of this chunk; W and U, and the first chunk's state if committed after them, may still travel.
    // (A later chunk's groups: Q, K, γ, then W and U.)
    if (c > first && !runs) qk_behind = VIn ? 0 : 1, wu_behind = 0;
    if constexpr (Tma) {
      mbar_wait(&sm.bar[0], phase_qk);
      phase_qk ^= 1;
      if (len < kC) {  // the tokens after a short chunk's end, which the tensor copies bring
        zero_rows_sw128(sm.q, len);
        zero_rows_sw128(sm.k, len);
        fence_proxy_async();
      }
    } else {
      cp_async_wait_but<2>(qk_behind);
      if constexpr (Wg) fence_proxy_async();  // the copies, read by wgmma
    }
    __syncthreads();
    float acc[8][4] = {};  // this warp's 16 x 64 tile of O: rows wm.., columns wn..
    if constexpr (Wg) {
      float(&o)[32] = reinterpret_cast<float(&)[32]>(acc);
      // A = Q Kᵀ ⊙ D ⊙ lower_incl, whole (rows wm.. of this warp), as bf16 A fragments over k = 64.
      uint32_t af[kC / 16][4];
      {
        float x[32];
        abt_product(x, sm.q, sm.k);
        for (int half = 0; half < 2; ++half) {
          const int i = wm + gq + half * 8;
          const float gi = sm.gam[i];
          for (int nt = 0; nt < 8; ++nt) {
            const int j = nt * 8 + tq * 2;
            x[4 * nt + 2 * half] *= causal_decay(i, j, gi, sm.gam);
            x[4 * nt + 2 * half + 1] *= causal_decay(i, j + 1, gi, sm.gam);
          }
        }
        for (int ks = 0; ks < kC / 16; ++ks)
          for (int f = 0; f < 4; ++f) af[ks][f] = pack_bf16(x[8 * ks + 2 * f], x[8 * ks + 2 * f + 1]);
      }
      if constexpr (Tma) {
        mbar_wait(&sm.bar[1], phase_wu);
        phase_wu ^= 1;
      } else {
        cp_async_wait_but(wu_behind);
      }
      fence_proxy_async();
      __syncthreads();  // W and U (VIn: S and v); both warpgroups are done reading Q
      // d (+)= X S over k = 128: X in sm.q (Q or Q̃, k-major), S this warpgroup's half of Sb (mn-major).
      auto times_state = [&](float(&d)[32], bool accumulate) {
        const uint64_t state = sw128_desc(sm.sb + (wn >> 6) * (kD * 64));
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kD / 16; ++ks)
          wgmma_m64n64k16_ss_t(d, sw128_desc(sm.q + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep,
                               state + ks * kSwMnMajorStep, accumulate || ks);
        wgmma_commit();
        wgmma_wait_all(d);
      };
      if constexpr (VIn) {  // O = scale (carried e^γ ⊙ (Q S) + A v)
        times_state(o, false);
        for (int half = 0; half < 2; ++half) {
          const float e = carried * exp_ftz(sm.gam[wm + gq + half * 8]);
          for (int nt = 0; nt < 8; ++nt)
            for (int j = 0; j < 2; ++j) o[4 * nt + 2 * half + j] *= e;
        }
        rs_product(o, af, sm.u, wn, true);
      } else {
        // Q̃ = carried (e^γ ⊙ Q − A W) over this warpgroup's half of Q, P = A U (in O's accumulators), then
        // O = scale (Q̃ Sb + P) once both halves of Q̃ and Sb are there. (One product at a time: 128
        // registers.)
        {
          float aw[32];
          rs_product(aw, af, sm.w, wn);
          for (int half = 0; half < 2; ++half) {
            const int i = wm + gq + half * 8;
            const float e = exp_ftz(sm.gam[i]);
            // The row's eight pairs of Q read before any is written (read after a store, each load would
            // wait for it).
            uint32_t qx[8];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
              qx[nt] = *reinterpret_cast<const uint32_t*>(sm.q + sw128(i, wn + nt * 8 + tq * 2));
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
              const float2 x = unpack_bf16(qx[nt]);
              *reinterpret_cast<uint32_t*>(sm.q + sw128(i, wn + nt * 8 + tq * 2)) =
                  pack_bf16(carried * (e * x.x - aw[4 * nt + 2 * half]),
                            carried * (e * x.y - aw[4 * nt + 2 * half + 1]));
            }
          }
        }
        rs_product(o, af, sm.u, wn);
        if constexpr (Tma) {
          if (sb_coming) {
            mbar_wait(&sm.bar[2], phase_sb);
            phase_sb ^= 1;
            sb_coming = false;
          }
        } else {
          cp_async_wait_all();
        }
        fence_proxy_async();
        __syncthreads();  // Q̃ and Sb
        times_state(o, true);
      }
    } else {
      // A = Q Kᵀ ⊙ D ⊙ lower_incl: rows wm.., columns 32 (w >> 2)..
      {
        float qk[4][4] = {};
        const int an = (warp >> 2) * 32;
        warp_tile_mma<2, kD, false, true>(qk, sm.q, kLd, wm, sm.k, kLd, an);
        for (int nt = 0; nt < 4; ++nt)
          for (int half = 0; half < 2; ++half) {
            const int i = wm + gq + half * 8, j = an + nt * 8 + tq * 2;
            const float gi = sm.gam[i];
            const float x0 = qk[nt][2 * half] * causal_decay(i, j, gi, sm.gam);
            const float x1 = qk[nt][2 * half + 1] * causal_decay(i, j + 1, gi, sm.gam);
            *reinterpret_cast<uint32_t*>(sm.am + i * kLdC + j) = pack_bf16(x0, x1);
          }
      }
      cp_async_wait_but(wu_behind);
      __syncthreads();      // A, W and U (VIn: S and v); every warp is done reading Q
      if constexpr (VIn) {  // O = scale (carried e^γ ⊙ (Q S) + A v)
        warp_tile_mma<4, kD, false, false>(acc, sm.q, kLd, wm, sm.sb, kLd, wn);
        for (int half = 0; half < 2; ++half) {
          const float e = carried * exp_ftz(sm.gam[wm + gq + half * 8]);
          for (int nt = 0; nt < 8; ++nt)
            for (int j = 0; j < 2; ++j) acc[nt][2 * half + j] *= e;
        }
        warp_tile_mma<4, kC, false, false>(acc, sm.am, kLdC, wm, sm.u, kLd, wn);
      } else {
        // P = A U (fp32, in registers) and Q̃ = carried (e^γ ⊙ Q − A W) over this warp's own tile of Q.
        warp_tile_mma<4, kC, false, false>(acc, sm.am, kLdC, wm, sm.u, kLd, wn);
        {
          float aw[8][4] = {};
          warp_tile_mma<4, kC, false, false>(aw, sm.am, kLdC, wm, sm.w, kLd, wn);
          for (int half = 0; half < 2; ++half) {
            const int i = wm + gq + half * 8;
            const float e = exp_ftz(sm.gam[i]);
            for (int nt = 0; nt < 8; ++nt) {
              uint32_t* qv = reinterpret_cast<uint32_t*>(sm.q + i * kLd + wn + nt * 8 + tq * 2);
              const float2 x = unpack_bf16(*qv);
              *qv = pack_bf16(carried * (e * x.x - aw[nt][2 * half]),
                              carried * (e * x.y - aw[nt][2 * half + 1]));
            }
          }
        }
        cp_async_wait_all();
        __syncthreads();  // Q̃ and Sb
        // O = scale (Q̃ Sb + P)
        warp_tile_mma<4, kD, false, false>(acc, sm.q, kLd, wm, sm.sb, kLd, wn);
      }
    }
    for (int nt = 0; nt < 8; ++nt)
      for (int r = 0; r < 4; ++r) acc[nt][r] *= a.scale;
    if constexpr (std::is_same_v<Out, bf16>) {
      // Through shared memory (Q̃'s tile, no longer read) so that each row leaves in 16-byte stores.
      __syncthreads();
      store_tile_bf16_in(sm.q, tile_at, wm, wn, acc);
      __syncthreads();
      // 16 threads per row, rows r0, r0 + 16, ...: constant strides, unrolled as the copies are.
      constexpr int kPieces = kD / 8, kRowStep = kOutThreads / kPieces;
      const int r0 = threadIdx.x / kPieces, part = threadIdx.x % kPieces;
      Out* to = op + ((t0 + r0) * a.HV + hv) * V + part * 8;
#pragma unroll kUnroll
      for (int pass = 0; pass < kC / kRowStep; ++pass, to += kRowStep * a.HV * V)
        if (r0 + pass * kRowStep < len)
          *reinterpret_cast<uint4*>(to) =
              *reinterpret_cast<const uint4*>(sm.q + tile_at(r0 + pass * kRowStep, part * 8));
    } else {
      for (int nt = 0; nt < 8; ++nt)
        for (int half = 0; half < 2; ++half) {
          const int i = wm + gq + half * 8, col = wn + nt * 8 + tq * 2;
          if (i < len)
            *reinterpret_cast<float2*>(op + ((t0 + i) * a.HV + hv) * V + col) =
                make_float2(acc[nt][2 * half], acc[nt][2 * half + 1]);
        }
    }
    if (!Wg && !VIn && !runs && c + 1 < last) {
      // S_loc = e^Γ S_loc + Kᵀ (e^{Γ−γ} ⊙ (U − W Sb)): the scaled v (bf16) goes over W once every warp has
      // read W, then warp w updates rows 16w...
      const float big_gamma = sm.gam[len - 1];
      float v[8][4] = {};
      warp_tile_mma<4, kD, false, false>(v, sm.w, kLd, wm, sm.sb, kLd, wn);
      for (int half = 0; half < 2; ++half) {
        const int i = wm + gq + half * 8;
        const float f = i < len ? exp_ftz(big_gamma - sm.gam[i]) : 0.f;
        for (int nt = 0; nt < 8; ++nt) {
          const float2 uu =
              unpack_bf16(*reinterpret_cast<const uint32_t*>(sm.u + i * kLd + wn + nt * 8 + tq * 2));
          v[nt][2 * half] = f * (uu.x - carried * v[nt][2 * half]);
          v[nt][2 * half + 1] = f * (uu.y - carried * v[nt][2 * half + 1]);
        }
      }
      __syncthreads();  // every warp is done reading W
      store_tile_bf16(sm.w, kLd, wm, wn, v);
      __syncthreads();
      const float decay = exp_ftz(big_gamma);
      for (int nh = 0; nh < 2; ++nh) {
        float st[8][4];
        for (int nt = 0; nt < 8; ++nt)
          for (int half = 0; half < 2; ++half) {
            const int d = warp * 16 + gq + half * 8, col = nh * 64 + nt * 8 + tq * 2;
            st[nt][2 * half] = decay * sf[d * kD + col];
            st[nt][2 * half + 1] = decay * sf[d * kD + col + 1];
          }
        warp_tile_mma<4, kC, true, false>(st, sm.k, kLd, warp * 16, sm.w, kLd, nh * 64);
        for (int nt = 0; nt < 8; ++nt)
          for (int half = 0; half < 2; ++half) {
            const int d = warp * 16 + gq + half * 8, col = nh * 64 + nt * 8 + tq * 2;
            sf[d * kD + col] = st[nt][2 * half];
            sf[d * kD + col + 1] = st[nt][2 * half + 1];
            *reinterpret_cast<uint32_t*>(sm.sb + d * kLd + col) =
                pack_bf16(st[nt][2 * half], st[nt][2 * half + 1]);
          }
      }
    }
    carried = 1.f;    // Sb holds S_loc itself from the second chunk on
    __syncthreads();  // before the next chunk's loads overwrite q, k, w, u, gam
  }
  finish_output_block(a.blocks_done);
}
template <class Out, bool VIn, bool Runs>
__global__ void __launch_bounds__(kOutThreads)
    output_tc_kernel(OutputArgs a, const bf16* u_all, const bf16* w_all,
                     const __grid_constant__ RecTmaMaps tma) {
  output_tc_block<Out, VIn, Runs, false, false>(a, u_all, w_all, tma);
}
// Two blocks per multiprocessor, at most 128 registers; at most 120 where one runs beside a 2-stage
// 32-column recurrence block of 9 warps at up to 88 (the multiprocessor's quarter that holds three of its
// warps and two of this block's: 3 x 88 + 2 x 120 = 504 of 512 registers a lane; test `[registers]`): the
// dense selector's blocks (no tensor copies, runs or v from memory, see output_kernel_for), and those with
// fp32 outputs (a capped selector's 2-stage chains at B = 1). The dense blocks at 123, after a change
// elsewhere (two fields more in OutputArgs), no longer fitted there and the dense forwards at B = 1 were
// 10-14 % slower (v51); the sparse runs' blocks with fp32 outputs had 121 until v52. The bf16 blocks with
// tensor copies (109 in runs, 122 for one chunk since v54's Q̃ loads) keep the limit they were timed with.
template <class Out, bool VIn, bool Runs, bool Tma>
constexpr int output_wg_registers() {
  return !VIn && (std::is_same_v<Out, float> || (!Tma && !Runs)) ? 120 : 128;
}
template <class Out, bool VIn, bool Runs, bool Tma>
__global__ void __launch_bounds__(kOutThreads) __maxnreg__((output_wg_registers<Out, VIn, Runs, Tma>()))
    output_wg_kernel(OutputArgs a, const bf16* u_all, const bf16* w_all,
                     const __grid_constant__ RecTmaMaps tma) {
  output_tc_block<Out, VIn, Runs, true, Tma>(a, u_all, w_all, tma);
}

// ---- the dense selector's recurrence and outputs in one pass (G = 1, packed batches: see fused_form).
// Every chunk is an event, and a block computes the chunk's output from the state the chunk starts from while
// that state is on the multiprocessor, so that neither v = U − W S nor the state goes through memory to an
// output stage (the snapshots are still written, for snapshot_view). Per chunk, with Sb = bf16(S):
//   v̂ = U − W Sb,  O = scale (e^γ ⊙ (Q Sb) + A v̂),  A = Q Kᵀ ⊙ D ⊙ lower_incl,
//   S = e^Γ S + Kᵀ (e^{Γ−γ} ⊙ v̂).
// v̂ (bf16) takes U's place in the copy stage, where A v̂ reads it. The stages hold W, K, Q (sw128), U's
// columns (sw128 per 64) and γ. Two forms: recurrence_out_wg_kernel, WG warpgroups each computing all of it
// for 64 columns (W Sb first, Q Sb and Q Kᵀ on the tensor cores while the warps form v̂, A v̂ beside the
// state's update); recurrence_out_ws_kernel, 64 columns whose chain and outputs are two warpgroups side by
// side.
template <int WG>
struct alignas(1024) FusedStage {
  bf16 w[kC * kD];
  bf16 k[kC * kD];
  bf16 q[kC * kD];
  bf16 u[kC * 64 * WG];  // U, then v̂ (columns 64 g..: the sw128 tile at g kC 64)
  float gam[kC];
};
template <int NS, int WG>
struct FusedSmem {
  FusedStage<WG> stage[NS];
  bf16 sb[WG][kD * 64];  // per warpgroup of the chain: bf16(S), 128 rows as two sw128 tiles of 64 rows
  bf16 vh[WG][kC * 64];  // per warpgroup of the chain: e^{Γ−γ} ⊙ v̂, sw128
  uint8_t mask[kWindow];
  float decay[kWindow];
};
template <int NS, int WG>
constexpr size_t fused_smem_bytes() {
  return sizeof(FusedSmem<NS, WG>) + 1024;  // and the alignment of the block's region to 1024 bytes
}
// Waits until at most N of this warpgroup's committed product groups are pending; the empty asm keeps the
// accumulator's uses below the wait.
template <int N, int R>
__device__ __forceinline__ void wgmma_wait_pending(float (&d)[R]) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Barrier `id` (1-15) for `threads` threads of the block, for code that the block's warpgroups reach in
// different branches.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// d (64 x 64) = X S over k = 128: X an sw128 64 x 128 tile read k-major (W, Q), S 128 rows x 64 columns of
// Sb read mn-major. Issued, not committed.
__device__ __forceinline__ void times_sb(float (&d)[32], const bf16* x, uint64_t sb_desc) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks)
    wgmma_m64n64k16_ss_t(d, sw128_desc(x + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep,
                         sb_desc + ks * kSwMnMajorStep, ks);
}
// Snapshot rows from a warpgroup's Sb (128 rows x 64 columns, sw128 halves) to `dst` (row stride 128): eight
// 16-byte pieces per thread of the warpgroup (wt its rank there).
__device__ __forceinline__ void store_snapshot_block(bf16* dst, const bf16* sb, int wt) {
#pragma unroll
  for (int i = 0; i < kD * 8 / 128; ++i) {
    const int e = i * 128 + wt, row = e >> 3, col = (e & 7) * 8;
    *reinterpret_cast<uint4*>(dst + row * kD + col) = *reinterpret_cast<const uint4*>(sb + sw128(row, col));
  }
}
// v̂ = U − acc (acc = W Sb, this thread's rows row0 (+ 8)) into vr over U (bf16, sw128), and e^{Γ−γ} ⊙ v̂
// into vh, the B operand of the state's update.
__device__ __forceinline__ void form_v(const float (&acc)[32], bf16* vr, bf16* vh, const float* gam,
                                       float big_gamma, int row0) {
  const int tq = threadIdx.x & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + half * 8;
    const float f = exp_ftz(big_gamma - gam[r]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = j * 8 + tq * 2;
      uint32_t* u_pair = reinterpret_cast<uint32_t*>(vr + sw128(r, col));
      const float2 uu = unpack_bf16(*u_pair);
      const float x0 = uu.x - acc[4 * j + 2 * half], x1 = uu.y - acc[4 * j + 2 * half + 1];
      *u_pair = pack_bf16(x0, x1);
      *reinterpret_cast<uint32_t*>(vh + sw128(r, col)) = pack_bf16(x0 * f, x1 * f);
    }
  }
}
// x = Q Kᵀ (this thread's rows row0 (+ 8)) ⊙ D ⊙ lower_incl as bf16 A fragments, and o = Q Sb times e^γ.
__device__ __forceinline__ void causal_fragments(uint32_t (&fa)[kC / 16][4], float (&x)[32], float (&o)[32],
                                                 const float* gam, int row0) {
  const int tq = threadIdx.x & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = row0 + half * 8;
    const float gi = gam[i], e = exp_ftz(gi);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = nt * 8 + tq * 2;
      x[4 * nt + 2 * half] *= causal_decay(i, j, gi, gam);
      x[4 * nt + 2 * half + 1] *= causal_decay(i, j + 1, gi, gam);
      o[4 * nt + 2 * half] *= e;
      o[4 * nt + 2 * half + 1] *= e;
    }
  }
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks)
#pragma unroll
    for (int f = 0; f < 4; ++f) fa[ks][f] = pack_bf16(x[8 * ks + 2 * f], x[8 * ks + 2 * f + 1]);
}
// o += A v̂ (fa this warp's fragments of A, v̂ the sw128 tile vr), committed and waited for.
__device__ __forceinline__ void add_a_v(float (&o)[32], const uint32_t (&fa)[kC / 16][4], const bf16* vr) {
  const uint64_t desc = sw128_desc(vr);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks) wgmma_m64n64k16_rs_t(o, fa[ks], desc + ks * kSwMnMajorStep, 1);
  wgmma_commit();
  wgmma_wait_pending<0>(o);
}
// scale o, this thread's rows row0 (+ 8) of a chunk's 64 columns, into O at `to` (the chunk's first row, its
// columns col0 + 2 tq; rows at or past len are not stored).
template <class Out>
__device__ __forceinline__ void store_o_rows(Out* to, int64_t row_stride, const float (&o)[32], float scale,
                                             int row0, int len) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = row0 + half * 8;
    if (i >= len) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float y0 = o[4 * j + 2 * half] * scale, y1 = o[4 * j + 2 * half + 1] * scale;
      if constexpr (std::is_same_v<Out, bf16>)
        *reinterpret_cast<uint32_t*>(to + i * row_stride + j * 8) = pack_bf16(y0, y1);
      else
        *reinterpret_cast<float2*>(to + i * row_stride + j * 8) = make_float2(y0, y1);
    }
  }
}
// Where a fused block's chunk operands come from: W and U (workspace), K and Q (inputs), γ, for one
// (sequence, value head); `cols` of U from column u_col0.
struct FusedSources {
  const bf16 *w, *u, *k, *q;
  const float* gam;
  int64_t uw_step, qk_row, gam_step, seq_len;
  __device__ FusedSources(const RecurrenceArgs& a, const OutputArgs& out, const bf16* u_all,
                          const bf16* w_all, int64_t s, int hv, int u_col0) {
    const int64_t chunk0 = a.chunk_offset[s], t0 = a.seq_start[s];
    const int h = hv / (a.HV / a.H);
    uw_step = int64_t(a.HV) * (kC * kD);
    qk_row = int64_t(a.H) * kD;
    gam_step = int64_t(a.HV) * kC;
    seq_len = a.seq_len[s];
    w = w_all + (chunk0 * a.HV + hv) * (kC * kD);
    u = u_all + (chunk0 * a.HV + hv) * (kC * kD) + u_col0;
    k = static_cast<const bf16*>(a.k) + (t0 * a.H + h) * kD;
    q = static_cast<const bf16*>(out.q) + (t0 * a.H + h) * kD;
    gam = a.gamma + (chunk0 * a.HV + hv) * kC;
  }
  // Chunk c into stage d by the block's first `Threads` threads (one copy group), Q unless `with_q` is false
  // (fetch_q copies it).
  template <int Threads, int WG>
  __device__ __forceinline__ void fetch(FusedStage<WG>& d, int64_t c, bool with_q = true) const {
    const int len = int(min_i64(kC, seq_len - c * kC));
    copy_rows_at<Threads, true>(d.w, sw128, w + c * uw_step, kD, kC);
    copy_rows_at<Threads, true>(d.k, sw128, k + c * kC * qk_row, qk_row, len);
    if (with_q) copy_rows_at<Threads, true>(d.q, sw128, q + c * kC * qk_row, qk_row, len);
    constexpr int kPieces = 8 * WG;  // U's 16-byte pieces per row
#pragma unroll
    for (int i = 0; i < kC * kPieces / Threads; ++i) {
      const int e = i * Threads + int(threadIdx.x), r = e / kPieces, col = (e % kPieces) * 8;
      cp_async16(d.u + sw128(r, col), u + c * uw_step + r * kD + col, true);
    }
    if (threadIdx.x < kC / 4) cp_async16(d.gam + threadIdx.x * 4, gam + c * gam_step + threadIdx.x * 4, true);
    cp_async_commit();
  }
  // Q of chunk c into stage d by one warpgroup (wt: the thread's rank in it; one copy group).
  template <int WG>
  __device__ __forceinline__ void fetch_q(FusedStage<WG>& d, int64_t c, int wt) const {
    copy_rows_at<128, true>(d.q, sw128, q + c * kC * qk_row, qk_row, int(min_i64(kC, seq_len - c * kC)), kC,
                            wt);
    cp_async_commit();
  }
};

template <int NS, int WG, class Out>
__global__ void __launch_bounds__(128 * WG, 1)
    recurrence_out_wg_kernel(RecurrenceArgs a, OutputArgs out, const bf16* u_all, const bf16* w_all) {
  constexpr int kThreadsB = 128 * WG, kCols = 64 * WG, kTiles = kD / kCols, kFlags = kCols / kTcTile;
  wait_for_previous_grid();
  const ChainPlace place = chain_place<kTiles>(a);
  const int64_t s = place.s, slot_base = place.slot_base;
  const int hv = place.hv, tile = place.tile;
  const int g = int(threadIdx.x) >> 7, wt = int(threadIdx.x) & 127;  // warpgroup, thread in it
  const int col0 = tile * kCols + g * 64;                            // this warpgroup's V columns
  const int warp = wt >> 5, row0 = warp * 16 + ((wt & 31) >> 2);     // rows row0 (+ 8) of each 64-row half
  extern __shared__ __align__(16) unsigned char smem_raw[];
  FusedSmem<NS, WG>& sm =
      *reinterpret_cast<FusedSmem<NS, WG>*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
  let_next_grid_start();
  Publisher<kFlags> publish{a.progress + progress_flag_index(s, a.HV, hv, kVTiles, tile * kFlags)};
  float st[2][32];
  load_state_block(st, a.initial_state ? a.initial_state + (s * a.HV + hv) * kD * kD : nullptr, row0, col0);
  bf16* const sb = sm.sb[g];
  bf16* const vh = sm.vh[g];
  auto store_sb = [&]() {
    for (int mt = 0; mt < 2; ++mt) store_acc_sw128(sb + mt * kC * 64, st[mt], 0);
  };
  auto write_snapshot = [&](int64_t slot) {
    store_snapshot_block(reinterpret_cast<bf16*>(a.snapshots) + (slot_base + slot) * kD * kD + col0, sb, wt);
  };
  store_sb();
  fence_proxy_async();  // Sb, written by ordinary stores, is read by the first event's wgmma
  __syncthreads();

  const FusedSources src(a, out, u_all, w_all, s, hv, tile * kCols);
  const int64_t seq_t0 = a.seq_start[s];
  Out* const o_cols = static_cast<Out*>(out.o) + (seq_t0 * a.HV + hv) * kD + col0 + (wt & 3) * 2;
  const int64_t o_row = int64_t(a.HV) * kD;
  auto fetch = [&](int buf, int64_t c) { src.fetch<kThreadsB>(sm.stage[buf], c); };
  const uint64_t sb_desc = sw128_desc(sb), vh_desc = sw128_desc(vh);

  int64_t slot = 0;
  auto wait = [](int, int inflight) { cp_async_wait_but(inflight - 1); };
  const float pending = for_each_event<NS>(
      a, sm.mask, sm.decay, place, publish, fetch, wait, write_snapshot, [] {},
      tile == 0 ? a.snapshot_chunk + slot_base : nullptr,
      [](float, auto) { __trap(); },  // a skipped chunk: never, the dense selector keeps every one
      [&](int buf, int64_t c, float big_gamma, auto flush_snapshot, auto fetch_next) {
        FusedStage<WG>& cs = sm.stage[buf];
        bf16* const vr = cs.u + g * (kC * 64);
        float acc[32], o[32], x[32];
        wgmma_fence();
        times_sb(acc, cs.w, sb_desc);  // v̂'s product, which the chain waits on
        wgmma_commit();
        times_sb(o, cs.q, sb_desc);  // Q Sb and Q Kᵀ, for the output
        times_abt(x, cs.q, cs.k);
        wgmma_commit();
        // While the products run: the previous event's snapshot, the next copies.
        flush_snapshot();
        fetch_next();
        wgmma_wait_pending<1>(acc);
        form_v(acc, vr, vh, cs.gam, big_gamma, row0);
        fence_proxy_async();
        __syncthreads();
        issue_state_update(st, cs.k, vh_desc, big_gamma, warp);  // S = e^Γ S + Kᵀ Vh
        // Q Sb and Q Kᵀ are done (committed before the state's products): O = e^γ ⊙ (Q Sb) + A v̂.
        wgmma_wait_pending<1>(o);
        wgmma_wait_pending<1>(x);
        uint32_t fa[kC / 16][4];
        causal_fragments(fa, x, o, cs.gam, row0);
        add_a_v(o, fa, vr);
        wgmma_wait_pending<0>(st[0]);
        wgmma_wait_pending<0>(st[1]);
        store_sb();
        fence_proxy_async();
        store_o_rows(o_cols + c * kC * o_row, o_row, o, out.scale, row0,
                     int(min_i64(kC, src.seq_len - c * kC)));
      },
      slot);
  if (a.final_state)
    store_state_block(a.final_state + (s * a.HV + hv) * kD * kD, st, exp_ftz(pending), row0, col0);
  if (tile == 0 && threadIdx.x == 0) a.snapshot_count[s * a.HV + hv] = int32_t(slot + 1);
}

// The warp-specialised form: per block 64 columns of one (sequence, value head), warpgroup 0 the chain
// (v̂ = U − W Sb, the state's update, the copies of W, K, U, γ), warpgroup 1 the outputs (Q Sb, Q Kᵀ, A v̂,
// O, the snapshots, the copies of Q), in step: per chunk c two block barriers, P1 (chunk c's operands
// copied, Sb = bf16(S_c)) and P2 (v̂ written). Between P1 and P2 the chain computes W Sb and v̂, the outputs
// Q Sb and A and store snapshot c from Sb; between P2 and the next P1 the chain updates the state, writes Sb
// and waits for chunk c + 1's copies, the outputs add A v̂, store O and wait for chunk c + 1's Q (both
// issued after P1, into the stage chunk c − 1 had, which neither reads after P1). Sb is read only before P2
// and written only after it, so one copy serves. (The snapshots and Q's copy moved from the chain to the
// outputs: 2 x 16K dense 1.014, 1.013 → 0.992, 0.990 ms, 2026-12-01 11:43Z.)
template <class Out>
__global__ void __launch_bounds__(256, 1)
    recurrence_out_ws_kernel(RecurrenceArgs a, OutputArgs out, const bf16* u_all, const bf16* w_all) {
  constexpr int kTiles = kD / 64;
  wait_for_previous_grid();
  const ChainPlace place = chain_place<kTiles>(a);
  const int64_t s = place.s, n = place.n, slot_base = place.slot_base;
  const int hv = place.hv, tile = place.tile, col0 = tile * 64;
  const bool chain = threadIdx.x < 128;
  const int wt = int(threadIdx.x) & 127, warp = wt >> 5, row0 = warp * 16 + ((wt & 31) >> 2);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  FusedSmem<2, 1>& sm =
      *reinterpret_cast<FusedSmem<2, 1>*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
  let_next_grid_start();
  const FusedSources src(a, out, u_all, w_all, s, hv, col0);
  bf16* const sb = sm.sb[0];
  bf16* const vh = sm.vh[0];
  const uint64_t sb_desc = sw128_desc(sb), vh_desc = sw128_desc(vh);
  bf16* const snaps = reinterpret_cast<bf16*>(a.snapshots) + slot_base * kD * kD + col0;
  float st[2][32];
  if (chain) {
    load_state_block(st, a.initial_state ? a.initial_state + (s * a.HV + hv) * kD * kD : nullptr, row0, col0);
    for (int mt = 0; mt < 2; ++mt) store_acc_sw128(sb + mt * kC * 64, st[mt], 0);
    if (n > 0) src.fetch<128>(sm.stage[0], 0, false);
  } else if (n > 0) {
    src.fetch_q(sm.stage[0], 0, wt);
  }
  cp_async_wait_all();
  fence_proxy_async();
  Out* const o_cols =
      static_cast<Out*>(out.o) + (int64_t(a.seq_start[s]) * a.HV + hv) * kD + col0 + (wt & 3) * 2;
  const int64_t o_row = int64_t(a.HV) * kD;
  for (int64_t c = 0; c < n; ++c) {
    FusedStage<1>& cs = sm.stage[c & 1];
    const float big_gamma = a.chunk_decay[place.ev_base + c];
    __syncthreads();  // P1
    if (chain) {
      float acc[32];
      wgmma_fence();
      times_sb(acc, cs.w, sb_desc);
      wgmma_commit();
      if (c + 1 < n) src.fetch<128>(sm.stage[(c + 1) & 1], c + 1, false);
      wgmma_wait_pending<0>(acc);
      form_v(acc, cs.u, vh, cs.gam, big_gamma, row0);
      fence_proxy_async();
      named_barrier(1, 256);                                   // P2
      issue_state_update(st, cs.k, vh_desc, big_gamma, warp);  // S = e^Γ S + Kᵀ Vh
      wgmma_wait_pending<0>(st[0]);
      wgmma_wait_pending<0>(st[1]);
      for (int mt = 0; mt < 2; ++mt) store_acc_sw128(sb + mt * kC * 64, st[mt], 0);
      cp_async_wait_all();  // chunk c + 1's copies
      fence_proxy_async();
    } else {
      float o[32], x[32];
      wgmma_fence();
      times_sb(o, cs.q, sb_desc);
      times_abt(x, cs.q, cs.k);
      wgmma_commit();
      // While the products run: snapshot c (S_c), chunk c + 1's Q.
      store_snapshot_block(snaps + c * kD * kD, sb, wt);
      if (tile == 0 && wt == 0) a.snapshot_chunk[slot_base + c] = int32_t(c) - 1;
      if (c + 1 < n) src.fetch_q(sm.stage[(c + 1) & 1], c + 1, wt);
      wgmma_wait_pending<0>(o);
      wgmma_wait_pending<0>(x);
      uint32_t fa[kC / 16][4];
      causal_fragments(fa, x, o, cs.gam, row0);
      named_barrier(1, 256);  // P2
      add_a_v(o, fa, cs.u);
      store_o_rows(o_cols + c * kC * o_row, o_row, o, out.scale, row0,
                   int(min_i64(kC, src.seq_len - c * kC)));
      cp_async_wait_all();  // chunk c + 1's Q
      fence_proxy_async();
    }
  }
  __syncthreads();  // the last Sb
  if (!chain) {
    store_snapshot_block(snaps + n * kD * kD, sb, wt);
    if (tile == 0 && wt == 0) {
      a.snapshot_chunk[slot_base + n] = int32_t(n) - 1;
      a.snapshot_count[s * a.HV + hv] = int32_t(n + 1);
    }
  } else if (a.final_state) {
    store_state_block(a.final_state + (s * a.HV + hv) * kD * kD, st, 1.f, row0, col0);
  }
}

size_t prepare_tc_smem() {
  return kPrepSmemBytes;
}
// A tensor-core kernel of the separate stages as forward() launches it: the kernel, its name, its threads
// and its dynamic shared memory.
template <class Kernel>
struct StageKernel {
  Kernel kernel;
  const char* name;
  int threads;
  size_t smem;
};
using RecurrenceKernel = StageKernel<void (*)(RecurrenceArgs, bf16*, const bf16*, RecTmaMaps)>;
using OutputKernel = StageKernel<void (*)(OutputArgs, const bf16*, const bf16*, RecTmaMaps)>;
// The separate recurrence for `columns` per block and `stages` copy stages (recurrence_columns and
// recurrence_stages): 32 columns on 8 warps with warpgroup products, 2 or 4 stages; 64 columns on one
// warpgroup, 2 or 3 stages.
RecurrenceKernel recurrence_kernel_for(int columns, int stages) {
  constexpr const char* kNarrow = "recurrence_tc_kernel";
  constexpr const char* kWide = "recurrence_wg_kernel";
  if (columns == 32)
    return stages == 2 ? RecurrenceKernel{recurrence_tc_kernel<2, false, 32, 8, true>, kNarrow, 8 * 32 + 32,
                                          rec_smem_bytes<2, 32>()}
                       : RecurrenceKernel{recurrence_tc_kernel<4, false, 32, 8, true>, kNarrow, 8 * 32 + 32,
                                          rec_smem_bytes<4, 32>()};
  return stages == 2
             ? RecurrenceKernel{recurrence_wg_kernel<2, false>, kWide, kWgThreads, wg_smem_bytes<2>()}
             : RecurrenceKernel{recurrence_wg_kernel<3, false>, kWide, kWgThreads, wg_smem_bytes<3>()};
}
// The tensor maps of the pre-pass's, the recurrence's and the output blocks' copies (RecTmaMaps), the
// recurrence's for blocks of `columns` V columns: W and U [slot_rows][128] from the workspace (W's box and
// U's whole rows for the pre-pass's stores and the output blocks' loads, U's columns for the recurrence), Q,
// K and V [tokens][heads][128], and the snapshots [snapshot_slots x 128][128] (bf16) that the 32- and
// 64-column mma.sync blocks store by tensor copies and the output blocks load (two 64-column halves of 128
// rows). The driver's encoder is reached through the runtime, so that nothing links libcuda. Every
// tensor-core forward encodes them before its pre-pass (the fused dense form too, whose recurrence reads none
// of them), so the limits below hold for all of them.
std::string rec_tma_maps(RecTmaMaps& m, const bf16* w, const bf16* u, int64_t slot_rows, const void* q,
                         const void* k, const void* v, int64_t tokens, int H, int HV, int columns,
                         const bf16* snapshots, int64_t snapshot_slots) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return "the CUDA driver offers no cuTensorMapEncodeTiled (the tensor-core copies need it)";
  if (slot_rows >= (int64_t(1) << 31))  // the copies' row coordinates are 32-bit
    return "too many chunks x value heads for the tensor-core recurrence (" + std::to_string(slot_rows / kC) +
           " slots of 64 rows; fewer than 2^25 allowed)";
  auto tiled = [&](CUtensorMap* map, const void* base, cuuint32_t rank, const cuuint64_t* dims,
                   const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle,
                   const char* what) -> std::string {
    const cuuint32_t unit[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims,
                              strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r == CUDA_SUCCESS) return {};
    return std::string("cannot describe ") + what +
           " for the tensor-core copies (cuTensorMapEncodeTiled error " + std::to_string(int(r)) +
           (reinterpret_cast<uintptr_t>(base) % 16 ? "; it is not 16-byte aligned)" : ")");
  };
  const cuuint64_t uw_dims[2] = {cuuint64_t(kD), cuuint64_t(slot_rows)}, uw_strides[1] = {kD * sizeof(bf16)};
  const cuuint32_t w_box[2] = {64, kC}, u_box[2] = {cuuint32_t(columns), kC};
  const cuuint64_t k_dims[3] = {cuuint64_t(kD), cuuint64_t(H), cuuint64_t(tokens)};
  const cuuint64_t k_strides[2] = {kD * sizeof(bf16), cuuint64_t(H) * kD * sizeof(bf16)};
  const cuuint32_t kv_box[3] = {64, 1, kC};
  std::string err = tiled(&m.w, w, 2, uw_dims, uw_strides, w_box, CU_TENSOR_MAP_SWIZZLE_128B, "W");
  if (err.empty())
    err = tiled(&m.u_rows, u, 2, uw_dims, uw_strides, w_box, CU_TENSOR_MAP_SWIZZLE_128B,
                "U (the pre-pass's stores)");
  if (err.empty())
    err = tiled(&m.u, u, 2, uw_dims, uw_strides, u_box,
                columns == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, "U");
  if (err.empty()) err = tiled(&m.k, k, 3, k_dims, k_strides, kv_box, CU_TENSOR_MAP_SWIZZLE_128B, "K");
  if (err.empty()) err = tiled(&m.q, q, 3, k_dims, k_strides, kv_box, CU_TENSOR_MAP_SWIZZLE_128B, "Q");
  const cuuint64_t v_dims[3] = {cuuint64_t(kD), cuuint64_t(HV), cuuint64_t(tokens)};
  const cuuint64_t v_strides[2] = {kD * sizeof(bf16), cuuint64_t(HV) * kD * sizeof(bf16)};
  if (err.empty()) err = tiled(&m.v, v, 3, v_dims, v_strides, kv_box, CU_TENSOR_MAP_SWIZZLE_128B, "V");
  // The snapshots as [slots x 128 rows][128], a block's tile 128 rows x its columns.
  if (snapshot_slots * kD >= (int64_t(1) << 31))
    return "too many snapshot slots for the tensor-core recurrence (" + std::to_string(snapshot_slots) +
           "; fewer than 2^24 allowed)";
  const cuuint64_t snap_dims[2] = {cuuint64_t(kD), cuuint64_t(snapshot_slots * kD)};
  const cuuint32_t snap_box[2] = {cuuint32_t(columns), kD};
  if (err.empty())
    err = tiled(&m.snap, snapshots, 2, snap_dims, uw_strides, snap_box,
                columns == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, "the snapshots");
  const cuuint32_t snap_rows_box[2] = {64, kD};  // the output blocks' copies: 64 columns x 128 rows
  if (err.empty())
    err = tiled(&m.snap_rows, snapshots, 2, snap_dims, uw_strides, snap_rows_box, CU_TENSOR_MAP_SWIZZLE_128B,
                "the snapshots");
  return err;
}
// Recurrence blocks of `columns` (32 or 64) V columns: one per (sequence, value head, V tile).
int64_t recurrence_tc_blocks(const Problem& p, int columns = kTcTile) {
  return p.num_seqs * p.v_heads * (kD / columns);
}
size_t output_tc_smem(bool multi, bool wg) {
  if (wg) return sizeof(OutWgSmem) + 1024;  // and the alignment of the block's region to 1024 bytes
  return sizeof(OutSmem) + (multi ? size_t(kD) * kD * 4 : 0);
}
static_assert(2 * (sizeof(OutWgSmem) + 1024 + 1024) <= 228 * 1024, "outputs (wgmma): two per multiprocessor");
// The output blocks: with G = 1 the warpgroup form, in runs of chunks where output_run gives them, by tensor
// copies but for the dense selector's blocks (one chunk each, beside the chains: faster with cp.async); with
// G > 1 the mma.sync form, which carries the group's state through shared memory.
template <class Out>
OutputKernel output_kernel_for(const Problem& p, int run) {
  if (p.group > 1)
    return {output_tc_kernel<Out, false, false>, "output_tc_kernel", kOutThreads,
            output_tc_smem(true, false)};
  const size_t smem = output_tc_smem(false, true);
  if (run > 1) return {output_wg_kernel<Out, false, true, true>, "output_wg_kernel", kOutThreads, smem};
  if (p.selector != SelectorKind::dense)
    return {output_wg_kernel<Out, false, false, true>, "output_wg_kernel", kOutThreads, smem};
  return {output_wg_kernel<Out, false, false, false>, "output_wg_kernel", kOutThreads, smem};
}
OutputKernel output_kernel_for(const Problem& p, int run) {
  return p.output_dtype == DType::bfloat16 ? output_kernel_for<bf16>(p, run)
                                           : output_kernel_for<float>(p, run);
}
}  // namespace tc

// ---------------------------------------------------------------------------------------------------------
#define SGDN_TRY_CUDA(call)                                                              \
  do {                                                                                   \
    cudaError_t status_ = (call);                                                        \
    if (status_ != cudaSuccess)                                                          \
      return std::string("CUDA error in ") + #call + ": " + cudaGetErrorString(status_); \
  } while (0)
#define SGDN_TRY_LAUNCH(what)                                                              \
  do {                                                                                     \
    cudaError_t status_ = cudaGetLastError();                                              \
    if (status_ != cudaSuccess)                                                            \
      return std::string("CUDA error after ") + what + ": " + cudaGetErrorString(status_); \
  } while (0)

size_t prepare_smem(const Problem& p) {
  const size_t C = p.chunk, K = p.key_dim, V = p.value_dim;
  return (C * K + C * (V + K) + C * C + 2 * C + kThreads / 32) * sizeof(float);
}
// The widest of 64, 32, 16 columns that divides V (V is a multiple of 16).
int value_tile(const Problem& p) {
  for (int tile = kValueTile; tile > 16; tile /= 2)
    if (p.value_dim % tile == 0) return tile;
  return 16;
}
size_t recurrence_smem(const Problem& p) {
  const size_t C = p.chunk, K = p.key_dim, VT = value_tile(p);
  return (K * VT + C * VT + C * K) * sizeof(float);
}
size_t output_smem(const Problem& p) {
  const size_t C = p.chunk, K = p.key_dim, VT = value_tile(p);
  return (K * VT + 2 * C * K + C * VT + C * C + C) * sizeof(float);
}

// The device's multiprocessor count.
std::string multiprocessors(int* count) {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess)
    return std::string("CUDA error reading the multiprocessor count: ") + cudaGetErrorString(status);
  return {};
}

// ---------------------------------------------------------------------------------------------------------
// The plan: which form of each tensor-core stage runs for which shape, one reason each. A lone sequence's
// forward is bounded by its busiest chain's latency, a packed batch's by the multiprocessors' throughput.

// V columns per recurrence block: 32 (recurrence_tc_kernel, 8 warps issuing warpgroup products) while those
// blocks fit one per multiprocessor, or two for a sparse selector with G = 1: the shortest event of a chain;
// else 64 (recurrence_wg_kernel): half the blocks, half the copies of W and K through L2 per column.
int recurrence_columns(const Problem& p, int multiprocessors) {
  const int64_t narrow = tc::recurrence_tc_blocks(p);
  if (narrow <= multiprocessors) return 32;
  const bool sparse_two_per_sm =
      p.selector != SelectorKind::dense && p.group == 1 && narrow <= int64_t(2) * multiprocessors;
  return sparse_two_per_sm ? 32 : 64;
}
// A selector whose every chain holds at most this fraction of its sequence's chunks counts as
// throughput-bound.
constexpr double kShortChain = 0.5;
// The most of a sequence's chunks that one unit's chain can hold, as the selector's settings bound it.
double chain_bound(const Problem& p) {
  switch (p.selector) {
    case SelectorKind::random:
    case SelectorKind::stride:
    case SelectorKind::topk:
      return p.rho;
    case SelectorKind::head_budget:
      return p.max_fraction;
    default:
      return 1.0;
  }
}
// Copy stages of the separate recurrence: 2 where the blocks' throughput counts (the dense selector, chains
// bounded at kShortChain with G = 1, more blocks than multiprocessors), which leaves room for an output block
// beside each recurrence block; else enough to keep a lone busy chain fed: 4 at 32 columns, 3 at 64.
int recurrence_stages(const Problem& p, int multiprocessors, int columns) {
  const bool throughput = p.selector == SelectorKind::dense ||
                          (p.group == 1 && chain_bound(p) <= kShortChain) ||
                          tc::recurrence_tc_blocks(p, columns) > multiprocessors;
  return throughput ? 2 : columns == 32 ? 4 : 3;
}
// Chunks per output block with G = 1 and a sparse selector (each chunk from its own start state): runs of 4
// where that leaves at least 16 blocks per multiprocessor, of 2 where it leaves 4, else 1, so that the
// chunks after a skipped one reuse the snapshot in shared memory and a block's start is paid once per run.
int output_run(const Problem& p, int multiprocessors) {
  if (!p.uses_tensor_cores() || p.group != 1 || p.selector == SelectorKind::dense) return 1;
  const int64_t blocks_of_one = p.max_chunks() * p.v_heads, enough = int64_t(16) * multiprocessors;
  return blocks_of_one >= 4 * enough ? 4 : blocks_of_one >= 2 * 4 * int64_t(multiprocessors) ? 2 : 1;
}
// A sequence's last chunks that the output stage takes one per block where it takes runs (group_split): the
// run that holds the last chunk would otherwise end after the chain does.
constexpr int kOutputTail = 1;

// The dense selector's one-pass forms (recurrence and outputs in one kernel), taken where the 64-column
// recurrence would run (G = 1, packed batches), so that neither v nor the state goes through memory.
enum class Fused {
  none,
  two_warpgroups,    // recurrence_out_wg_kernel, 128 columns on two warpgroups: more blocks than one wave
  warp_specialised,  // recurrence_out_ws_kernel, 64 columns, chain and outputs on two warpgroups: one wave
};
Fused fused_form(const Problem& p, int multiprocessors, int columns) {
  if (!p.uses_tensor_cores() || p.selector != SelectorKind::dense || p.group != 1 || columns != 64)
    return Fused::none;
  return tc::recurrence_tc_blocks(p, 64) > multiprocessors ? Fused::two_warpgroups : Fused::warp_specialised;
}

// The tensor-core path's forms for problem p: forward() launches them, stage_registers reads their registers.
struct TcPlan {
  int rec_columns = 0;        // recurrence_columns
  Fused fused = Fused::none;  // fused_form
  int stages = 0;             // recurrence_stages, without a one-pass form
  int output_run = 1;         // output_run
};
TcPlan tc_plan(const Problem& p, int multiprocessors) {
  TcPlan t;
  t.rec_columns = recurrence_columns(p, multiprocessors);
  t.fused = fused_form(p, multiprocessors, t.rec_columns);
  t.stages = recurrence_stages(p, multiprocessors, t.rec_columns);
  t.output_run = output_run(p, multiprocessors);
  return t;
}
// Launches `kernel` (named `name` in errors) with its dynamic shared memory. early: programmatic dependent
// launch, the kernel's blocks may be placed while the kernel before it in the stream still runs (from the
// moment all of that kernel's blocks have called let_next_grid_start(), or have exited); the kernel calls
// wait_for_previous_grid() before it reads what came before. The score kernel, the rank and select kernels,
// the mask expansion, the tensor-core pre-pass and the recurrence are launched so (stride's, random's and
// threshold's marking kernels plainly): each one's launch overlaps the end of the one before, without
// the gap of a plain launch. The tensor-core output stage goes further: its blocks wait on the recurrence's
// progress flags, so each starts as soon as its group's snapshot exists, on the multiprocessors the
// recurrence leaves free (the recurrence never waits on it, so no launch order can deadlock). With a sparse
// selector on the tensor-core path the mask expansion comes between them without waiting for the recurrence
// (see expand_mask_kernel).
template <class... Params, class... Args>
std::string launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, int threads, size_t smem,
                          cudaStream_t stream, bool early, Args... args) {
  if (cudaError_t status =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      status != cudaSuccess)
    return std::string("CUDA error setting the shared memory of ") + name + ": " + cudaGetErrorString(status);
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = early ? 1 : 0;
  if (cudaError_t status = cudaLaunchKernelEx(&config, kernel, args...); status != cudaSuccess)
    return std::string("CUDA error launching ") + name + ": " + cudaGetErrorString(status);
  return {};
}
template <class In>
std::string launch_prepare(const Problem& p, const PrepareArgs& args, dim3 grid, cudaStream_t stream) {
  return launch_kernel("prepare_kernel", prepare_kernel<In>, grid, kThreads, prepare_smem(p), stream, false,
                       args);
}
template <class In>
std::string launch_recurrence(const Problem& p, const RecurrenceArgs& args, dim3 grid, cudaStream_t stream) {
  return launch_kernel("recurrence_kernel", recurrence_kernel<In>, grid, kThreads, recurrence_smem(p), stream,
                       false, args);
}
template <class In, class Out>
std::string launch_output(const Problem& p, const OutputArgs& args, dim3 grid, cudaStream_t stream) {
  return launch_kernel("output_kernel", output_kernel<In, Out>, grid, kThreads, output_smem(p), stream, false,
                       args);
}

}  // namespace

const char* selector_name(SelectorKind s) {
  switch (s) {
    case SelectorKind::dense:
      return "dense";
    case SelectorKind::random:
      return "random";
    case SelectorKind::stride:
      return "stride";
    case SelectorKind::topk:
      return "topk";
    case SelectorKind::head_budget:
      return "head_budget";
    case SelectorKind::threshold:
      return "threshold";
  }
  return "?";
}

std::string check_problem(const Problem& p) {
  auto msg = [](auto... parts) {
    std::string out;
    ((out += parts), ...);
    return out;
  };
  if (p.num_seqs < 1) return msg("num_seqs = ", std::to_string(p.num_seqs), " must be >= 1");
  if (p.total_tokens < 1) return msg("total_tokens = ", std::to_string(p.total_tokens), " must be >= 1");
  if (p.total_tokens >= (int64_t(1) << 31)) return "total_tokens must be < 2^31";
  if (p.qk_heads < 1 || p.v_heads < 1) return "qk_heads and v_heads must be >= 1";
  if (p.v_heads % p.qk_heads != 0)
    return msg("v_heads = ", std::to_string(p.v_heads),
               " is not a multiple of qk_heads = ", std::to_string(p.qk_heads));
  if (p.v_heads > kMaxValueHeads) return msg("v_heads = ", std::to_string(p.v_heads), " exceeds 1024");
  for (auto [name, dim] : {std::pair<const char*, int>{"key_dim", p.key_dim}, {"value_dim", p.value_dim}})
    if (dim < 16 || dim > kMaxHeadDim || dim % 16 != 0)
      return msg(name, " = ", std::to_string(dim),
                 " is not supported by the CUDA backend; allowed: 16, 32, ..., 128");
  if (p.chunk < 1 || p.chunk > kMaxChunk)
    return msg("chunk = ", std::to_string(p.chunk), " is not supported by the CUDA backend; allowed: 1..64");
  if (p.group < 1) return msg("group = ", std::to_string(p.group), " must be >= 1");
  if (p.solver_block < 1 || p.chunk % p.solver_block != 0)
    return msg("solver block = ", std::to_string(p.solver_block),
               " does not divide chunk = ", std::to_string(p.chunk));
  if (!(p.rho > 0 && p.rho <= 1)) return msg("selector rho = ", std::to_string(p.rho), " is outside (0, 1]");
  if (!(p.tau >= 0)) return "selector tau must be >= 0";
  if (p.min_per_head < 0) return "selector min_per_head must be >= 0";
  if (p.selector == SelectorKind::head_budget && !(p.max_fraction >= p.rho && p.max_fraction <= 1))
    return msg("selector max_fraction = ", std::to_string(p.max_fraction),
               " is outside [rho, 1] (rho = ", std::to_string(p.rho), ")");
  const bool uses_scores = p.selector == SelectorKind::topk || p.selector == SelectorKind::head_budget ||
                           p.selector == SelectorKind::threshold;
  if (uses_scores && p.score == ScoreKind::none)
    return msg("selector '", selector_name(p.selector), "' needs a score (update_norm or survival)");
  if (int(p.input_dtype) < 0 || int(p.input_dtype) > 1 || int(p.output_dtype) < 0 || int(p.output_dtype) > 1)
    return "dtype must be float32 or bfloat16";
  if (int64_t(p.max_chunks()) * p.v_heads >= (int64_t(1) << 31))
    return "too many chunks x heads for 32-bit indices";
  // The tensor-core recurrence's grid has one dimension: a block per (sequence, value head, V tile).
  if (p.uses_tensor_cores() && tc::recurrence_tc_blocks(p) >= (int64_t(1) << 31))
    return msg("num_seqs x v_heads = ", std::to_string(p.num_seqs * p.v_heads),
               " is too large for the tensor-core recurrence (times ", std::to_string(tc::kVTiles),
               " blocks must be < 2^31)");
  return {};
}

size_t workspace_bytes(const Problem& p) {
  if (!check_problem(p).empty()) return 0;
  return carve(p, nullptr).total;
}

SnapshotView snapshot_view(const Problem& p, void* workspace) {
  Workspace ws = carve(p, workspace);
  SnapshotView view;
  view.snapshots = ws.snapshots;
  view.snapshots_bf16 = p.uses_tensor_cores();
  view.snapshot_chunk = ws.snapshot_chunk;
  view.snapshot_count = ws.snapshot_count;
  view.chunk_offset = ws.chunk_offset;
  view.max_slots = (p.max_chunks() + p.num_seqs) * p.v_heads;
  return view;
}

std::string forward(const Problem& p, const DeviceTensors& t, void* workspace, size_t workspace_size,
                    cudaStream_t stream) {
  if (std::string problem = check_problem(p); !problem.empty()) return problem;
  Workspace ws = carve(p, workspace);
  if (!workspace || workspace_size < ws.total)
    return "workspace of " + std::to_string(workspace_size) + " bytes is smaller than the " +
           std::to_string(ws.total) + " bytes this problem needs";
  const int HV = p.v_heads, units = p.units();
  const int64_t S = p.num_seqs, nmax = p.max_chunks();
  const int VT = value_tile(p);
  const int vtiles = p.value_dim / VT;
  const float scale = p.scale > 0 ? p.scale : 1.0f / std::sqrt(float(p.key_dim));
  const bool bf16 = p.input_dtype == DType::bfloat16;
  uint8_t* head_mask = t.event_mask ? t.event_mask : ws.head_mask;
  float* head_score = t.event_score ? t.event_score : ws.head_score;
  int32_t* budget = t.budget ? t.budget : ws.budget;

  // 1. chunk table
  const int32_t* cu = t.cu_seqlens;  // null: one sequence of all the tokens
  if (!cu && S != 1) return "cu_seqlens is required when num_seqs > 1";
  const bool use_tc = p.uses_tensor_cores();
  int sms = 0;
  if (use_tc)
    if (std::string e = multiprocessors(&sms); !e.empty()) return e;
  // The output stage's groups: G chunks, or runs of chunks each from its own state (tensor cores, G = 1,
  // sparse), whose records are then per chunk.
  const int run = output_run(p, sms);
  const bool chunk_runs = run > 1;
  const int out_group = chunk_runs ? run : int(p.group);
  const int out_tail = chunk_runs ? kOutputTail : 0;
  // Only the selectors that mark some events keep a unit mask; the tensor-core stages' flags start at zero.
  const bool dense = p.selector == SelectorKind::dense;
  TableArgs table{cu,
                  S,
                  p.total_tokens,
                  nmax,
                  p.chunk,
                  out_group,
                  out_tail,
                  ws.seq_start,
                  ws.seq_len,
                  ws.chunk_offset,
                  ws.group_offset,
                  ws.chunk_info,
                  ws.group_info,
                  {dense ? nullptr : ws.unit_mask, ws.progress},
                  {size_t(nmax) * HV, ws.flags_bytes}};
  table_kernel<<<1, kTableThreads, 0, stream>>>(table);
  SGDN_TRY_LAUNCH("table_kernel");

  // The dense selector keeps every event: its mask, budgets and (zero) scores need nothing from the pre-pass.
  const bool no_scores = p.score == ScoreKind::none;
  auto expand_mask = [&](const uint8_t* unit_mask, float* zero_score, int32_t* records_done) {
    const ExpandMaskArgs args{ws.chunk_offset,
                              chunk_runs ? ws.chunk_offset : ws.group_offset,
                              HV,
                              units,
                              p.group,
                              unit_mask,
                              ws.chunk_decay,
                              head_mask,
                              budget,
                              zero_score,
                              ws.group_slot,
                              ws.group_log_decay,
                              records_done};
    return launch_kernel("expand_mask_kernel", expand_mask_kernel, dim3(unsigned(S), unsigned(HV)),
                         kExpandThreads, 0, stream, true, args);
  };
  if (dense)
    if (std::string e = expand_mask(nullptr, no_scores ? head_score : nullptr, nullptr); !e.empty()) return e;

  // 2. pre-pass
  // update_norm is the statistic itself: the pre-pass writes it as the head scores.
  float* const statistic = p.score == ScoreKind::update_norm ? head_score : ws.statistic;
  PrepareArgs prep{t.k,
                   t.v,
                   t.g,
                   t.beta,
                   ws.chunk_offset,
                   ws.chunk_info,
                   p.qk_heads,
                   HV,
                   p.key_dim,
                   p.value_dim,
                   p.chunk,
                   p.solver_block,
                   p.solver_band >= p.chunk / p.solver_block ? -1 : p.solver_band,
                   p.score != ScoreKind::none,
                   ws.gamma,
                   ws.u,
                   ws.w,
                   ws.chunk_decay,
                   statistic};
  const dim3 chunk_grid{unsigned(nmax), unsigned(HV), 1u};
  const TcPlan plan = use_tc ? tc_plan(p, sms) : TcPlan{};
  const int rec_columns = plan.rec_columns;
  const Fused fused = plan.fused;
  auto* u_tc = reinterpret_cast<__nv_bfloat16*>(ws.u);
  auto* w_tc = reinterpret_cast<__nv_bfloat16*>(ws.w);
  std::string err;
  // The tensor copies' maps (the pre-pass loads K and V and stores W and U through them, the recurrence and
  // the output blocks load).
  tc::RecTmaMaps maps{};
  if (use_tc) {
    err = tc::rec_tma_maps(maps, w_tc, u_tc, int64_t(nmax) * HV * p.chunk, t.q, t.k, t.v, p.total_tokens,
                           p.qk_heads, HV, rec_columns, reinterpret_cast<const __nv_bfloat16*>(ws.snapshots),
                           (nmax + S) * HV);
    if (!err.empty()) return err;
    // The pre-pass's L2 prefetch: one wave of blocks ahead (four per multiprocessor), in chunks (no prefetch,
    // or two or three waves ahead, measured slower).
    prep.prefetch_ahead = (int64_t(4) * sms + HV - 1) / HV;
    prep.l_blocks = l_block_bits(prep.block, prep.band);
    const auto prep_kernel = prep.want_statistic ? tc::prepare_tc_kernel<true> : tc::prepare_tc_kernel<false>;
    err = launch_kernel("prepare_tc_kernel", prep_kernel, dim3(unsigned(nmax * HV)), tc::kPrepThreads,
                        tc::prepare_tc_smem(), stream, true, prep, maps);
  } else
    err = bf16 ? launch_prepare<__nv_bfloat16>(p, prep, chunk_grid, stream)
               : launch_prepare<float>(p, prep, chunk_grid, stream);
  if (!err.empty()) return err;

  // 3. scores: survival's, the zero scores of a sparse selector without a score (the dense one's came with
  // its mask), and the unit scores that topk, threshold and head_budget with a floor or cap read.
  // update_norm's head scores are the pre-pass's statistic, written in place; head_budget without floor or
  // cap sums the units in its select kernel.
  const bool plain_budget =
      p.selector == SelectorKind::head_budget && p.min_per_head == 0 && p.max_fraction >= 1;
  const bool unit_scores_read = p.selector == SelectorKind::topk || p.selector == SelectorKind::threshold ||
                                (p.selector == SelectorKind::head_budget && !plain_budget);
  const bool run_scores = p.score == ScoreKind::survival || (no_scores && !dense) ||
                          (p.score == ScoreKind::update_norm && unit_scores_read);
  if (run_scores) {
    err =
        launch_kernel("score_kernel", score_kernel, dim3(unsigned(S)), 1024, 0, stream, true, ws.chunk_offset,
                      HV, units, p.ratio(), p.score, p.survival_skip_own_group, p.group, prep.statistic,
                      ws.chunk_decay, head_score, unit_scores_read ? ws.unit_score : nullptr);
    if (!err.empty()) return err;
  }

  // 4. selection
  const int tie_bits = key_tie_bits(p);
  switch (p.selector) {
    case SelectorKind::dense:  // expanded before the pre-pass
      break;
    case SelectorKind::stride:
      mark_stride_kernel<<<unsigned(S), kThreads, 0, stream>>>(ws.chunk_offset, HV, units, p.rho,
                                                               ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_stride_kernel");
      break;
    case SelectorKind::random: {
      const int64_t tasks = S * units;
      mark_random_kernel<<<unsigned((tasks + 127) / 128), 128, 0, stream>>>(
          ws.chunk_offset, S, HV, units, p.rho, p.seed, ws.scratch, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_random_kernel");
      break;
    }
    case SelectorKind::topk:
      err =
          launch_kernel("mark_unit_ranks_kernel", mark_unit_ranks_kernel, dim3(unsigned(S), unsigned(units)),
                        1024, 0, stream, true, ws.chunk_offset, HV, units, tie_bits, RankBound{p.rho, -1},
                        RankBound{1, -1}, ws.unit_score, ws.keys, ws.unit_mask);
      if (!err.empty()) return err;
      break;
    case SelectorKind::head_budget:
      // With a floor or a cap: the units' ranks first (the floor kept, the cap blocked), then the shared
      // select over the events left.
      if (!plain_budget) {
        err = launch_kernel("mark_unit_ranks_kernel", mark_unit_ranks_kernel,
                            dim3(unsigned(S), unsigned(units)), 1024, 0, stream, true, ws.chunk_offset, HV,
                            units, tie_bits, RankBound{0, p.min_per_head}, RankBound{p.max_fraction, -1},
                            ws.unit_score, ws.keys, ws.unit_mask);
        if (!err.empty()) return err;
      }
      {
        // The longest sequence's unit scores in shared memory (4 bytes an event) where they fit, else in the
        // keys' workspace.
        const size_t bits_bytes = size_t(p.max_chunks()) * size_t(units) * 4;
        const bool in_shared = bits_bytes <= kSelectSharedBytes;
        err = launch_kernel("select_budget_kernel",
                            plain_budget ? select_budget_kernel<false> : select_budget_kernel<true>,
                            dim3(unsigned(S)), 1024, in_shared ? bits_bytes : 0, stream, true,
                            ws.chunk_offset, HV, units, tie_bits, p.rho, int64_t(p.min_per_head), head_score,
                            ws.unit_score, in_shared, reinterpret_cast<uint32_t*>(ws.keys), ws.unit_mask);
        if (!err.empty()) return err;
        break;
      }
    case SelectorKind::threshold:
      mark_threshold_kernel<<<unsigned(S), 1024, 0, stream>>>(ws.chunk_offset, HV, units, p.tau,
                                                              ws.unit_score, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_threshold_kernel");
      break;
  }
  // A sparse selector's mask expansion: on the tensor-core path beside the recurrence, which reads the unit
  // mask itself (the expansion's ~7 µs at 16K, and a launch's handoff, off the path to the chains), else
  // before it.
  const bool expand_beside = use_tc && !dense;
  if (!dense && !expand_beside)
    if (std::string e = expand_mask(ws.unit_mask, nullptr, nullptr); !e.empty()) return e;

  // The output stage's arguments (read by the recurrence too where it computes the outputs).
  OutputArgs out{t.q,
                 t.k,
                 ws.group_info,
                 ws.gamma,
                 ws.u,
                 ws.w,
                 ws.snapshots,
                 ws.group_slot,
                 ws.group_log_decay,
                 ws.progress,
                 ws.blocks_done,
                 p.qk_heads,
                 HV,
                 p.key_dim,
                 p.value_dim,
                 p.chunk,
                 out_group,
                 VT,
                 scale,
                 t.o};
  const bool out_bf16 = p.output_dtype == DType::bfloat16;
  // 5. sparse recurrence
  RecurrenceArgs rec{t.k,
                     t.initial_state,
                     ws.seq_start,
                     ws.seq_len,
                     ws.chunk_offset,
                     head_mask,
                     ws.chunk_decay,
                     ws.gamma,
                     ws.u,
                     ws.w,
                     p.qk_heads,
                     HV,
                     p.key_dim,
                     p.value_dim,
                     p.chunk,
                     VT,
                     ws.snapshots,
                     ws.snapshot_chunk,
                     ws.snapshot_count,
                     t.final_state,
                     ws.progress};
  if (expand_beside) {
    rec.mask = ws.unit_mask;
    rec.mask_heads = HV / units;
    out.records_done = ws.records_done;
    out.records_expected = int32_t(S * HV);
  }
  if (fused != Fused::none) {
    using tc::recurrence_out_wg_kernel, tc::recurrence_out_ws_kernel;
    const bool two = fused == Fused::two_warpgroups;
    const auto kernel =
        two ? (out_bf16 ? recurrence_out_wg_kernel<2, 2, __nv_bfloat16>
                        : recurrence_out_wg_kernel<2, 2, float>)
            : (out_bf16 ? recurrence_out_ws_kernel<__nv_bfloat16> : recurrence_out_ws_kernel<float>);
    const size_t smem = two ? tc::fused_smem_bytes<2, 2>() : tc::fused_smem_bytes<2, 1>();
    err = launch_kernel(two ? "recurrence_out_wg_kernel" : "recurrence_out_ws_kernel", kernel,
                        dim3(unsigned(tc::recurrence_tc_blocks(p, two ? 128 : 64))), 256, smem, stream, true,
                        rec, out, u_tc, w_tc);
  } else if (use_tc) {
    const dim3 grid{unsigned(tc::recurrence_tc_blocks(p, rec_columns))};
    const tc::RecurrenceKernel k = tc::recurrence_kernel_for(rec_columns, plan.stages);
    // A multiprocessor that runs a 2-stage recurrence block keeps all of its shared memory (228 KB)
    // configured, so that an output block fits beside it; left alone, the driver configures the least that
    // holds two recurrence blocks (196 KB), and the output block (112 KB) would wait for the recurrence to
    // leave. (Beside a 3-stage block none fits either way, and the default measured faster there.)
    if (plan.stages == 2)
      SGDN_TRY_CUDA(cudaFuncSetAttribute(k.kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         int(cudaSharedmemCarveoutMaxShared)));
    // (The 64-column blocks copy with cp.async and leave the maps unread.)
    err = launch_kernel(k.name, k.kernel, grid, k.threads, k.smem, stream, true, rec, u_tc, w_tc, maps);
  } else {
    const dim3 rec_grid{unsigned(S), unsigned(HV), unsigned(vtiles)};
    err = bf16 ? launch_recurrence<__nv_bfloat16>(p, rec, rec_grid, stream)
               : launch_recurrence<float>(p, rec, rec_grid, stream);
  }
  if (!err.empty()) return err;
  if (expand_beside)
    if (std::string e = expand_mask(ws.unit_mask, nullptr, ws.records_done); !e.empty()) return e;

  // 6. outputs
  const dim3 out_grid{unsigned(nmax), unsigned(HV), unsigned(vtiles)};
  if (fused != Fused::none) {
    // computed with the recurrence
  } else if (use_tc) {
    // Groups of g = out_group chunks, a sequence's last `out_tail` one each: at most Σ ceil(n_s / g) + S tail
    // <= (Σ n_s + S (g − 1)) / g + S tail, and never more than Σ n_s <= nmax.
    const int64_t groups =
        std::min<int64_t>(nmax, (nmax + S * (out_group - 1) + out_group - 1) / out_group + S * out_tail);
    const dim3 grid{unsigned(groups * HV), 1u, 1u};
    const tc::OutputKernel k = tc::output_kernel_for(p, run);
    err = launch_kernel(k.name, k.kernel, grid, k.threads, k.smem, stream, true, out, u_tc, w_tc, maps);
  } else if (bf16)
    err = out_bf16 ? launch_output<__nv_bfloat16, __nv_bfloat16>(p, out, out_grid, stream)
                   : launch_output<__nv_bfloat16, float>(p, out, out_grid, stream);
  else
    err = out_bf16 ? launch_output<float, __nv_bfloat16>(p, out, out_grid, stream)
                   : launch_output<float, float>(p, out, out_grid, stream);
  return err;
}

std::string stage_registers(const Problem& p, StageRegisters* r) {
  *r = {};
  if (std::string e = check_problem(p); !e.empty()) return e;
  if (!p.uses_tensor_cores()) return {};
  int sms = 0;
  if (std::string e = multiprocessors(&sms); !e.empty()) return e;
  const TcPlan plan = tc_plan(p, sms);
  if (plan.fused != Fused::none) return {};
  const tc::RecurrenceKernel recurrence = tc::recurrence_kernel_for(plan.rec_columns, plan.stages);
  const tc::OutputKernel output = tc::output_kernel_for(p, plan.output_run);
  cudaFuncAttributes rec{}, out{}, expand{};
  SGDN_TRY_CUDA(cudaFuncGetAttributes(&rec, recurrence.kernel));
  SGDN_TRY_CUDA(cudaFuncGetAttributes(&out, output.kernel));
  SGDN_TRY_CUDA(cudaFuncGetAttributes(&expand, expand_mask_kernel));
  r->separate = true;
  r->stages = plan.stages;
  r->recurrence_threads = recurrence.threads;
  r->recurrence_registers = rec.numRegs;
  r->output_threads = output.threads;
  r->output_registers = out.numRegs;
  r->expand_threads = kExpandThreads;
  r->expand_registers = expand.numRegs;
  r->recurrence_smem = recurrence.smem;
  r->expand_smem = expand.sharedSizeBytes;
  return {};
}

}  // namespace cuda
}  // namespace sgdn
