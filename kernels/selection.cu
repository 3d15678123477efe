// Stage 4, the selection: each selector's marking kernels over the unit scores (radix selects, no sort),
// then the unit mask expanded to the value heads with the budgets and the output groups' start records.
// The rules the CPU selectors share (budget_of's rounding, random's stream, stride's positions) come from
// core/selection_rules.h, written once for both backends.
#include <cub/cub.cuh>

#include "core/selection_rules.h"
#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace {

// Bits of a selection key's tie part: enough for t = c * units + u < max_chunks * v_heads (at most 31,
// checked by check_problem). The key is the order-preserving score above them, so a radix select reads 32 +
// tie bits, not 64.
int key_tie_bits(const Problem& p) {
  const int64_t count = p.max_chunks() * p.v_heads;
  int bits = 1;
  while ((int64_t(1) << bits) < count) ++bits;
  return bits;
}
// ---------------------------------------------------------------------------------------------------------
// 4. Selection. Unit arrays of sequence s live at base = chunk_offset[s] * HV, laid out [units, N_s].
// The order-preserving bits of a score (descending scores: descending bits; −0 as +0).
__device__ __forceinline__ uint32_t score_bits(float score) {
  if (score == 0.f) score = 0.f;  // -0 -> +0
  const uint32_t bits = __float_as_uint(score);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
// The tie rank of event t = c * units + u in `tie_bits` bits: its complement, so that in descending order
// equal scores come in order of the earlier chunk, then the lower unit (the CPU selectors' tie rule).
__device__ __forceinline__ uint64_t tie_rank(int64_t c, int units, int u, int tie_bits) {
  return ((uint64_t(1) << tie_bits) - 1) - uint64_t(c * units + u);
}
// Selection key: the score's bits above its tie rank.
__device__ __forceinline__ uint64_t score_key(float score, int64_t c, int units, int u, int tie_bits) {
  return (uint64_t(score_bits(score)) << tie_bits) | tie_rank(c, units, u, tie_bits);
}

// A radix select's result: the eligible keys at or above `key` are the k largest, unless `exact` is false:
// then `key` is a whole key that more eligible keys equal than the `still` of them that the k largest take.
struct KthKey {
  uint64_t key;
  int64_t still;
  bool exact;
};

// The k-th largest of key_of(e), e in [0, items), among those whose index is `eligible`, for a block of
// 1024 threads (every thread calls it), by a radix select: one pass for the eligible keys' count and the
// leading bits they all share (alike scores share their top bits), then 8 bits at a time below those (a
// histogram of the eligible keys that match the digits found so far, then the digit where the count from the
// top reaches k), instead of a sort. It stops at the digit where every key that matches is taken (key: those
// digits, zeros below). Key 0 (at or below every key) when k reaches the number of eligible keys; k >= 1.
// Every thread gets the result. The keys are read four per thread at a time (keys in global memory: one round
// trip per four). One 256-word histogram with plain shared-memory atomics: a copy per lane (so that the lanes
// of a warp whose keys share a digit add to different words) measured no faster once the shared leading bits
// are skipped (v44, 128K under ncu: 48.6 against 46.1-46.3 µs), and warp-aggregated adds (match_any) slower
// (64.5).
template <class KeyOf, class Eligible>
__device__ KthKey kth_largest_key(KeyOf key_of, int64_t items, int64_t k, Eligible eligible) {
  using BlockScan = cub::BlockScan<int, 1024>;
  using BlockReduce = cub::BlockReduce<uint64_t, 1024>;
  __shared__ union {
    typename BlockScan::TempStorage scan;
    typename BlockReduce::TempStorage reduce;
  } temp;
  __shared__ int hist[256];
  __shared__ uint64_t prefix;
  __shared__ int hi;            // the bits from `hi` up are found
  __shared__ int64_t still;     // how many of the largest keys below `prefix`'s digits are still to pass
  __shared__ int64_t matching;  // how many eligible keys have `prefix`'s digits
  __shared__ bool every;        // k reaches the number of eligible keys
  __shared__ bool done;         // every key with `prefix`'s digits passes
  constexpr int kBatch = 4;
  // Each pass visits the keys four per thread at a time.
  auto for_each_key = [&](auto visit) {
    for (int64_t e0 = threadIdx.x; e0 < items; e0 += kBatch * blockDim.x) {
      uint64_t key[kBatch];
      bool counted[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t e = e0 + j * int64_t(blockDim.x);
        counted[j] = e < items && eligible(e);
        key[j] = counted[j] ? key_of(e) : 0;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) visit(counted[j], key[j]);
    }
  };
  uint64_t all_and = ~uint64_t(0), any_or = 0, count = 0;
  for_each_key([&](bool counted, uint64_t key) {
    if (counted) {
      all_and &= key;
      any_or |= key;
      ++count;
    }
  });
  __syncthreads();  // a previous call's results are read
  all_and = BlockReduce(temp.reduce).Reduce(all_and, [](uint64_t a, uint64_t b) { return a & b; });
  __syncthreads();
  any_or = BlockReduce(temp.reduce).Reduce(any_or, [](uint64_t a, uint64_t b) { return a | b; });
  __syncthreads();
  count = BlockReduce(temp.reduce).Sum(count);
  if (threadIdx.x == 0) {
    const uint64_t differ = all_and ^ any_or;  // the bits where eligible keys differ
    hi = differ ? 64 - __clzll(differ) : 0;
    prefix = hi >= 64 ? 0 : all_and >> hi << hi;
    still = k;
    matching = int64_t(count);
    every = k >= int64_t(count);
    done = every || hi == 0;
  }
  __syncthreads();
  auto above = [](uint64_t key, int bits) { return bits >= 64 ? uint64_t(0) : key >> bits; };
  for (int top = hi; top > 0 && !done; top -= 8) {
    const int shift = top > 8 ? top - 8 : 0;
    if (threadIdx.x < 256) hist[threadIdx.x] = 0;
    __syncthreads();
    const uint64_t high = above(prefix, top);  // the digits found so far
    for_each_key([&](bool counted, uint64_t key) {
      // (bits of the digit above `top` are high's)
      if (counted && above(key, top) == high) atomicAdd(&hist[unsigned(key >> shift) & 255u], 1);
    });
    __syncthreads();
    // Thread t holds the count of digit 255 - t; the inclusive sum is the count of keys with that digit or a
    // larger one. The selected digit is where it first reaches `still`.
    const int own = threadIdx.x < 256 ? hist[255 - threadIdx.x] : 0;
    int upto = 0;
    BlockScan(temp.scan).InclusiveSum(own, upto);
    const int64_t need = still;
    __syncthreads();  // every thread has read `still`
    if (threadIdx.x < 256 && upto >= need && upto - own < need) {
      prefix |= uint64_t(255 - threadIdx.x) << shift;
      still = need - (upto - own);
      matching = own;
      done = still == own;
    }
    __syncthreads();
  }
  return {every ? 0 : prefix, still, every || still == matching};
}

// A rank bound within a unit's N events: a fixed count if count >= 0, else round(fraction N); at most N.
struct RankBound {
  double fraction;
  int64_t count;
  __device__ int64_t of(int64_t n) const { return min_i64(n, count >= 0 ? count : budget_of(fraction, n)); }
};

// topk, and head_budget's floor and cap, one block of 1024 threads per (sequence, unit): the unit's keys
// (from the score kernel's unit scores), then its events of rank < `keep` marked 1 (topk; the floor) and
// those of rank >= `cap` not kept marked 2 (the cap: head_budget's select passes over them, and they count
// as not kept after it; a floor above the cap, refused on the C++ path where N is known, keeps the floor).
// Ranks by two radix selects of the unit's keys (until v37 a segmented sort per unit, then a kernel per
// bound).
__global__ void __launch_bounds__(1024)
    mark_unit_ranks_kernel(const int32_t* chunk_offset, int HV, int units, int tie_bits, RankBound keep,
                           RankBound cap, const float* unit_score, uint64_t* keys, uint8_t* unit_mask) {
  wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int u = blockIdx.y;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t first = int64_t(chunk_offset[s]) * HV + int64_t(u) * n;
  uint64_t* unit_keys = keys + first;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
    unit_keys[c] = score_key(unit_score[first + c], c, units, u, tie_bits);
  __syncthreads();
  const int64_t kept = keep.of(n), allowed = cap.of(n);
  auto any = [](int64_t) { return true; };
  auto key_of = [&](int64_t c) { return unit_keys[c]; };
  const uint64_t keep_from = kept > 0 ? kth_largest_key(key_of, n, kept, any).key : 0;
  const uint64_t cap_from = allowed > 0 && allowed < n ? kth_largest_key(key_of, n, allowed, any).key : 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const uint64_t key = unit_keys[c];
    if (kept > 0 && key >= keep_from)
      unit_mask[first + c] = 1;
    else if (allowed < n && (allowed == 0 || key < cap_from))
      unit_mask[first + c] = 2;
  }
}

