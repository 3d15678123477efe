// Building blocks of the tensor-core recurrence that its three forms share (the 32-column blocks, the
// 64-column warpgroup blocks and the one-pass forms): a block's place, the progress publisher, the event
// loop, the state blocks of the warpgroup forms, and the causal decay that the output forms share.
#pragma once
#include <cstdint>

#include "kernels/common/records.h"
#include "kernels/common/sm80.h"
#include "kernels/common/sm90.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {

// A recurrence block's place: (sequence, value head, V tile); its chunks, first snapshot slot and first event
// index. Read after wait_for_previous_grid().
struct ChainPlace {
  int64_t s;
  int hv, tile;
  int64_t n, slot_base, ev_base;
};
__device__ __forceinline__ ChainPlace chain_place_of(const RecurrenceArgs& a, int64_t s, int hv, int tile) {
  ChainPlace p;
  p.tile = tile;
  p.hv = hv;
  p.s = s;
  p.n = a.chunk_offset[p.s + 1] - a.chunk_offset[p.s];
  p.slot_base = snapshot_slot_base(a.chunk_offset[p.s], p.s, a.HV, p.hv, p.n);
  p.ev_base = int64_t(a.chunk_offset[p.s]) * a.HV + int64_t(p.hv) * p.n;
  return p;
}
// One block per (sequence, value head, V tile of `Tiles`), the tile fastest.
template <int Tiles>
__device__ __forceinline__ ChainPlace chain_place(const RecurrenceArgs& a) {
  return chain_place_of(a, blockIdx.x / Tiles / unsigned(a.HV), int(blockIdx.x / Tiles % unsigned(a.HV)),
                        int(blockIdx.x % Tiles));
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
// The chunks visited are span's [first, end) (a whole chain: [0, n)), the first event's snapshot slot the
// given `slot` + 1, the start state's snapshot (slot `slot`) written only where span.write_start.
// Snapshots: `write(slot)` copies Sb to snapshot `slot` (the initial state's first); an event's snapshot is
// written by the next flush() (the event after it calls it while its first products run: before the next
// copies in the warpgroup form with more than 2 stages, after them otherwise; before Sb changes in any case),
// and `chunks` (null but in a head's first block) receives the events' chunks. At the end every chunk is
// published; `drain()` is called before the barriers that precede those publications (snapshots stored
// asynchronously complete there). Returns the log decay after the last event; `slot` is then the number of
// events (the given slot plus the span's).
struct ChainSpan {
  int64_t first, end;
  bool write_start;
};
template <int NS, class Publish, class Fetch, class Wait, class Write, class Drain, class Rescale,
          class Event>
__device__ __forceinline__ float for_each_event(const RecurrenceArgs& a, uint8_t* mask, float* decay,
                                                const ChainPlace& place, Publish& publish, Fetch fetch,
                                                Wait wait, Write write, Drain drain, int32_t* chunks,
                                                Rescale rescale, Event event, int64_t& slot, ChainSpan span) {
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
  if (span.write_start) {
    write(slot);
    if (chunks && threadIdx.x == 0) chunks[slot] = -1;
  }
  // The next buffer after b + k (b < NS, k < NS): no division.
  auto ring = [](int x) { return x >= NS ? x - NS : x; };
  float pending = 0.f;
  int buf = 0;
  for (int64_t w0 = span.first; w0 < span.end; w0 += kWindow) {
    const int wn = int(min_i64(kWindow, span.end - w0));
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
  publish(span.end);
  return pending;
}
// A whole chain: chunks [0, n), from slot 0 (S0's).
template <int NS, class Publish, class Fetch, class Wait, class Write, class Drain, class Rescale,
          class Event>
__device__ __forceinline__ float for_each_event(const RecurrenceArgs& a, uint8_t* mask, float* decay,
                                                const ChainPlace& place, Publish& publish, Fetch fetch,
                                                Wait wait, Write write, Drain drain, int32_t* chunks,
                                                Rescale rescale, Event event, int64_t& slot) {
  return for_each_event<NS>(a, mask, decay, place, publish, fetch, wait, write, drain, chunks, rescale, event,
                            slot, ChainSpan{0, place.n, true});
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
// The factor of A = Q Kᵀ ⊙ D ⊙ lower_incl at row i, column j: e^{γ_i − γ_j} on and below the diagonal, else
// 0 (e^−inf: no branch).
__device__ __forceinline__ float causal_decay(int i, int j, float gamma_i, const float* gam) {
  return exp_ftz(j <= i ? gamma_i - gam[j] : -INFINITY);
}
}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
