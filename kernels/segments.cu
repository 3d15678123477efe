// Context parallelism of the sparse chain on the tensor-core path (docs/math.md §5; the float64 reference is
// algorithms/segment_parallel.*): each (sequence, value head)'s selected events cut into segments of at most
// L_e events, phase 1 (recurrence_tc.cu) giving each segment's transition and local state, a combine that
// chains the segments' starts, phase 3 (recurrence_tc.cu) replaying every segment from its start. The
// output stage runs after the replays and reads the snapshots the sequential chain would have written.
#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {
namespace {

constexpr int kSegmentThreads = 256;

// Per (sequence, value head): its events counted, and segment j >= 1 starting just after the (j L_e)-th
// (segments_by_events: the unselected chunks after the last event join the last segment). Each thread
// counts a run of consecutive chunks; a scan over the block gives the events before each run.
__global__ void __launch_bounds__(kSegmentThreads)
    segment_kernel(const int32_t* chunk_offset, const uint8_t* head_mask, int HV, CpArgs cp, int32_t* first,
                   int32_t* count) {
  wait_for_previous_grid();  // the mask expansion complete
  __shared__ int32_t before[kSegmentThreads];
  const int64_t s = blockIdx.x / unsigned(HV);
  const int hv = int(blockIdx.x % unsigned(HV));
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const uint8_t* row = head_mask + int64_t(chunk_offset[s]) * HV + int64_t(hv) * n;
  const int64_t per = (n + kSegmentThreads - 1) / kSegmentThreads;
  const int64_t lo = min_i64(n, threadIdx.x * per), hi = min_i64(n, lo + per);
  int32_t held = 0;
  for (int64_t c = lo; c < hi; ++c) held += row[c] == 1;
  before[threadIdx.x] = held;
  __syncthreads();
  // Inclusive scan (Hillis–Steele; 256 entries).
  for (int step = 1; step < kSegmentThreads; step *= 2) {
    const int32_t add = threadIdx.x >= unsigned(step) ? before[threadIdx.x - step] : 0;
    __syncthreads();
    before[threadIdx.x] += add;
    __syncthreads();
  }
  const int32_t total = before[kSegmentThreads - 1];
  const int32_t segments = total > cp.events ? (total + cp.events - 1) / cp.events : 1;
  int32_t* f = first + (s * HV + hv) * (cp.max_segments + 1);
  if (threadIdx.x == 0) {
    f[0] = 0;
    f[segments] = int32_t(n);
    count[s * HV + hv] = segments;
  }
  int32_t e = before[threadIdx.x] - held;  // events before this thread's run
  for (int64_t c = lo; c < hi; ++c)
    if (row[c] == 1 && ++e % cp.events == 0 && e / cp.events < segments) f[e / cp.events] = int32_t(c + 1);
}

// Per (sequence, value head, 32 columns), in place over its segments in order: local[j] <- M_j local[j − 1]
// + local[j] for j = 1 .. n − 2 (local[0] is already segment 1's start), fp32. The start's columns stay in
// shared memory from one step to the next; M_j's 128 rows pass through in blocks of 32 columns.
constexpr int kCombineCols = kTcTile;
__global__ void __launch_bounds__(kSegmentThreads) combine_kernel(int HV, CpArgs cp) {
  wait_for_previous_grid();                                     // phase 1 complete
  constexpr int kRows = kD / (kSegmentThreads / kCombineCols);  // rows per thread: 16
  __shared__ float start[kD][kCombineCols];
  __shared__ __align__(16) float m[kD][kCombineCols];
  const int tile = int(blockIdx.x % unsigned(kVTiles));
  const int hv = int(blockIdx.x / unsigned(kVTiles) % unsigned(HV));
  const int64_t s = blockIdx.x / unsigned(kVTiles) / unsigned(HV);
  const int segments = cp.seg_count[s * HV + hv];
  if (segments < 3) return;
  const int c = threadIdx.x % kCombineCols, r0 = threadIdx.x / kCombineCols, col = tile * kCombineCols + c;
  const float* first = cp.local + cp_block(s, HV, hv, cp.max_segments, 0);
  for (int i = 0; i < kRows; ++i) start[r0 + 8 * i][c] = first[(r0 + 8 * i) * kD + col];
  for (int j = 1; j + 2 <= segments; ++j) {
    float* local = cp.local + cp_block(s, HV, hv, cp.max_segments, j);
    const float* mj = cp.transition + cp_block(s, HV, hv, cp.max_segments, j);
    float acc[kRows];
    for (int i = 0; i < kRows; ++i) acc[i] = local[(r0 + 8 * i) * kD + col];
    for (int k0 = 0; k0 < kD; k0 += kCombineCols) {
      __syncthreads();  // the previous block of M (and the start's update) read
      for (int e = threadIdx.x; e < kD * kCombineCols / 4; e += kSegmentThreads) {
        const int r = e / (kCombineCols / 4), q = e % (kCombineCols / 4);
        *reinterpret_cast<float4*>(&m[r][4 * q]) = *reinterpret_cast<const float4*>(mj + r * kD + k0 + 4 * q);
      }
      __syncthreads();
#pragma unroll 8
      for (int k = 0; k < kCombineCols; ++k) {
        const float x = start[k0 + k][c];
#pragma unroll
        for (int i = 0; i < kRows; ++i) acc[i] = fmaf(m[r0 + 8 * i][k], x, acc[i]);
      }
    }
    __syncthreads();  // every read of the start done
    for (int i = 0; i < kRows; ++i) {
      local[(r0 + 8 * i) * kD + col] = acc[i];
      start[r0 + 8 * i][c] = acc[i];
    }
  }
}

}  // namespace

std::string launch_context_parallel(const Problem& p, const CpPlan& plan, const Workspace& ws,
                                    const RecurrenceArgs& args, const RecTmaMaps& maps, cudaStream_t stream) {
  CpArgs cp;
  cp.events = plan.events;
  cp.max_segments = plan.max_segments;
  cp.seg_first = ws.seg_first;
  cp.seg_count = ws.seg_count;
  cp.local = ws.cp_local;
  cp.transition = ws.cp_transition;
  cp.sink = ws.cp_sink;
  const unsigned heads = unsigned(p.num_seqs * p.v_heads);
  segment_kernel<<<heads, kSegmentThreads, 0, stream>>>(args.chunk_offset, args.mask, p.v_heads, cp,
                                                        ws.seg_first, ws.seg_count);
  SGDN_TRY_LAUNCH("segment_kernel");
  cp.phase = 1;
  if (std::string e = launch_recurrence_cp(p, args, cp, maps, stream); !e.empty()) return e;
  if (plan.max_segments >= 3) {
    combine_kernel<<<heads * kVTiles, kSegmentThreads, 0, stream>>>(p.v_heads, cp);
    SGDN_TRY_LAUNCH("combine_kernel");
  }
  cp.phase = 3;
  return launch_recurrence_cp(p, args, cp, maps, stream);
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