// head_budget, one block of 1024 threads per sequence: the budget B = round(rho N units) goes to the B
// largest keys (score above the event's tie rank, so ties go to the earlier chunk as on the CPU). The units'
// scores are read once into `bits` (their order-preserving bits; in shared memory where the launch gave it
// room, 4 bytes an event, else in `scratch`) and radix-selected there: first on the 32 score bits, then,
// only where more events share the B-th score than the budget takes, on the tie ranks of those events
// (until v44 every pass read 48-bit keys from global memory, one round trip per key and pass: ~0.1 ms at
// 128K). Without floor or cap (Marked = false) the unit scores are summed here from the heads' (no score
// kernel before it for update_norm, whose head scores the pre-pass writes: one kernel fewer on the
// selection's critical path, v36). With them (Marked) they are the score kernel's, and mark_unit_ranks_kernel
// has marked the floor (1) and the cap (2): the B − units min(floor, N) largest of the unmarked events are
// kept, the rest stay as they are (the CPU's walk over the events in score order, taking those not yet
// marked until the budget is spent).
// Room for the scores' bits beside the select's static shared memory (~9 KB): 53 248 events a sequence
// (3 328 chunks of 16 units: T = 212 992 with the default's pairs of heads), else they stay in global memory.
constexpr size_t kSelectSharedBytes = 208 * 1024;
template <bool Marked>
__global__ void __launch_bounds__(1024)
    select_budget_kernel(const int32_t* chunk_offset, int HV, int units, int tie_bits, double rho,
                         int64_t floor_each, const float* head_score, const float* unit_score, bool in_shared,
                         uint32_t* scratch, uint8_t* unit_mask) {
  extern __shared__ uint32_t shared_bits[];  // the scores' bits where `in_shared`
  wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t items = n * units,
                budget = budget_of(rho, items) - (Marked ? min_i64(floor_each, n) * units : 0);
  if (budget <= 0) return;
  uint32_t* bits = in_shared ? shared_bits : scratch + base;
  uint8_t* mask = unit_mask + base;
  // Event e = u n + c of the [units, n] block; 32-bit indices (check_problem: n units < 2^31). The fill sums
  // a unit's head scores as unit_score_of does, eight events per thread at a time, each head's score of them
  // together (one round trip per head and eight events, where a loop per event waited on each load until
  // v44). An event that the floor or the cap marked gets the bits 0, below every score's (no score is NaN),
  // so that the select passes over it without reading the marks again.
  const int32_t n32 = int32_t(n), items32 = int32_t(items), per_unit = HV / units;
  constexpr int kFill = 8;
  for (int32_t e0 = threadIdx.x; e0 < items32; e0 += kFill * int32_t(blockDim.x)) {
    double sum[kFill] = {};
    int32_t at[kFill];  // (u per_unit) n + c: the event's first head's score
    bool open[kFill];   // in range and not marked
#pragma unroll
    for (int j = 0; j < kFill; ++j) {
      const int32_t e = e0 + j * int32_t(blockDim.x), u = e / n32;
      at[j] = (u * per_unit) * n32 + (e - u * n32);
      open[j] = e < items32 && (!Marked || mask[e] == 0);
    }
    for (int h = 0; h < (Marked ? 1 : per_unit); ++h) {
      float x[kFill];
#pragma unroll
      for (int j = 0; j < kFill; ++j)
        x[j] = !open[j] ? 0.f
               : Marked ? unit_score[base + e0 + j * int32_t(blockDim.x)]
                        : head_score[base + at[j] + h * n32];
#pragma unroll
      for (int j = 0; j < kFill; ++j) sum[j] += double(x[j]);
    }
#pragma unroll
    for (int j = 0; j < kFill; ++j)
      if (const int32_t e = e0 + j * int32_t(blockDim.x); e < items32)
        bits[e] = open[j] ? score_bits(float(sum[j])) : 0u;
  }
  __syncthreads();
  auto any = [](int64_t) { return true; };
  const KthKey top = kth_largest_key([&](int64_t e) { return uint64_t(bits[e]); }, items, budget, any);
  const uint32_t at = uint32_t(top.key);
  auto rank = [&](int64_t e) {
    const int32_t u = int32_t(e) / n32;
    return tie_rank(e - int64_t(u) * n, units, u, tie_bits);
  };
  // Where the B-th score is shared by more events than the budget takes: the earliest of them.
  const uint64_t rank_from =
      top.exact || at == 0
          ? 0
          : kth_largest_key(rank, items, top.still, [&](int64_t e) { return bits[e] == at; }).key;
  for (int64_t e = threadIdx.x; e < items; e += blockDim.x) {
    const uint32_t b = bits[e];
    if (b != 0 && (b > at || (b == at && (top.exact || rank(e) >= rank_from)))) mask[e] = 1;
  }
}

