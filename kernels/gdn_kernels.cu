// SparseGDN on the GPU (SPEC §3–§7, §12): the kernels and the launcher behind gdn_device.h.
//
// Stages, each one launch, all but the recurrence parallel over chunks (or groups) and value heads:
//   1. chunk table     cu_seqlens -> per-sequence chunk/group offsets, chunk -> sequence, group -> sequence
//   2. prepare         per (chunk, value head): γ (cumulative log decay), L with the solver's band, the
//                      banded forward substitution giving U = T(β⊙V) and W = T(β⊙e^γ⊙K), Γ, and the
//                      score statistic ‖(e^{Γ−γ}⊙K)ᵀU‖_F
//   3. scores          per (sequence, value head): update_norm or survival (backward recurrence for p_c);
//                      then unit scores (summed over the head group under `pair`)
//   4. selection       dense / random / stride / topk / head_budget / threshold, CUB segmented radix sort
//                      for the orderings; then the unit mask is expanded to value heads and budgets counted
//   5. recurrence      per (sequence, value head, V tile): the carried state visits selected events only;
//                      between events it only decays (a scalar accumulated in the exponent); a snapshot is
//                      written after each event; the carried state at every group start is recorded as
//                      (snapshot slot, log decay since)
//   6. outputs         per (group, value head, V tile): start from the group's carried state and run the
//                      dense chunk step over the group's chunks (SPEC §6)
// Everything is fp32 arithmetic on fp32 or bf16 inputs; this is the correct-first version (issue 4);
// tensor cores and fusion come with issue 5.
#include <cub/cub.cuh>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/gdn_device.h"

