// Stage 6 on the tensor cores: per (output group, value head) 256 threads over all 128 V columns, each chunk
// from its group's start state, the blocks beside the recurrence waiting on its progress flags.
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

// ---- outputs: per (group, value head), 256 threads, all 128 V columns. Per chunk of the group, with S its
// start state (S_loc; the first chunk's is the snapshot times e^{pending}):
//   O = scale (e^γ ⊙ (Q S) + A (U − W S)) = scale (Q̃ S + A U),
//   A = Q Kᵀ ⊙ D ⊙ lower_incl,  Q̃ = e^γ ⊙ Q − A W,
// so that A, Q̃ and P = A U are computed from the chunk's own operands while the block waits for the
// recurrence, and only Q̃ S is left once the state arrives (one product instead of W S, Q S and A v).
// Warp w: rows 16 (w & 3).., columns 64 (w >> 2)..  With G > 1 the fp32 S_loc is kept in shared memory and
// updated by S_loc = e^Γ S_loc + Kᵀ (e^{Γ−γ} ⊙ (U − W S)) (warp w: rows 16w.., all 128 columns).
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
  bf16 u[kC * kD];
  float gam[kC];
  uint64_t bar[3];  // the tensor copies of Q, K, γ; of W, U; of the snapshot
};

// Each output block ends here. The last one to finish waits for the grid before it (the recurrence, or the
// mask expansion beside it, whose last block waits for the recurrence) to complete, so that the output grid
// completes after the recurrence and the work behind it in the stream may rely on all of them (the other
// blocks leave at once: their multiprocessors go to the next output blocks while the recurrence runs).
__device__ __forceinline__ void finish_output_block(int32_t* blocks_done) {
  if (threadIdx.x == 0 && atomicAdd(blocks_done, 1) == int32_t(gridDim.x) - 1) wait_for_previous_grid();
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

// Runs (G = 1): each block takes a run of a.G chunks (the table's groups), each chunk from its own
// start state, whose record (snapshot slot, pending decay) is per chunk.
// The kernels are output_tc_kernel (mma.sync) and output_wg_kernel (the warpgroup form), below.
template <class Out, bool Runs, bool Wg, bool Tma>
__device__ __forceinline__ void output_tc_block(OutputArgs a, const bf16* u_all, const bf16* w_all,
                                                const RecTmaMaps& tma) {
  static_assert(!Tma || Wg, "tensor copies only in the warpgroup form");
  constexpr int kUnroll = 8;  // the copies and the stores of O unrolled, issued back to back
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
  // needs (Q, K, γ), then W and U.
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
    copy_rows_at<kOutThreads, true>(sm.q, tile_at, qp + (t0 * a.H + h) * kD, int64_t(a.H) * kD, len);
    copy_rows_at<kOutThreads, true>(sm.k, tile_at, kp + (t0 * a.H + h) * kD, int64_t(a.H) * kD, len);
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
    } else {
      const int64_t cslot = chunk_place(gi, c, kC, a.HV, hv).cslot;
      copy_rows_at<kOutThreads, true>(sm.w, tile_at, w_all + cslot * kC * kD, kD, kC);
      copy_rows_at<kOutThreads, true>(sm.u, tile_at, u_all + cslot * kC * kD, kD, kC);
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
  // The snapshot (bf16, copied as is), written by the recurrence while this grid
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
      copy_rows_at<kOutThreads, true>(
          sm.sb, state_at, reinterpret_cast<const bf16*>(a.snapshots) + (slot_base + slot) * kD * V, kD, kD,
          kD);
    }
  };
  auto fetch_state = [&]() {
    copy_snapshot(start_slot);
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
  // groups committed after Q, K, γ's and after W and U's, for the
  // waits below.
  int qk_behind = 1, wu_behind = 0;
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
    if (c > first && !runs) qk_behind = 1, wu_behind = 0;
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
      __syncthreads();  // W and U; both warpgroups are done reading Q
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
            *reinterpret_cast<uint32_t*>(sm.q + sw128(i, wn + nt * 8 + tq * 2)) = pack_bf16(
                carried * (e * x.x - aw[4 * nt + 2 * half]), carried * (e * x.y - aw[4 * nt + 2 * half + 1]));
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
      __syncthreads();  // A, W and U; every warp is done reading Q
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
            *qv =
                pack_bf16(carried * (e * x.x - aw[nt][2 * half]), carried * (e * x.y - aw[nt][2 * half + 1]));
          }
        }
      }
      cp_async_wait_all();
      __syncthreads();  // Q̃ and Sb
      // O = scale (Q̃ Sb + P)
      warp_tile_mma<4, kD, false, false>(acc, sm.q, kLd, wm, sm.sb, kLd, wn);
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
    if (!Wg && !runs && c + 1 < last) {
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
template <class Out>
__global__ void __launch_bounds__(kOutThreads)
    output_tc_kernel(OutputArgs a, const bf16* u_all, const bf16* w_all,
                     const __grid_constant__ RecTmaMaps tma) {
  output_tc_block<Out, false, false, false>(a, u_all, w_all, tma);
}
// Two blocks per multiprocessor, at most 128 registers; at most 120 where one runs beside a 2-stage
// 32-column recurrence block of 9 warps at up to 88 (the multiprocessor's quarter that holds three of its
// warps and two of this block's: 3 x 88 + 2 x 120 = 504 of 512 registers a lane; test `[registers]`): the
// dense selector's blocks (no tensor copies or runs, see output_kernel_for), and those with
// fp32 outputs (a capped selector's 2-stage chains at B = 1). The dense blocks at 123, after a change
// elsewhere (two fields more in OutputArgs), no longer fitted there and the dense forwards at B = 1 were
// 10-14 % slower (v51); the sparse runs' blocks with fp32 outputs had 121 until v52. The bf16 blocks with
// tensor copies (109 in runs, 122 for one chunk since v54's Q̃ loads) keep the limit they were timed with.
template <class Out, bool Runs, bool Tma>
constexpr int output_wg_registers() {
  return std::is_same_v<Out, float> || (!Tma && !Runs) ? 120 : 128;
}
template <class Out, bool Runs, bool Tma>
__global__ void __launch_bounds__(kOutThreads) __maxnreg__((output_wg_registers<Out, Runs, Tma>()))
    output_wg_kernel(OutputArgs a, const bf16* u_all, const bf16* w_all,
                     const __grid_constant__ RecTmaMaps tma) {
  output_tc_block<Out, Runs, true, Tma>(a, u_all, w_all, tma);
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
    return {output_tc_kernel<Out>, "output_tc_kernel", kOutThreads, output_tc_smem(true, false)};
  const size_t smem = output_tc_smem(false, true);
  if (run > 1) return {output_wg_kernel<Out, true, true>, "output_wg_kernel", kOutThreads, smem};
  if (p.selector != SelectorKind::dense)
    return {output_wg_kernel<Out, false, true>, "output_wg_kernel", kOutThreads, smem};
  return {output_wg_kernel<Out, false, false>, "output_wg_kernel", kOutThreads, smem};
}

}  // namespace

OutputKernel output_kernel(const Problem& p, const TcPlan& plan) {
  const int run = plan.output_run;
  return p.output_dtype == DType::bfloat16 ? output_kernel_for<bf16>(p, run)
                                           : output_kernel_for<float>(p, run);
}

std::string launch_outputs_tc(const Problem& p, const TcPlan& plan, const OutputArgs& args, const bf16* u,
                              const bf16* w, const RecTmaMaps& maps, cudaStream_t stream, bool early) {
  // Groups of g = args.G chunks, a sequence's last `tail` one each: at most Σ ceil(n_s / g) + S tail
  // <= (Σ n_s + S (g − 1)) / g + S tail, and never more than Σ n_s <= nmax.
  const int64_t nmax = p.max_chunks(), S = p.num_seqs, g = args.G;
  const int64_t tail = plan.output_run > 1 ? kOutputTail : 0;
  const int64_t groups = std::min<int64_t>(nmax, (nmax + S * (g - 1) + g - 1) / g + S * tail);
  const OutputKernel k = output_kernel(p, plan);
  return launch_kernel(k.name, k.kernel, dim3(unsigned(groups * p.v_heads)), k.threads, k.smem, stream, early,
                       args, u, w, maps);
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
