// Stage 5 on the tensor cores, the 64-column form: per (sequence, value head, 64 V columns) one warpgroup
// whose event products are wgmma products with the state as the accumulator.
#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/common/sm80.h"
#include "kernels/common/sm90.h"
#include "kernels/common/tc_blocks.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {
namespace {

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
template <int NS>
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
            *reinterpret_cast<uint32_t*>(sm.vh + sw128(r, col)) = pack_bf16(x0 * f, x1 * f);
          }
        }
        fence_proxy_async();
        __syncthreads();
        if (c + 1 - publish.published >= kPublishEvery) publish(c + 1);
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

}  // namespace

RecurrenceKernel wide_recurrence_kernel(int stages) {
  constexpr const char* kName = "recurrence_wg_kernel";
  return stages == 2 ? RecurrenceKernel{recurrence_wg_kernel<2>, kName, kWgThreads, wg_smem_bytes<2>()}
                     : RecurrenceKernel{recurrence_wg_kernel<3>, kName, kWgThreads, wg_smem_bytes<3>()};
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