// `stride`: chunk ⌊(2i+1)N/(2k)⌋ of each unit, i < k = round(ρN).
__global__ void mark_stride_kernel(const int32_t* chunk_offset, int HV, int units, double rho,
                                   uint8_t* unit_mask) {
  const int64_t s = blockIdx.x;
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV;
  const int64_t keep = min_i64(n, budget_of(rho, n));
  for (int64_t e = threadIdx.x; e < keep * units; e += blockDim.x) {
    const int64_t u = e / keep, i = e % keep;
    unit_mask[base + u * n + stride_chunk(i, keep, n)] = 1;
  }
}

// `random`: the CPU selector's generator (splitmix64, rejection sampling, partial Fisher–Yates) so that a
// seed picks the same chunks on both backends. One thread per (sequence, unit).
__global__ void mark_random_kernel(const int32_t* chunk_offset, int64_t num_seqs, int HV, int units,
                                   double rho, uint64_t seed, int32_t* scratch, uint8_t* unit_mask) {
  const int64_t task = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (task >= num_seqs * units) return;
  const int64_t s = task / units;
  const int u = int(task % units);
  const int64_t n = chunk_offset[s + 1] - chunk_offset[s];
  const int64_t base = int64_t(chunk_offset[s]) * HV + u * n;
  const int64_t keep = min_i64(n, budget_of(rho, n));
  uint64_t state = random_stream_start(seed, s, u);
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

// What a group's outputs start from: the events before its first chunk (the snapshot slot, slot 0 being the
// initial state) and the log decay of the skipped chunks since the last of them (the snapshot's factor).
// Scanned over a head's chunks left to right: an event resets the decay.
struct GroupStart {
  int32_t events;
  float log_decay;
  bool event;  // the span holds an event (the decay before it no longer counts)
};
struct GroupStartScan {
  __device__ GroupStart operator()(const GroupStart& a, const GroupStart& b) const {
    return {a.events + b.events, b.event ? b.log_decay : a.log_decay + b.log_decay, a.event || b.event};
  }
};

// Unit mask -> value-head mask, one block per (sequence, value head), the budget each unit received (counted
// by the block of the unit's first head), and the head's group records (group_slot, group_log_decay: the
// output stage reads them at its blocks' start, before the recurrence has reached them). With no unit mask
// (the dense selector) every event is kept (no decay is read: it is launched before the pre-pass), and
// `zero_score`, where given, receives the head's scores (all zero: a dense run without a score computes
// none), so that a dense run needs no other selection kernel.
// With `records_done` (the tensor-core path's sparse selectors) it runs beside the recurrence, which reads
// the unit mask itself and is launched before it: it does not wait for the recurrence (the selection that
// wrote the unit mask completed before the recurrence's blocks let it start; read through L2), each block
// counts itself there once its records are written (the output blocks wait for all of them), and the last
// block waits for the recurrence grid, so that this grid completes after it (see finish_output_block).
struct ExpandMaskArgs {
  const int32_t* chunk_offset;
  const int32_t* group_offset;
  int HV, units, G;
  const uint8_t* unit_mask;
  const float* chunk_decay;
  uint8_t* head_mask;
  int32_t* budget;
  float* zero_score;
  int32_t* group_slot;
  float* group_log_decay;
  int32_t* records_done = nullptr;
};
// 128 threads: beside the recurrence, a block has to fit on a multiprocessor that two 2-stage 32-column
// chain blocks hold (2 x 288 threads at 88 registers leave 14 848 registers; 256 threads at 74-80 did not
// fit there, so at 2 x 16K the 64 blocks waited for the few multiprocessors with one chain block, and the
// output grid, placed only once every block of this one has started, began ~38 µs after the selection).
__global__ void __launch_bounds__(kExpandThreads) expand_mask_kernel(ExpandMaskArgs a) {
  const bool beside = a.records_done != nullptr;
  if (!beside) wait_for_previous_grid();
  let_next_grid_start();
  const int64_t s = blockIdx.x;
  const int hv = blockIdx.y;
  const int64_t n = __ldcg(a.chunk_offset + s + 1) - __ldcg(a.chunk_offset + s);  // (through L2: see above)
  const int64_t base = int64_t(__ldcg(a.chunk_offset + s)) * a.HV;
  const int per_unit = a.HV / a.units, u = hv / per_unit;
  const uint8_t* from = a.unit_mask ? a.unit_mask + base + u * n : nullptr;
  uint8_t* to = a.head_mask + base + hv * n;
  const int64_t group0 = __ldcg(a.group_offset + s);
  using BlockScan = cub::BlockScan<GroupStart, kExpandThreads>;
  using BlockReduce = cub::BlockReduce<int, kExpandThreads>;
  __shared__ union {
    typename BlockScan::TempStorage scan;
    typename BlockReduce::TempStorage reduce;
  } temp;
  // Tiles of kExpandThreads x kSpan chunks, thread t's kSpan consecutive ones read at once (one round trip a
  // tile: one tile up to 64K, two at 128K; at 256 threads a tile of one chunk a thread had taken eight round
  // trips and eight block scans at 128K).
  constexpr int kSpan = 8;
  const float* decay = a.chunk_decay + base + hv * n;
  GroupStart before{0, 0.f, false};  // the chunks of the tiles done
  int kept = 0;
  for (int64_t c0 = 0; c0 < n; c0 += int64_t(kExpandThreads) * kSpan) {
    const int64_t first = c0 + int64_t(threadIdx.x) * kSpan;
    GroupStart chunk[kSpan];
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      const int64_t c = first + j;
      const bool keep = c < n && (!from || __ldcg(from + c) == 1);  // 2: blocked by a cap
      chunk[j] = {keep, keep || c >= n ? 0.f : __ldcg(decay + c), keep};
      kept += keep;
    }
    GroupStart mine{0, 0.f, false};
#pragma unroll
    for (int j = 0; j < kSpan; ++j) mine = GroupStartScan()(mine, chunk[j]);
    GroupStart prefix, total;
    BlockScan(temp.scan).ExclusiveScan(mine, prefix, GroupStart{0, 0.f, false}, GroupStartScan(), total);
    prefix = GroupStartScan()(before, prefix);
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      const int64_t c = first + j;
      if (c >= n) break;
      to[c] = chunk[j].event;
      if (a.zero_score) a.zero_score[base + hv * n + c] = 0.f;
      if (c % a.G == 0) {
        const int64_t gid = group0 + c / a.G;
        a.group_slot[gid * a.HV + hv] = prefix.events;
        a.group_log_decay[gid * a.HV + hv] = prefix.log_decay;
      }
      prefix = GroupStartScan()(prefix, chunk[j]);
    }
    before = GroupStartScan()(before, total);
    __syncthreads();  // the scan's storage is free again
  }
  if (hv % per_unit == 0) {
    const int total = BlockReduce(temp.reduce).Sum(kept);
    if (threadIdx.x == 0) a.budget[s * a.units + u] = total;
  }
  if (!beside) return;
  __syncthreads();  // every record of the block written
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(a.records_done, 1) == int32_t(gridDim.x * gridDim.y) - 1) wait_for_previous_grid();
  }
}

}  // namespace

