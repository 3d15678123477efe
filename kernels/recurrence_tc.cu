// Stage 5 on the tensor cores, the 32-column form: per (sequence, value head, 32 V columns) a block of 8
// math warps and a producer warp that visits the selected events, the event's products as warpgroup
// products; and the launch of the separate recurrence that the plan picks.
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

// Per (sequence, value head, 32 V columns): 8 math warps (two per scheduler) and a producer warp. The state
// tile (128 x 32 fp32) lives in registers, warp w owning rows 16w... Each selected event, with Sb = bf16(S)
// as the last event left it (shared) and S = e^{pending} x that state (the skipped chunks since):
//   v̂ = U − e^{pending} W Sb (one warpgroup product, 64 x 32, k = 128, on warps 0-3);  Vh = bf16(e^{Γ−γ} ⊙
//   v̂); S = e^Γ S + Kᵀ Vh (warpgroup g the state rows 64g..);  Sb = bf16(S), which is also the snapshot,
//   copied out of shared memory by one tensor copy (TMA) during the next event.
// Two barriers per event (Sb written, Vh written), whether or not chunks were skipped before it. The next
// NS − 1 selected events' W, K, U, γ are in flight (TMA, NS stages), the next one's issued as an event
// starts: NS = 4 (164 KB of shared memory) keeps a lone busy chain fed; NS = 2 (90 KB) leaves room on the
// multiprocessor for an output block (or a second recurrence block) beside it, which pays where every chain
// is busy. The copied tiles come from the tensor memory accelerator (one thread issues an event's copies;
// they complete on the stage's mbarrier) in its swizzled layouts, whose 16-byte pieces are permuted by the
// row so that the rows the epilogue reads fall in distinct banks: W and K as sw128 (two 64-column halves),
// U's 32 columns with the 64-byte swizzle (piece p of row r at p ^ ((r >> 1) & 3), two rows per 128-byte
// line). (swz_u, RecStage and RecSmem also describe 64 columns, for the static checks of the layouts.)
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
  bf16 u[kC * VT];
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
  alignas(1024) bf16 vh[kC * kLdT];  // swz_u<VT> (the room of a kLdT row stride)
  uint8_t mask[kWindow];
  float decay[kWindow];
  uint64_t full[NS];  // a stage's copies complete here
};
template <int NS, int VT>
constexpr size_t rec_smem_bytes() {
  return sizeof(RecSmem<NS, VT>) + 1024;  // and the alignment of the block's region to 1024 bytes
}
// The producer warp after the 8 math warps issues the copies and the snapshots' tensor copies and waits for
// them. The 2-stage block (the dense selector's at B = 1) has to stay at 88 registers or fewer, so that a
// dense output block fits beside it (see output_wg_kernel): at 89, with one more 64-bit index live across
// the event loop, it did not.
// CP: a block of context parallelism's phase 1 or 3 (CpArgs), whose place is (sequence, value head, segment,
// tile): 8 tiles in phase 1, the last 4 of them the transition's columns (from the identity, without U), and
// 4 in phase 3; a block with nothing to do in its phase leaves at once.
template <int NS, bool CP>
__device__ __forceinline__ void recurrence_tc_block(const RecurrenceArgs& a, const CpArgs& cp,
                                                    const RecTmaMaps& tma) {
  constexpr int VT = 32, NW = 8;  // columns, math warps
  // NW math warps and one producer warp, whose first thread issues the copies (in and out) and waits for
  // them; the math warps' path through an event has no copy instructions in it.
  constexpr int kBlockThreads = NW * 32, kProducer = kBlockThreads;
  constexpr int kTiles = kD / VT;
  constexpr int kFlags = VT / kTcTile;  // progress flags this block publishes
  constexpr int kMT = 8 / NW;           // state: m16 tiles per warp
  // The blocks that read the same W (a value head's tiles) and the same K (a head pair's) are launched
  // together, so that they run in the same wave when a packed batch has more blocks than fit at once, and the
  // later ones find W and K in L2.
  wait_for_previous_grid();  // the selection (and the pre-pass before it) complete
  // Context parallelism: this block's segment `seg` of its head's `segments`, its chunks, and what it is.
  int64_t seg = 0;
  int segments = 1;
  ChainSpan span{};
  bool m_tile = false;  // the transition's columns: from the identity, no U
  ChainPlace place;
  if constexpr (CP) {
    const int tiles = cp.phase == 1 ? 2 * kTiles : kTiles;
    const int per_head = cp.phase == 1 ? cp.max_segments : cp.max_segments - 1;
    const int tile8 = int(blockIdx.x % unsigned(tiles));
    unsigned rest = blockIdx.x / unsigned(tiles);
    seg = int64_t(rest % unsigned(per_head)) + (cp.phase == 1 ? 0 : 1);
    rest /= unsigned(per_head);
    const int hv_ = int(rest % unsigned(a.HV));
    const int64_t s_ = rest / unsigned(a.HV);
    segments = cp.seg_count[s_ * a.HV + hv_];
    m_tile = tile8 >= kTiles;
    const bool runs =
        cp.phase == 1 ? (seg == 0 && !m_tile) || (seg >= 1 && seg + 2 <= segments) : seg < segments;
    if (!runs) return;  // block-uniform, before any barrier
    place = chain_place_of(a, s_, hv_, tile8 % kTiles);
    const int32_t* first = cp.seg_first + (s_ * a.HV + hv_) * (cp.max_segments + 1);
    span = ChainSpan{first[seg], first[seg + 1], seg == 0};
  } else {
    place = chain_place<kTiles>(a);
  }
  // A phase-1 block past segment 0 writes no snapshots; a phase-3 block writes its segment's.
  const bool writes = !CP || cp.phase == 3 || seg == 0;
  const bool last = !CP || seg + 1 == segments;  // the head's last segment: final state, count, progress
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
  constexpr int kPublisher = NS > 2 ? kProducer : 0;
  // (A segment that is not its head's last publishes where no one reads: the output stage runs after the
  // replays and reads the last segment's flags, the only ones that must reach the chain's end.)
  Publisher<kFlags, kPublisher> publish{
      last && !m_tile ? a.progress + progress_flag_index(s, a.HV, hv, kVTiles, tile * kFlags) : cp.sink};

  // State registers: st[mt][nt][r] at row 16 (kMT w + mt) + gq + 8(r>>1), column col0 + 8nt + 2tq + (r&1).
  // The start: S0, or with CP in phase 1 S0 (segment 0), zero (the local state) or the identity (the
  // transition), in phase 3 the segment's start from the combine.
  const float* start = a.initial_state ? a.initial_state + (s * a.HV + hv) * kD * V : nullptr;
  if constexpr (CP)
    if (seg > 0) start = cp.phase == 3 ? cp.local + cp_block(s, a.HV, hv, cp.max_segments, seg - 1) : nullptr;
  float st[kMT][VT / 8][4];
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < VT / 8; ++nt)
      for (int r = 0; r < 4; ++r) {
        const int d = (warp * kMT + mt) * 16 + gq + (r >> 1) * 8, col = col0 + nt * 8 + tq * 2 + (r & 1);
        st[mt][nt][r] = m_tile ? float(math && d == col) : math && start ? start[d * V + col] : 0.f;
      }
  // Snapshot `slot` from Sb (bf16(S), written, fenced for the async proxy and made visible by a barrier):
  // one tensor copy (128 rows x VT columns) issued by the producer thread, which waits for its read of Sb
  // (sb_reads_done) before a barrier after which Sb is written again, and for its writes before a barrier
  // that precedes a publication (drain; the events' publications wait for all but the newest). Sb is kept in
  // the copy's swizzled layout (swz_u<VT>: 64-byte rows at 32 columns, 128-byte rows at 64). (Until v38 every
  // thread stored 16-byte pieces read from Sb, kMT VT / 16 loads and stores per thread and event: 0.655 →
  // 0.590 ms of a 32K sparse chain without them; one bulk copy per row, 128 per event, made it 0.93.)
  auto write_snapshot = [&](int64_t slot) {
    if (threadIdx.x != kProducer || !writes) return;
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
    mbar_expect_bytes(bar, kRecStageBytes<VT> - (m_tile ? uint32_t(sizeof(bf16) * kC * VT) : 0u));
    tma_load_tile(st_.w, &tma.w, row, bar);
    tma_load_tile(st_.k, &tma.k, h, token, bar);
    if (!m_tile) tma_load_2d(st_.u, &tma.u, col0, row, bar);
    bulk_load(st_.gam, a.gamma + slot_id * kC, sizeof(float) * kC, bar);
  };
  // Every thread waits for a stage's copies itself, by the parity of the stage's use.
  uint32_t parity = 0;
  auto wait = [&](int buf, int inflight) {
    if (inflight <= 0) return;
    mbar_wait(&sm.full[buf], (parity >> buf) & 1);
    parity ^= 1u << buf;
  };
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

  int64_t slot = seg * (CP ? cp.events : 0);  // the events before the segment
  // Chunks [0, safe_upto) have their snapshots' copies issued in an earlier event than the current one.
  int64_t safe_upto = 0;
  float sb_scale = 1.f;  // the state is sb_scale x the state that Sb holds (skipped chunks since the event)
  const float pending = for_each_event<NS>(
      a, sm.mask, sm.decay, place, publish, fetch, wait, write_snapshot, drain,
      tile == 0 && writes && !m_tile ? a.snapshot_chunk + slot_base : nullptr,
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
        // v̂ = U − W Sb as one warpgroup product (64 x 32, k = 128) on warps 0-3
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
            uu[half][j] = m_tile ? float2{0.f, 0.f}
                                 : unpack_bf16(*reinterpret_cast<const uint32_t*>(cs.u + at[half][j]));
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
        // The snapshots whose copies were issued before this event (all but the newest group: the previous
        // event's, issued above) are waited for when a publication is due, so that the wait is for copies
        // issued an event ago; they cover the chunks up to the previous event's.
        const bool due = safe_upto - publish.published >= kPublishEvery;  // block-uniform
        if (due && threadIdx.x == kProducer) bulk_wait_written<1>();
        sb_reads_done();
        __syncthreads();
        if (due) publish(safe_upto);
        safe_upto = c + 1;
        // S = e^Γ S + Kᵀ Vh on the math warps as warpgroup products, warpgroup g the state rows 64 g...
        if (math) {
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
        }
        // Sb = bf16(S): every read of the old Sb (W Sb, the snapshot's copy) is behind the barrier.
        store_sb();
        sb_scale = 1.f;
      },
      slot, CP ? span : ChainSpan{0, place.n, true});
  // The end state: the final state (a head's last segment), else in phase 1 the segment's local state
  // (segment 0's: segment 1's start) or its transition.
  float* end_state = last && a.final_state ? a.final_state + (s * a.HV + hv) * kD * V : nullptr;
  if constexpr (CP)
    if (!last && cp.phase == 1)
      end_state = (m_tile ? cp.transition : cp.local) + cp_block(s, a.HV, hv, cp.max_segments, seg);
  if (end_state && math) {
    const float carried = exp_ftz(pending);
    for (int mt = 0; mt < kMT; ++mt)
      for (int nt = 0; nt < VT / 8; ++nt)
        for (int half = 0; half < 2; ++half) {
          const int d = (warp * kMT + mt) * 16 + gq + half * 8, col = col0 + nt * 8 + tq * 2;
          *reinterpret_cast<float2*>(end_state + d * V + col) =
              make_float2(st[mt][nt][2 * half] * carried, st[mt][nt][2 * half + 1] * carried);
        }
  }
  if (last && tile == 0 && threadIdx.x == 0) a.snapshot_count[s * a.HV + hv] = int32_t(slot + 1);
}
template <int NS>
__global__ void __launch_bounds__(8 * 32 + 32, 0)
    recurrence_tc_kernel(RecurrenceArgs a, bf16*, const bf16*, const __grid_constant__ RecTmaMaps tma) {
  recurrence_tc_block<NS, false>(a, CpArgs{}, tma);
}
// Context parallelism's phases 1 and 3, 2 stages: two blocks per multiprocessor, the phases' blocks many.
constexpr int kCpStages = 2;
__global__ void __launch_bounds__(8 * 32 + 32, 0)
    recurrence_cp_kernel(RecurrenceArgs a, CpArgs cp, const __grid_constant__ RecTmaMaps tma) {
  recurrence_tc_block<kCpStages, true>(a, cp, tma);
}

}  // namespace

