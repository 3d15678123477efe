// The fp32 path (any supported shape, fp32 or bf16 inputs): stage 2, the pre-pass, stage 5, the sparse
// recurrence, and stage 6, the outputs, in fp32 arithmetic on CUDA cores.
#include <cuda_bf16.h>

#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace {

// ---------------------------------------------------------------------------------------------------------
// 2. Pre-pass per (chunk, value head). Shared memory: k [C][K], rhs [C][V+K] (β⊙V | β⊙e^γ⊙K, solved in
// place into U | W), L [C][C], γ [C], β [C].
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
// 5. The sparse recurrence per (sequence, value head, V tile). Shared: state [K][VT], v̂ [C][VT],
// e^{Γ−γ}⊙K [C][K]. Only selected chunks do matrix work; the others add Γ to the pending log decay.
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

size_t prepare_smem(const Problem& p) {
  const size_t C = p.chunk, K = p.key_dim, V = p.value_dim;
  return (C * K + C * (V + K) + C * C + 2 * C + kThreads / 32) * sizeof(float);
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

int value_tile(const Problem& p) {
  for (int tile = kValueTile; tile > 16; tile /= 2)
    if (p.value_dim % tile == 0) return tile;
  return 16;
}

std::string launch_prepare_fp32(const Problem& p, const PrepareArgs& args, cudaStream_t stream) {
  const dim3 grid{unsigned(p.max_chunks()), unsigned(p.v_heads), 1u};
  return p.input_dtype == DType::bfloat16 ? launch_prepare<__nv_bfloat16>(p, args, grid, stream)
                                          : launch_prepare<float>(p, args, grid, stream);
}

std::string launch_recurrence_fp32(const Problem& p, const RecurrenceArgs& args, cudaStream_t stream) {
  const dim3 grid{unsigned(p.num_seqs), unsigned(p.v_heads), unsigned(p.value_dim / value_tile(p))};
  return p.input_dtype == DType::bfloat16 ? launch_recurrence<__nv_bfloat16>(p, args, grid, stream)
                                          : launch_recurrence<float>(p, args, grid, stream);
}

std::string launch_outputs_fp32(const Problem& p, const OutputArgs& args, cudaStream_t stream) {
  const dim3 grid{unsigned(p.max_chunks()), unsigned(p.v_heads), unsigned(p.value_dim / value_tile(p))};
  const bool in_bf16 = p.input_dtype == DType::bfloat16, out_bf16 = p.output_dtype == DType::bfloat16;
  if (in_bf16)
    return out_bf16 ? launch_output<__nv_bfloat16, __nv_bfloat16>(p, args, grid, stream)
                    : launch_output<__nv_bfloat16, float>(p, args, grid, stream);
  return out_bf16 ? launch_output<float, __nv_bfloat16>(p, args, grid, stream)
                  : launch_output<float, float>(p, args, grid, stream);
}

}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