namespace sgdn {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kValueTile = 64;  // V columns per block in the recurrence and output stages

__device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
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
// Workspace layout: one function carves it for both the size query and the run.
struct Workspace {
  int32_t* seq_start;         // [S]
  int32_t* seq_len;           // [S]
  int32_t* chunk_offset;      // [S + 1]
  int32_t* group_offset;      // [S + 1]
  int32_t* cu_default;        // [2] when cu_seqlens is null
  int32_t* chunk_seq;         // [Nmax]
  int32_t* group_seq;         // [Nmax]
  float* gamma;               // [Nmax, HV, C]
  float* u;                   // [Nmax, HV, C, V]
  float* w;                   // [Nmax, HV, C, K]
  float* chunk_decay;         // [E] event layout: Γ_c
  float* statistic;           // [E]
  float* head_score;          // [E]
  float* unit_score;          // [E] (units <= HV)
  uint8_t* unit_mask;         // [E]
  uint8_t* head_mask;         // [E]
  int32_t* budget;            // [S, HV]
  uint64_t* keys_in;          // [E]
  uint64_t* keys_out;         // [E]
  int32_t* scratch;           // [E] (random selector's permutation)
  int32_t* seg_begin;         // [S * HV]
  int32_t* seg_end;           // [S * HV]
  void* cub_temp;
  size_t cub_temp_bytes;
  float* snapshots;           // [slots, K, V]
  int32_t* snapshot_chunk;    // [slots]
  int32_t* snapshot_count;    // [S, HV]
  int32_t* group_slot;        // [Nmax, HV]
  float* group_log_decay;     // [Nmax, HV]
  size_t total;
};

size_t align_up(size_t x) { return (x + 255) & ~size_t(255); }

size_t cub_sort_bytes(const Problem& p) {
  const int64_t items = p.max_chunks() * p.v_heads;
  const int64_t segments = p.num_seqs * p.v_heads;
  size_t bytes = 0;
  cub::DeviceSegmentedRadixSort::SortKeysDescending(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                                     static_cast<uint64_t*>(nullptr), items, segments,
                                                     static_cast<const int32_t*>(nullptr),
                                                     static_cast<const int32_t*>(nullptr), 0, 64);
  return bytes;
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
  ws.cu_default = static_cast<int32_t*>(take(2 * 4));
  ws.chunk_seq = static_cast<int32_t*>(take(nmax * 4));
  ws.group_seq = static_cast<int32_t*>(take(nmax * 4));
  ws.gamma = static_cast<float*>(take(events * C * 4));
  ws.u = static_cast<float*>(take(events * C * V * 4));
  ws.w = static_cast<float*>(take(events * C * K * 4));
  ws.chunk_decay = static_cast<float*>(take(events * 4));
  ws.statistic = static_cast<float*>(take(events * 4));
  ws.head_score = static_cast<float*>(take(events * 4));
  ws.unit_score = static_cast<float*>(take(events * 4));
  ws.unit_mask = static_cast<uint8_t*>(take(events));
  ws.head_mask = static_cast<uint8_t*>(take(events));
  ws.budget = static_cast<int32_t*>(take(S * hv * 4));
  ws.keys_in = static_cast<uint64_t*>(take(events * 8));
  ws.keys_out = static_cast<uint64_t*>(take(events * 8));
  ws.scratch = static_cast<int32_t*>(take(events * 4));
  ws.seg_begin = static_cast<int32_t*>(take(S * hv * 4));
  ws.seg_end = static_cast<int32_t*>(take(S * hv * 4));
  ws.cub_temp_bytes = cub_sort_bytes(p);
  ws.cub_temp = take(ws.cub_temp_bytes);
  ws.snapshots = static_cast<float*>(take(slots * K * V * 4));
  ws.snapshot_chunk = static_cast<int32_t*>(take(slots * 4));
  ws.snapshot_count = static_cast<int32_t*>(take(S * hv * 4));
  ws.group_slot = static_cast<int32_t*>(take(events * 4));
  ws.group_log_decay = static_cast<float*>(take(events * 4));
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
// 1. Chunk table. cu_seqlens is clamped into [0, total] and made monotone so that bad offsets cannot send a
// kernel out of bounds (the C ABI cannot read them without a synchronisation).
__global__ void sequence_table_kernel(const int32_t* cu_seqlens, int64_t num_seqs, int64_t total, int chunk,
                                      int group, int32_t* seq_start, int32_t* seq_len, int32_t* chunk_offset,
                                      int32_t* group_offset) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int64_t chunks = 0, groups = 0, prev_end = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    int64_t begin = cu_seqlens[s], end = cu_seqlens[s + 1];
    begin = min(max(begin, prev_end), total);
    end = min(max(end, begin), total);
    prev_end = end;
    const int64_t len = end - begin;
    const int64_t n = (len + chunk - 1) / chunk;
    seq_start[s] = int32_t(begin);
    seq_len[s] = int32_t(len);
    chunk_offset[s] = int32_t(chunks);
    group_offset[s] = int32_t(groups);
    chunks += n;
    groups += (n + group - 1) / group;
  }
  chunk_offset[num_seqs] = int32_t(chunks);
  group_offset[num_seqs] = int32_t(groups);
}

__global__ void chunk_owner_kernel(const int32_t* chunk_offset, const int32_t* group_offset, int32_t* chunk_seq,
                                   int32_t* group_seq) {
  const int64_t s = blockIdx.x;
  for (int32_t c = chunk_offset[s] + threadIdx.x; c < chunk_offset[s + 1]; c += blockDim.x) chunk_seq[c] = int32_t(s);
  for (int32_t j = group_offset[s] + threadIdx.x; j < group_offset[s + 1]; j += blockDim.x) group_seq[j] = int32_t(s);
}

__global__ void default_cu_seqlens_kernel(int32_t* cu, int64_t total) {
  cu[0] = 0;
  cu[1] = int32_t(total);
}

// ---------------------------------------------------------------------------------------------------------
// 2. Pre-pass per (chunk, value head). Shared memory: k [C][K], rhs [C][V+K] (β⊙V | β⊙e^γ⊙K, solved in
// place into U | W), L [C][C], γ [C], β [C].
struct PrepareArgs {
  const void* k;
  const void* v;
  const float* g;
  const void* beta;
  const int32_t* seq_start;
  const int32_t* seq_len;
  const int32_t* chunk_offset;
  const int32_t* chunk_seq;
  int64_t num_seqs;
  int H, HV, K, V, C;
  int block, band;  // band < 0: exact
  bool want_statistic;
  float* gamma;
  float* u;
  float* w;
  float* chunk_decay;
  float* statistic;
};