std::string launch_selection(const Problem& p, const Workspace& ws, const float* head_score,
                             cudaStream_t stream) {
  const int64_t S = p.num_seqs;
  const int HV = p.v_heads, units = p.units();
  const int tie_bits = key_tie_bits(p);
  std::string err;
  switch (p.selector) {
    case SelectorKind::dense:  // every event: the mask expansion alone
      break;
    case SelectorKind::stride:
      mark_stride_kernel<<<unsigned(S), kThreads, 0, stream>>>(ws.chunk_offset, HV, units, p.rho,
                                                               ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_stride_kernel");
      break;
    case SelectorKind::random: {
      const int64_t tasks = S * units;
      mark_random_kernel<<<unsigned((tasks + 127) / 128), 128, 0, stream>>>(
          ws.chunk_offset, S, HV, units, p.rho, p.seed, ws.scratch, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_random_kernel");
      break;
    }
    case SelectorKind::topk:
      err =
          launch_kernel("mark_unit_ranks_kernel", mark_unit_ranks_kernel, dim3(unsigned(S), unsigned(units)),
                        1024, 0, stream, true, ws.chunk_offset, HV, units, tie_bits, RankBound{p.rho, -1},
                        RankBound{1, -1}, ws.unit_score, ws.keys, ws.unit_mask);
      break;
    case SelectorKind::head_budget: {
      // With a floor or a cap: the units' ranks first (the floor kept, the cap blocked), then the shared
      // select over the events left.
      const bool plain_budget = !reads_unit_scores(p);
      if (!plain_budget) {
        err = launch_kernel("mark_unit_ranks_kernel", mark_unit_ranks_kernel,
                            dim3(unsigned(S), unsigned(units)), 1024, 0, stream, true, ws.chunk_offset, HV,
                            units, tie_bits, RankBound{0, p.min_per_head}, RankBound{p.max_fraction, -1},
                            ws.unit_score, ws.keys, ws.unit_mask);
        if (!err.empty()) return err;
      }
      // The longest sequence's unit scores in shared memory (4 bytes an event) where they fit, else in the
      // keys' workspace.
      const size_t bits_bytes = size_t(p.max_chunks()) * size_t(units) * 4;
      const bool in_shared = bits_bytes <= kSelectSharedBytes;
      err = launch_kernel("select_budget_kernel",
                          plain_budget ? select_budget_kernel<false> : select_budget_kernel<true>,
                          dim3(unsigned(S)), 1024, in_shared ? bits_bytes : 0, stream, true, ws.chunk_offset,
                          HV, units, tie_bits, p.rho, int64_t(p.min_per_head), head_score, ws.unit_score,
                          in_shared, reinterpret_cast<uint32_t*>(ws.keys), ws.unit_mask);
      break;
    }
    case SelectorKind::threshold:
      mark_threshold_kernel<<<unsigned(S), 1024, 0, stream>>>(ws.chunk_offset, HV, units, p.tau,
                                                              ws.unit_score, ws.unit_mask);
      SGDN_TRY_LAUNCH("mark_threshold_kernel");
      break;
  }
  return err;
}

std::string launch_expand_mask(const Problem& p, const Workspace& ws, bool chunk_runs,
                               const uint8_t* unit_mask, uint8_t* head_mask, int32_t* budget,
                               float* zero_score, int32_t* records_done, cudaStream_t stream) {
  const ExpandMaskArgs args{ws.chunk_offset, chunk_runs ? ws.chunk_offset : ws.group_offset,
                            p.v_heads,       p.units(),
                            p.group,         unit_mask,
                            ws.chunk_decay,  head_mask,
                            budget,          zero_score,
                            ws.group_slot,   ws.group_log_decay,
                            records_done};
  return launch_kernel("expand_mask_kernel", expand_mask_kernel,
                       dim3(unsigned(p.num_seqs), unsigned(p.v_heads)), kExpandThreads, 0, stream, true,
                       args);
}

cudaError_t expand_mask_attributes(cudaFuncAttributes* attributes) {
  return cudaFuncGetAttributes(attributes, expand_mask_kernel);
}

}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
