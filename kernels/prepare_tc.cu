// Stage 2 on the tensor cores: per (chunk, value head) γ, L with the solver's band, T = (I + L)^-1 in fp32,
// U = T diag(β) V and W = T diag(β e^γ) K in bf16 by warpgroup products, Γ and the score statistic.
#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/common/sm80.h"
#include "kernels/common/sm90.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {
namespace {

// ---- prepare: γ, L (band), T = (I + L)^-1 in fp32, U = T diag(β) V, W = T diag(β e^γ) K in bf16, Γ,
// statistic. 128 threads (4 warps, one warpgroup); warp w owns rows 16w..16w+15 of every 64-row product.
// Shared memory, 53 KB so that 4 blocks share a multiprocessor: K; L (fp32), then V; T (fp32), then W and U.
constexpr int kLdL = kC + 8;   // fp32 row stride of L
constexpr int kLdTm = kC + 4;  // fp32 row stride of T
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

}  // namespace

std::string launch_prepare_tc(const Problem& p, const PrepareArgs& args, const RecTmaMaps& maps,
                              int multiprocessors, cudaStream_t stream) {
  PrepareArgs prep = args;
  // The pre-pass's L2 prefetch: one wave of blocks ahead (four per multiprocessor), in chunks (none, two or
  // three waves ahead measured slower).
  prep.prefetch_ahead = (int64_t(4) * multiprocessors + p.v_heads - 1) / p.v_heads;
  prep.l_blocks = l_block_bits(prep.block, prep.band);
  const auto kernel = prep.want_statistic ? prepare_tc_kernel<true> : prepare_tc_kernel<false>;
  return launch_kernel("prepare_tc_kernel", kernel, dim3(unsigned(p.max_chunks() * p.v_heads)), kPrepThreads,
                       kPrepSmemBytes, stream, true, prep, maps);
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
