// Stage 3, the scores: survival's backward recurrence per (sequence, value head), and the unit scores.
#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace {

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

}  // namespace

bool reads_unit_scores(const Problem& p) {
  const bool plain_budget =
      p.selector == SelectorKind::head_budget && p.min_per_head == 0 && p.max_fraction >= 1;
  return p.selector == SelectorKind::topk || p.selector == SelectorKind::threshold ||
         (p.selector == SelectorKind::head_budget && !plain_budget);
}

std::string launch_scores(const Problem& p, const Workspace& ws, const float* statistic, float* head_score,
                          cudaStream_t stream) {
  const bool unit_scores_read = reads_unit_scores(p);
  const bool no_scores = p.score == ScoreKind::none, dense = p.selector == SelectorKind::dense;
  const bool run_scores = p.score == ScoreKind::survival || (no_scores && !dense) ||
                          (p.score == ScoreKind::update_norm && unit_scores_read);
  if (!run_scores) return {};
  return launch_kernel("score_kernel", score_kernel, dim3(unsigned(p.num_seqs)), 1024, 0, stream, true,
                       ws.chunk_offset, p.v_heads, p.units(), p.ratio(), p.score, p.survival_skip_own_group,
                       p.group, statistic, ws.chunk_decay, head_score,
                       unit_scores_read ? ws.unit_score : nullptr);
}

}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