template <class In>
__global__ void __launch_bounds__(kThreads) prepare_kernel(PrepareArgs a) {
  const int64_t id = blockIdx.x;
  const int hv = blockIdx.y;
  if (id >= a.chunk_offset[a.num_seqs]) return;
  const int64_t s = a.chunk_seq[id];
  const int64_t c = id - a.chunk_offset[s];
  const int C = a.C, K = a.K, V = a.V, R = V + K;
  const int64_t t0 = a.seq_start[s] + c * C;
  const int len = int(min_i64(C, a.seq_len[s] - c * C));
  const int h = hv / (a.HV / a.H);

  extern __shared__ float smem[];
  float* ks = smem;              // [C][K]
  float* rhs = ks + C * K;       // [C][R]
  float* lm = rhs + C * R;       // [C][C]
  float* gam = lm + C * C;       // [C]
  float* bet = gam + C;          // [C]
  float* red = bet + C;          // [kThreads / 32]

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
    const bool kept = j < i && (a.band < 0 || (i / a.block) - (j / a.block) <= a.band);
    if (kept) {
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
      const int first = a.band < 0 ? 0 : max(0, (i / a.block - a.band) * a.block);
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
// 3. Scores per (sequence, value head), then unit scores. One block per sequence, one thread per head.
__global__ void score_kernel(const int32_t* chunk_offset, int HV, int units, int ratio, ScoreKind kind,
                             bool skip_own_group, int group, const float* statistic, const float* chunk_decay,
                             float* head_score, float* unit_score) {
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  for (int hv = threadIdx.x; hv < HV; hv += blockDim.x) {
    const float* stat = statistic + base + hv * n;
    const float* decay = chunk_decay + base + hv * n;
    float* out = head_score + base + hv * n;
    if (kind == ScoreKind::none) {
      for (int64_t c = 0; c < n; ++c) out[c] = 0.f;
    } else if (kind == ScoreKind::update_norm) {
      for (int64_t c = 0; c < n; ++c) out[c] = stat[c];
    } else {
      // p_{N-1} = 0, p_c = 1 + e^{Γ_{c+1}} p_{c+1}; accumulate in double as the CPU does.
      double p = 0.0;
      for (int64_t c = n - 1; c >= 0; --c) {
        if (c < n - 1) p = 1.0 + exp(double(decay[c + 1])) * p;
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
  __syncthreads();
  const int per_unit = HV / units;  // r under pair, 1 under head
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0.0;
      for (int j = 0; j < per_unit; ++j) sum += double(head_score[base + (u * per_unit + j) * n + c]);
      unit_score[base + u * n + c] = float(sum);
    }
  }
  (void)ratio;
}

// ---------------------------------------------------------------------------------------------------------
// 4. Selection. Unit arrays of sequence s live at base = chunk_offset[s] * HV, laid out [units, N_s].
__device__ __forceinline__ int64_t budget_of(double rho, int64_t n) { return llround(rho * double(n)); }

// Sort key: the score made order-preserving in the upper 32 bits, and in the lower 32 bits the complement
// of t = c * units + u, so that a descending sort puts equal scores in order of the earlier chunk, then
// the lower unit (the CPU selectors' tie rule).
__device__ __forceinline__ uint64_t score_key(float score, int64_t c, int units, int u) {
  if (score == 0.f) score = 0.f;  // -0 -> +0
  uint32_t bits = __float_as_uint(score);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  const uint32_t t = uint32_t(c * units + u);
  return (uint64_t(bits) << 32) | uint64_t(0xFFFFFFFFu - t);
}
__device__ __forceinline__ void decode_key(uint64_t key, int units, int64_t* c, int* u) {
  const uint32_t t = 0xFFFFFFFFu - uint32_t(key & 0xFFFFFFFFu);
  *c = t / units;
  *u = int(t % units);
}

// Keys and segment bounds; per_unit: one segment per (sequence, unit), else one per sequence.
__global__ void build_keys_kernel(const int32_t* chunk_offset, int HV, int units, const float* unit_score,
                                  bool per_unit, uint64_t* keys, int32_t* seg_begin, int32_t* seg_end) {
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  for (int64_t e = threadIdx.x; e < n * units; e += blockDim.x) {
    const int u = int(e / n);
    const int64_t c = e % n;
    keys[base + e] = score_key(unit_score[base + e], c, units, u);
  }
  if (per_unit) {
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      seg_begin[s * units + u] = int32_t(base + u * n);
      seg_end[s * units + u] = int32_t(base + (u + 1) * n);
    }
  } else if (threadIdx.x == 0) {
    seg_begin[s] = int32_t(base);
    seg_end[s] = int32_t(base + units * n);
  }
}

// Marks the first `keep` entries of each per-unit sorted segment (topk, random, head_budget's floor).
__global__ void mark_top_per_unit_kernel(const int32_t* chunk_offset, int HV, int units, double rho,
                                         int64_t fixed_keep, const uint64_t* sorted, uint8_t* unit_mask) {
  const int64_t s = blockIdx.x;
  const int u = blockIdx.y;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t keep = min_i64(n, fixed_keep >= 0 ? fixed_keep : budget_of(rho, n));
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) {
    int64_t c;
    int uu;
    decode_key(sorted[base + u * n + i], units, &c, &uu);
    unit_mask[base + uu * n + c] = 1;
  }
}

// head_budget: walk the sequence's events in score order and keep the first `remaining` not yet kept.
__global__ void mark_shared_budget_kernel(const int32_t* chunk_offset, int HV, int units, double rho,
                                          int64_t floor_each, const uint64_t* sorted, uint8_t* unit_mask) {
  using BlockScan = cub::BlockScan<int, 1024>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ int64_t taken_before;
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t floor_n = min_i64(floor_each, n);
  const int64_t remaining = budget_of(rho, n * units) - floor_n * units;
  if (threadIdx.x == 0) taken_before = 0;
  __syncthreads();
  for (int64_t tile = 0; tile < n * units; tile += blockDim.x) {
    if (taken_before >= remaining) break;  // uniform: read after a barrier
    const int64_t i = tile + threadIdx.x;
    int64_t c = 0;
    int u = 0;
    int free_slot = 0;
    if (i < n * units) {
      decode_key(sorted[base + i], units, &c, &u);
      free_slot = unit_mask[base + u * n + c] ? 0 : 1;
    }
    int before = 0, tile_total = 0;
    BlockScan(scan_storage).ExclusiveSum(free_slot, before, tile_total);
    if (free_slot && taken_before + before < remaining) unit_mask[base + u * n + c] = 1;
    __syncthreads();
    if (threadIdx.x == 0) taken_before += tile_total;
    __syncthreads();
  }
}

__global__ void mark_dense_stride_kernel(const int32_t* chunk_offset, int HV, int units, bool dense, double rho,
                                         uint8_t* unit_mask) {
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  if (dense) {
    for (int64_t e = threadIdx.x; e < n * units; e += blockDim.x) unit_mask[base + e] = 1;
    return;
  }
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
__global__ void mark_random_kernel(const int32_t* chunk_offset, int64_t num_seqs, int HV, int units, double rho,
                                   uint64_t seed, int32_t* scratch, uint8_t* unit_mask) {
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

// Unit mask -> value-head mask, and the budget each unit received.
__global__ void expand_mask_kernel(const int32_t* chunk_offset, int HV, int units, const uint8_t* unit_mask,
                                   uint8_t* head_mask, int32_t* budget) {
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int per_unit = HV / units;
  for (int64_t e = threadIdx.x; e < n * HV; e += blockDim.x) {
    const int64_t hv = e / n, c = e % n;
    head_mask[base + e] = unit_mask[base + (hv / per_unit) * n + c];
  }
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    int32_t kept = 0;
    for (int64_t c = 0; c < n; ++c) kept += unit_mask[base + u * n + c];
    budget[s * units + u] = kept;
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
  const int32_t* group_offset;
  const uint8_t* head_mask;
  const float* chunk_decay;
  const float* gamma;
  const float* u;
  const float* w;
  int H, HV, K, V, C, G, VT;
  float* snapshots;
  int32_t* snapshot_chunk;
  int32_t* snapshot_count;
  int32_t* group_slot;
  float* group_log_decay;
  float* final_state;
};

template <class In>
__global__ void __launch_bounds__(kThreads) recurrence_kernel(RecurrenceArgs a) {
  const int64_t s = blockIdx.x;
  const int hv = blockIdx.y;
  const int col0 = blockIdx.z * a.VT;
  const int K = a.K, V = a.V, C = a.C, VT = a.VT;
  const int h = hv / (a.HV / a.H);
  const int64_t n = a.chunk_offset[s + 1] - a.chunk_offset[s];
  const int64_t slot_base = (int64_t(a.chunk_offset[s]) + s) * a.HV + int64_t(hv) * (n + 1);
  const int64_t ev_base = int64_t(a.chunk_offset[s]) * a.HV + int64_t(hv) * n;

  extern __shared__ float smem[];
  float* state = smem;             // [K][VT]
  float* vnew = state + K * VT;    // [C][VT]
  float* kend = vnew + C * VT;     // [C][K]

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
    if (c % a.G == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
      const int64_t gid = a.group_offset[s] + c / a.G;
      a.group_slot[gid * a.HV + hv] = int32_t(slot);
      a.group_log_decay[gid * a.HV + hv] = pending;
    }
    const float big_gamma = a.chunk_decay[ev_base + c];
    if (!a.head_mask[ev_base + c]) {
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
  const int32_t* seq_start;
  const int32_t* seq_len;
  const int32_t* chunk_offset;
  const int32_t* group_offset;
  const int32_t* group_seq;
  const float* gamma;
  const float* u;
  const float* w;
  const float* snapshots;
  const int32_t* group_slot;
  const float* group_log_decay;
  int64_t num_seqs;
  int H, HV, K, V, C, G, VT;
  float scale;
  void* o;
};

template <class In, class Out>
__global__ void __launch_bounds__(kThreads) output_kernel(OutputArgs a) {
  const int64_t gid = blockIdx.x;
  const int hv = blockIdx.y;
  const int col0 = blockIdx.z * a.VT;
  if (gid >= a.group_offset[a.num_seqs]) return;
  const int K = a.K, V = a.V, C = a.C, VT = a.VT;
  const int h = hv / (a.HV / a.H);
  const int64_t s = a.group_seq[gid];
  const int64_t n = a.chunk_offset[s + 1] - a.chunk_offset[s];
  const int64_t first = (gid - a.group_offset[s]) * a.G;
  const int64_t last = min_i64(n, first + a.G);
  const int64_t slot_base = (int64_t(a.chunk_offset[s]) + s) * a.HV + int64_t(hv) * (n + 1);

  extern __shared__ float smem[];
  float* state = smem;           // [K][VT]
  float* qs = state + K * VT;    // [C][K]
  float* ks = qs + C * K;        // [C][K]
  float* vs = ks + C * K;        // [C][VT]
  float* am = vs + C * VT;       // [C][C]
  float* gam = am + C * C;       // [C]

  {
    const int32_t slot = a.group_slot[gid * a.HV + hv];
    const float carried = __expf(a.group_log_decay[gid * a.HV + hv]);
    const float* src = a.snapshots + (slot_base + slot) * K * V;
    for (int e = threadIdx.x; e < K * VT; e += blockDim.x) state[e] = src[(e / VT) * V + col0 + e % VT] * carried;
  }
  const In* qp = static_cast<const In*>(a.q);
  const In* kp = static_cast<const In*>(a.k);
  Out* op = static_cast<Out*>(a.o);
  for (int64_t c = first; c < last; ++c) {
    const int64_t id = a.chunk_offset[s] + c;
    const int64_t t0 = a.seq_start[s] + c * C;
    const int len = int(min_i64(C, a.seq_len[s] - c * C));
    const int64_t cslot = id * a.HV + hv;
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
#define SGDN_TRY_CUDA(call)                                                                           \
  do {                                                                                                \
    cudaError_t status_ = (call);                                                                     \
    if (status_ != cudaSuccess)                                                                       \
      return std::string("CUDA error in ") + #call + ": " + cudaGetErrorString(status_);              \
  } while (0)
#define SGDN_TRY_LAUNCH(what)                                                                         \
  do {                                                                                                \
    cudaError_t status_ = cudaGetLastError();                                                         \
    if (status_ != cudaSuccess) return std::string("CUDA error after ") + what + ": " + cudaGetErrorString(status_); \
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

template <class In>
std::string launch_prepare(const Problem& p, const PrepareArgs& args, dim3 grid, cudaStream_t stream) {
  const size_t smem = prepare_smem(p);
  SGDN_TRY_CUDA(cudaFuncSetAttribute(prepare_kernel<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  prepare_kernel<In><<<grid, kThreads, smem, stream>>>(args);
  SGDN_TRY_LAUNCH("prepare_kernel");
  return {};
}
template <class In>
std::string launch_recurrence(const Problem& p, const RecurrenceArgs& args, dim3 grid, cudaStream_t stream) {
  const size_t smem = recurrence_smem(p);
  SGDN_TRY_CUDA(cudaFuncSetAttribute(recurrence_kernel<In>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  recurrence_kernel<In><<<grid, kThreads, smem, stream>>>(args);
  SGDN_TRY_LAUNCH("recurrence_kernel");
  return {};
}
template <class In, class Out>
std::string launch_output(const Problem& p, const OutputArgs& args, dim3 grid, cudaStream_t stream) {
  const size_t smem = output_smem(p);
  SGDN_TRY_CUDA(cudaFuncSetAttribute(output_kernel<In, Out>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  output_kernel<In, Out><<<grid, kThreads, smem, stream>>>(args);
  SGDN_TRY_LAUNCH("output_kernel");
  return {};
}

// With SGDN_CUDA_STAGE_TIMING=1 in the environment, forward() records an event after each stage and prints
// the stage times to stderr at the end (synchronising: a measuring aid for issue 5, never on by default).
class StageTimer {
 public:
  explicit StageTimer(cudaStream_t stream) : stream_(stream) {
    const char* env = std::getenv("SGDN_CUDA_STAGE_TIMING");
    enabled_ = env && env[0] == '1';
    mark("start");
  }
  void mark(const char* name) {
    if (!enabled_ || count_ >= kMax) return;
    cudaEventCreate(&events_[count_]);
    cudaEventRecord(events_[count_], stream_);
    names_[count_++] = name;
  }
  ~StageTimer() {
    if (!enabled_) return;
    cudaEventSynchronize(events_[count_ - 1]);
    float total = 0.f;
    for (int i = 1; i < count_; ++i) {
      float ms = 0.f;
      cudaEventElapsedTime(&ms, events_[i - 1], events_[i]);
      total += ms;
      std::fprintf(stderr, "sgdn_cuda stage %-12s %9.3f ms\n", names_[i], ms);
    }
    std::fprintf(stderr, "sgdn_cuda stage %-12s %9.3f ms\n", "total", total);
    for (int i = 0; i < count_; ++i) cudaEventDestroy(events_[i]);
  }

 private:
  static constexpr int kMax = 8;
  cudaStream_t stream_;
  bool enabled_ = false;
  int count_ = 0;
  cudaEvent_t events_[kMax];
  const char* names_[kMax];
};

}  // namespace

const char* selector_name(SelectorKind s) {
  switch (s) {
    case SelectorKind::dense: return "dense";
    case SelectorKind::random: return "random";
    case SelectorKind::stride: return "stride";
    case SelectorKind::topk: return "topk";
    case SelectorKind::head_budget: return "head_budget";
    case SelectorKind::threshold: return "threshold";
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
    return msg("v_heads = ", std::to_string(p.v_heads), " is not a multiple of qk_heads = ", std::to_string(p.qk_heads));
  if (p.v_heads > kMaxValueHeads) return msg("v_heads = ", std::to_string(p.v_heads), " exceeds 1024");
  for (auto [name, dim] : {std::pair<const char*, int>{"key_dim", p.key_dim}, {"value_dim", p.value_dim}})
    if (dim < 16 || dim > kMaxHeadDim || dim % 16 != 0)
      return msg(name, " = ", std::to_string(dim), " is not supported by the CUDA backend; allowed: 16, 32, ..., 128");
  if (p.chunk < 1 || p.chunk > kMaxChunk)
    return msg("chunk = ", std::to_string(p.chunk), " is not supported by the CUDA backend; allowed: 1..64");
  if (p.group < 1) return msg("group = ", std::to_string(p.group), " must be >= 1");
  if (p.solver_block < 1 || p.chunk % p.solver_block != 0)
    return msg("solver block = ", std::to_string(p.solver_block), " does not divide chunk = ", std::to_string(p.chunk));
  if (!(p.rho > 0 && p.rho <= 1)) return msg("selector rho = ", std::to_string(p.rho), " is outside (0, 1]");
  if (!(p.tau >= 0)) return "selector tau must be >= 0";
  if (p.min_per_head < 0) return "selector min_per_head must be >= 0";
  const bool uses_scores = p.selector == SelectorKind::topk || p.selector == SelectorKind::head_budget ||
                           p.selector == SelectorKind::threshold;
  if (uses_scores && p.score == ScoreKind::none)
    return msg("selector '", selector_name(p.selector), "' needs a score (update_norm or survival)");
  if (int(p.input_dtype) < 0 || int(p.input_dtype) > 1 || int(p.output_dtype) < 0 || int(p.output_dtype) > 1)
    return "dtype must be float32 or bfloat16";
  if (int64_t(p.max_chunks()) * p.v_heads >= (int64_t(1) << 31)) return "too many chunks x heads for 32-bit indices";
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

  StageTimer timer(stream);
  // 1. chunk table
  const int32_t* cu = t.cu_seqlens;
  if (!cu) {
    if (S != 1) return "cu_seqlens is required when num_seqs > 1";
    default_cu_seqlens_kernel<<<1, 1, 0, stream>>>(ws.cu_default, p.total_tokens);
    SGDN_TRY_LAUNCH("default_cu_seqlens_kernel");
    cu = ws.cu_default;
  }
  sequence_table_kernel<<<1, 1, 0, stream>>>(cu, S, p.total_tokens, p.chunk, p.group, ws.seq_start, ws.seq_len,
                                             ws.chunk_offset, ws.group_offset);
  SGDN_TRY_LAUNCH("sequence_table_kernel");
  chunk_owner_kernel<<<unsigned(S), kThreads, 0, stream>>>(ws.chunk_offset, ws.group_offset, ws.chunk_seq, ws.group_seq);
  SGDN_TRY_LAUNCH("chunk_owner_kernel");
  SGDN_TRY_CUDA(cudaMemsetAsync(ws.unit_mask, 0, size_t(nmax) * HV, stream));

  timer.mark("table");
  // 2. pre-pass
  PrepareArgs prep{t.k, t.v, t.g, t.beta, ws.seq_start, ws.seq_len, ws.chunk_offset, ws.chunk_seq, S,
                   p.qk_heads, HV, p.key_dim, p.value_dim, p.chunk, p.solver_block,
                   p.solver_band >= p.chunk / p.solver_block ? -1 : p.solver_band, p.score != ScoreKind::none,
                   ws.gamma, ws.u, ws.w, ws.chunk_decay, ws.statistic};
  const dim3 chunk_grid{unsigned(nmax), unsigned(HV), 1u};
  std::string err = bf16 ? launch_prepare<__nv_bfloat16>(p, prep, chunk_grid, stream)
                         : launch_prepare<float>(p, prep, chunk_grid, stream);
  if (!err.empty()) return err;

  timer.mark("prepare");
  // 3. scores
  score_kernel<<<unsigned(S), min(HV, 1024), 0, stream>>>(ws.chunk_offset, HV, units, p.ratio(), p.score,
                                                         p.survival_skip_own_group, p.group, ws.statistic,
                                                         ws.chunk_decay, head_score, ws.unit_score);
  SGDN_TRY_LAUNCH("score_kernel");

  timer.mark("scores");
  // 4. selection
  auto sort_keys = [&](bool per_unit) -> std::string {
    build_keys_kernel<<<unsigned(S), kThreads, 0, stream>>>(ws.chunk_offset, HV, units, ws.unit_score, per_unit,
                                                             ws.keys_in, ws.seg_begin, ws.seg_end);
    SGDN_TRY_LAUNCH("build_keys_kernel");
    size_t temp = ws.cub_temp_bytes;
    SGDN_TRY_CUDA(cub::DeviceSegmentedRadixSort::SortKeysDescending(
        ws.cub_temp, temp, ws.keys_in, ws.keys_out, nmax * HV, per_unit ? S * units : S, ws.seg_begin, ws.seg_end,
        0, 64, stream));
    return {};
  };
  switch (p.selector) {
    case SelectorKind::dense:
    case SelectorKind::stride:
      mark_dense_stride_kernel<<<unsigned(S), kThreads, 0, stream>>>(ws.chunk_offset, HV, units,
                                                                      p.selector == SelectorKind::dense, p.rho,
                                                                      ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_dense_stride_kernel");
      break;
    case SelectorKind::random: {
      const int64_t tasks = S * units;
      mark_random_kernel<<<unsigned((tasks + 127) / 128), 128, 0, stream>>>(ws.chunk_offset, S, HV, units, p.rho,
                                                                              p.seed, ws.scratch, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_random_kernel");
      break;
    }
    case SelectorKind::topk:
      if (std::string e = sort_keys(true); !e.empty()) return e;
      mark_top_per_unit_kernel<<<dim3(unsigned(S), unsigned(units)), kThreads, 0, stream>>>(
          ws.chunk_offset, HV, units, p.rho, -1, ws.keys_out, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_top_per_unit_kernel");
      break;
    case SelectorKind::head_budget:
      if (p.min_per_head > 0) {
        if (std::string e = sort_keys(true); !e.empty()) return e;
        mark_top_per_unit_kernel<<<dim3(unsigned(S), unsigned(units)), kThreads, 0, stream>>>(
            ws.chunk_offset, HV, units, p.rho, p.min_per_head, ws.keys_out, ws.unit_mask);
        SGDN_TRY_LAUNCH("mark_top_per_unit_kernel");
      }
      if (std::string e = sort_keys(false); !e.empty()) return e;
      mark_shared_budget_kernel<<<unsigned(S), 1024, 0, stream>>>(ws.chunk_offset, HV, units, p.rho, p.min_per_head,
                                                                  ws.keys_out, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_shared_budget_kernel");
      break;
    case SelectorKind::threshold:
      mark_threshold_kernel<<<unsigned(S), 1024, 0, stream>>>(ws.chunk_offset, HV, units, p.tau, ws.unit_score,
                                                              ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_threshold_kernel");
      break;
  }
  expand_mask_kernel<<<unsigned(S), kThreads, 0, stream>>>(ws.chunk_offset, HV, units, ws.unit_mask, head_mask, budget);
  SGDN_TRY_LAUNCH("expand_mask_kernel");

  timer.mark("selection");
  // 5. sparse recurrence
  RecurrenceArgs rec{t.k, t.initial_state, ws.seq_start, ws.seq_len, ws.chunk_offset, ws.group_offset, head_mask,
                     ws.chunk_decay, ws.gamma, ws.u, ws.w, p.qk_heads, HV, p.key_dim, p.value_dim, p.chunk,
                     p.group, VT, ws.snapshots, ws.snapshot_chunk, ws.snapshot_count, ws.group_slot,
                     ws.group_log_decay, t.final_state};
  const dim3 rec_grid{unsigned(S), unsigned(HV), unsigned(vtiles)};
  err = bf16 ? launch_recurrence<__nv_bfloat16>(p, rec, rec_grid, stream)
             : launch_recurrence<float>(p, rec, rec_grid, stream);
  if (!err.empty()) return err;

  timer.mark("recurrence");
  // 6. outputs
  OutputArgs out{t.q, t.k, ws.seq_start, ws.seq_len, ws.chunk_offset, ws.group_offset, ws.group_seq, ws.gamma,
                 ws.u, ws.w, ws.snapshots, ws.group_slot, ws.group_log_decay, S, p.qk_heads, HV, p.key_dim,
                 p.value_dim, p.chunk, p.group, VT, scale, t.o};
  const dim3 out_grid{unsigned(nmax), unsigned(HV), unsigned(vtiles)};
  const bool out_bf16 = p.output_dtype == DType::bfloat16;
  if (bf16)
    err = out_bf16 ? launch_output<__nv_bfloat16, __nv_bfloat16>(p, out, out_grid, stream)
                   : launch_output<__nv_bfloat16, float>(p, out, out_grid, stream);
  else
    err = out_bf16 ? launch_output<float, __nv_bfloat16>(p, out, out_grid, stream)
                   : launch_output<float, float>(p, out, out_grid, stream);
  timer.mark("outputs");
  return err;
}

}  // namespace cuda
}  // namespace sgdn
