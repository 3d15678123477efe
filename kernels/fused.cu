// Stages 5 and 6 in one pass on the tensor cores: the dense selector's recurrence computing each chunk's
// outputs while the chunk's start state is on the multiprocessor (G = 1, packed batches).
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
// and written only after it, so one copy serves. (The snapshots and Q's copy are the outputs' part, off the
// chain: 2 % faster.)
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

}  // namespace

std::string launch_fused(const Problem& p, Fused form, const RecurrenceArgs& rec, const OutputArgs& out,
                         const bf16* u, const bf16* w, cudaStream_t stream) {
  const bool two = form == Fused::two_warpgroups, out_bf16 = p.output_dtype == DType::bfloat16;
  const auto kernel =
      two ? (out_bf16 ? recurrence_out_wg_kernel<2, 2, bf16> : recurrence_out_wg_kernel<2, 2, float>)
          : (out_bf16 ? recurrence_out_ws_kernel<bf16> : recurrence_out_ws_kernel<float>);
  const size_t smem = two ? fused_smem_bytes<2, 2>() : fused_smem_bytes<2, 1>();
  return launch_kernel(two ? "recurrence_out_wg_kernel" : "recurrence_out_ws_kernel", kernel,
                       dim3(unsigned(recurrence_tc_blocks(p, two ? 128 : 64))), 256, smem, stream, true, rec,
                       out, u, w);
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