std::string launch_recurrence_cp(const Problem& p, const RecurrenceArgs& args, const CpArgs& cp,
                                 const RecTmaMaps& maps, cudaStream_t stream) {
  // Phase 1: (sequence, value head, segment) x 8 tiles; phase 3: segments 1.. x 4 tiles.
  const int64_t per_head =
      cp.phase == 1 ? int64_t(cp.max_segments) * 2 * kVTiles : int64_t(cp.max_segments - 1) * kVTiles;
  const int64_t blocks = p.num_seqs * p.v_heads * per_head;
  if (blocks == 0) return {};
  constexpr size_t smem = rec_smem_bytes<kCpStages, 32>();
  SGDN_TRY_CUDA(cudaFuncSetAttribute(recurrence_cp_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  return launch_kernel("recurrence_cp_kernel", recurrence_cp_kernel, dim3(unsigned(blocks)), 8 * 32 + 32,
                       smem, stream, false, args, cp, maps);
}

RecurrenceKernel narrow_recurrence_kernel(int stages) {
  constexpr const char* kName = "recurrence_tc_kernel";
  constexpr int kBlockThreads = 8 * 32 + 32;
  return stages == 2
             ? RecurrenceKernel{recurrence_tc_kernel<2>, kName, kBlockThreads, rec_smem_bytes<2, 32>()}
             : RecurrenceKernel{recurrence_tc_kernel<4>, kName, kBlockThreads, rec_smem_bytes<4, 32>()};
}

RecurrenceKernel recurrence_kernel(const TcPlan& plan) {
  return plan.rec_columns == 32 ? narrow_recurrence_kernel(plan.stages) : wide_recurrence_kernel(plan.stages);
}

std::string launch_recurrence_tc(const Problem& p, const TcPlan& plan, const RecurrenceArgs& args, bf16* u,
                                 const bf16* w, const RecTmaMaps& maps, cudaStream_t stream) {
  const RecurrenceKernel k = recurrence_kernel(plan);
  // A multiprocessor that runs a 2-stage recurrence block keeps all of its shared memory (228 KB)
  // configured, so that an output block fits beside it; left alone, the driver configures the least that
  // holds two recurrence blocks (196 KB), and the output block (112 KB) would wait for the recurrence to
  // leave. (Beside a 3-stage block none fits either way, and the default measured faster there.)
  if (plan.stages == 2)
    SGDN_TRY_CUDA(cudaFuncSetAttribute(k.kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       int(cudaSharedmemCarveoutMaxShared)));
  // (The 64-column blocks copy with cp.async and leave the maps unread.)
  return launch_kernel(k.name, k.kernel, dim3(unsigned(recurrence_tc_blocks(p, plan.rec_columns))), k.threads,
                       k.smem, stream, true, args, u, w, maps);
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
