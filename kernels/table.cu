// Stage 1, the chunk table, and the workspace's layout.
#include <cub/cub.cuh>

#include "kernels/common/launch.h"
#include "kernels/common/records.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace {

size_t align_up(size_t x) {
  return (x + 255) & ~size_t(255);
}

// Zeroes `bytes` bytes at `p` (16-byte aligned) with the whole block.
__device__ void zero_bytes(void* p, size_t bytes) {
  uint4* p16 = static_cast<uint4*>(p);
  for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) p16[i] = make_uint4(0, 0, 0, 0);
  for (size_t i = bytes / 16 * 16 + threadIdx.x; i < bytes; i += blockDim.x) static_cast<uint8_t*>(p)[i] = 0;
}

// ---------------------------------------------------------------------------------------------------------
// 1. Chunk table, in one block: the sequences' offsets (block scans), then one record per chunk and per
// output group, then the zeroed flags and unit mask the later stages expect. cu_seqlens (null: one sequence
// of all the tokens) is clamped into [0, total] and made monotone, so that bad offsets cannot send a kernel
// out of bounds (the C ABI cannot read them without a synchronisation): sequence s spans [P_s, P_{s+1}) with
// P_j the running maximum of cu_seqlens[0..j] clamped into [0, total].
constexpr int kTableThreads = 1024;
struct TableArgs {
  const int32_t* cu_seqlens;
  int64_t num_seqs, total, nmax;
  int chunk, group;
  int tail;  // output runs (G = 1): a sequence's last `tail` chunks one per group (group_split)
  int32_t *seq_start, *seq_len, *chunk_offset, *group_offset;
  ChunkInfo* chunks;
  GroupInfo* groups;
  void* zero[2];  // regions zeroed before the later stages run (null: none)
  size_t zero_size[2];
};
struct MaxOp {
  __device__ int32_t operator()(int32_t x, int32_t y) const { return max(x, y); }
};
struct MinOp {
  __device__ int32_t operator()(int32_t x, int32_t y) const { return min(x, y); }
};

// The last s in [0, count) with offset[s] <= i (offset non-decreasing, offset[0] <= i).
__device__ __forceinline__ int32_t owner_of(const int32_t* offset, int32_t count, int32_t i) {
  int32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (offset[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A sequence of n chunks in output groups: groups of G chunks over its first n − L chunks, then its last L =
// min(n, tail) one per group. (Output runs, G = 1: a run takes its chunks one after another, each once the
// chain has passed it, so the run that holds the sequence's last chunk would end after the chain does; a
// chunk alone has its operands ready when its state arrives. L = 1 measured 0.2-0.6 % faster from 16K on;
// more than one, slower in the packed batches, see kOutputTail.)
struct GroupSplit {
  int32_t head, tail_from, groups;  // groups of G, the first chunk taken alone, all groups
};
__device__ __forceinline__ GroupSplit group_split(int32_t n, int group, int tail) {
  const int32_t alone = n < tail ? n : int32_t(tail), head = (n - alone + group - 1) / group;
  return {head, n - alone, head + alone};
}

__global__ void __launch_bounds__(kTableThreads) table_kernel(TableArgs a) {
  let_next_grid_start();  // the next kernel's blocks may be placed (they wait for this one to complete)
  using Scan = cub::BlockScan<int32_t, kTableThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t carry[4];  // P at the tile's start, chunks and groups before it, fewest groups so far
  const int32_t total = int32_t(a.total);
  auto clamp_offset = [&](int64_t j) {
    return a.cu_seqlens ? min(max(a.cu_seqlens[j], 0), total) : (j == 0 ? 0 : total);
  };
  if (threadIdx.x == 0) {
    carry[0] = clamp_offset(0);
    carry[1] = carry[2] = 0;
    carry[3] = INT32_MAX;
  }
  __syncthreads();
  for (int64_t tile = 0; tile < a.num_seqs; tile += kTableThreads) {
    const int64_t s = tile + threadIdx.x;
    const bool real = s < a.num_seqs;
    const int32_t p0 = carry[0], x = real ? clamp_offset(s + 1) : 0;
    int32_t begin = 0, agg = 0;
    Scan(scan).ExclusiveScan(x, begin, p0, MaxOp(), agg);  // P_s = max(P at the tile's start, earlier ends)
    const int32_t end = max(begin, x);
    __syncthreads();
    const int32_t len = real ? end - begin : 0;
    const int32_t n = int32_t((int64_t(len) + a.chunk - 1) / a.chunk);
    const int32_t groups = group_split(n, a.group, a.tail).groups;
    int32_t c_before = 0, g_before = 0, c_all = 0, g_all = 0;
    Scan(scan).ExclusiveSum(n, c_before, c_all);
    __syncthreads();
    Scan(scan).ExclusiveSum(groups, g_before, g_all);
    __syncthreads();
    int32_t unused = 0, g_min = 0;
    Scan(scan).ExclusiveScan(real ? groups : INT32_MAX, unused, INT32_MAX, MinOp(), g_min);
    if (real) {
      a.seq_start[s] = begin;
      a.seq_len[s] = len;
      a.chunk_offset[s] = carry[1] + c_before;
      a.group_offset[s] = carry[2] + g_before;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      carry[0] = max(p0, agg);
      carry[1] += c_all;
      carry[2] += g_all;
      carry[3] = min(carry[3], g_min);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    a.chunk_offset[a.num_seqs] = carry[1];
    a.group_offset[a.num_seqs] = carry[2];
  }
  __syncthreads();  // the offsets above are visible to the whole block
  const int32_t S = int32_t(a.num_seqs), chunks = carry[1], groups = carry[2];
  // The output stage's order (its blocks take the table's entries in turn): the first m groups of every
  // sequence round-robin over the sequences, m the fewest groups of a sequence, then the rest sequence by
  // sequence. The outputs of a packed batch then follow the recurrence, which advances in all sequences at
  // once (in sequence order, the blocks of the later sequences' groups would wait behind the earlier
  // sequences' last ones); with one sequence, or an empty one (m = 0), it is the groups' own order.
  const int32_t m = S > 0 ? carry[3] : 0;
  for (int32_t i = threadIdx.x; i < a.nmax; i += kTableThreads) {
    if (i < chunks) {
      const int32_t s = owner_of(a.chunk_offset, S, i), c = i - a.chunk_offset[s];
      a.chunks[i] = {s, c, a.seq_start[s] + c * a.chunk, min(a.chunk, a.seq_len[s] - c * a.chunk)};
    } else {
      a.chunks[i] = {-1, 0, 0, 0};
    }
    if (i < groups) {
      const int32_t s = owner_of(a.group_offset, S, i), g = i - a.group_offset[s];
      const int32_t place = g < m ? g * S + s : m * S + (a.group_offset[s] - s * m) + (g - m);
      const int32_t n = a.chunk_offset[s + 1] - a.chunk_offset[s];
      const GroupSplit split = group_split(n, a.group, a.tail);
      const int32_t first = g < split.head ? g * a.group : split.tail_from + (g - split.head);
      a.groups[place] = {s,
                         first,
                         n,
                         a.chunk_offset[s],
                         a.seq_start[s],
                         a.seq_len[s],
                         i,
                         g < split.head ? min(a.group, split.tail_from - first) : 1};
    } else {
      a.groups[i] = {-1, 0, 0, 0, 0, 0, 0, 0};
    }
  }
  for (int z = 0; z < 2; ++z)
    if (a.zero[z]) zero_bytes(a.zero[z], a.zero_size[z]);
}

}  // namespace

// The workspace's regions, each aligned to 256 bytes.
Workspace carve(const Problem& p, void* base) {
  Workspace ws{};
  char* ptr = static_cast<char*>(base);
  size_t offset = 0;
  auto take = [&](size_t bytes) -> void* {
    void* out = ptr ? ptr + offset : nullptr;
    offset += align_up(bytes);
    return out;
  };
  const size_t S = size_t(p.num_seqs), nmax = size_t(p.max_chunks()), hv = size_t(p.v_heads);
  const size_t C = size_t(p.chunk), K = size_t(p.key_dim), V = size_t(p.value_dim);
  const size_t events = nmax * hv;
  const size_t slots = (nmax + S) * hv;
  ws.seq_start = static_cast<int32_t*>(take(S * 4));
  ws.seq_len = static_cast<int32_t*>(take(S * 4));
  ws.chunk_offset = static_cast<int32_t*>(take((S + 1) * 4));
  ws.group_offset = static_cast<int32_t*>(take((S + 1) * 4));
  ws.chunk_info = static_cast<ChunkInfo*>(take(nmax * sizeof(ChunkInfo)));
  ws.group_info = static_cast<GroupInfo*>(take(nmax * sizeof(GroupInfo)));
  ws.gamma = static_cast<float*>(take(events * C * 4));
  const size_t uw_elem = p.uses_tensor_cores() ? 2 : 4;  // bf16 U/W on the tensor-core path
  ws.u = static_cast<float*>(take(events * C * V * uw_elem));
  ws.w = static_cast<float*>(take(events * C * K * uw_elem));
  ws.chunk_decay = static_cast<float*>(take(events * 4));
  ws.statistic = static_cast<float*>(take(events * 4));
  ws.head_score = static_cast<float*>(take(events * 4));
  ws.unit_score = static_cast<float*>(take(events * 4));
  ws.unit_mask = static_cast<uint8_t*>(take(events));
  ws.head_mask = static_cast<uint8_t*>(take(events));
  ws.budget = static_cast<int32_t*>(take(S * hv * 4));
  ws.keys = static_cast<uint64_t*>(take(events * 8));
  ws.scratch = static_cast<int32_t*>(take(events * 4));
  ws.snapshots = static_cast<float*>(take(slots * K * V * uw_elem));  // bf16 on the tensor-core path
  ws.snapshot_chunk = static_cast<int32_t*>(take(slots * 4));
  ws.snapshot_count = static_cast<int32_t*>(take(S * hv * 4));
  ws.group_slot = static_cast<int32_t*>(take(events * 4));
  ws.group_log_decay = static_cast<float*>(take(events * 4));
  const size_t progress_flags = size_t(progress_flag_index(int64_t(S), int(hv), 0, int64_t(V / kTcTile), 0));
  ws.flags_bytes = (progress_flags + 2) * 4;
  ws.progress = static_cast<int32_t*>(take(ws.flags_bytes));
  ws.blocks_done = ws.progress ? ws.progress + progress_flags : nullptr;
  ws.records_done = ws.progress ? ws.progress + progress_flags + 1 : nullptr;
  // Context parallelism's segments, local states and transitions, where the plan runs it on this device.
  int sms = 0;
  if (p.uses_tensor_cores() && !tc::multiprocessors(&sms).empty()) sms = 0;
  const tc::CpPlan cp = tc::cp_plan(p, sms);
  const size_t heads = S * hv, segments = size_t(cp.max_segments);
  ws.seg_first = static_cast<int32_t*>(take(cp.events ? heads * (segments + 1) * 4 : 0));
  ws.seg_count = static_cast<int32_t*>(take(cp.events ? heads * 4 : 0));
  ws.cp_local = static_cast<float*>(take(cp.events ? heads * segments * K * V * 4 : 0));
  ws.cp_transition = static_cast<float*>(take(cp.events ? heads * segments * K * K * 4 : 0));
  ws.cp_sink = static_cast<int32_t*>(take(cp.events ? V / kTcTile * 4 : 0));
  ws.total = offset;
  return ws;
}
// Zeroes `bytes` bytes at `p` (16-byte aligned) with the whole block.

std::string launch_chunk_table(const Problem& p, const Workspace& ws, const int32_t* cu_seqlens,
                               int out_group, int out_tail, cudaStream_t stream) {
  // Only the selectors that mark some events keep a unit mask; the tensor-core stages' flags start at zero.
  const bool dense = p.selector == SelectorKind::dense;
  const int64_t nmax = p.max_chunks();
  const TableArgs table{cu_seqlens,
                        p.num_seqs,
                        p.total_tokens,
                        nmax,
                        p.chunk,
                        out_group,
                        out_tail,
                        ws.seq_start,
                        ws.seq_len,
                        ws.chunk_offset,
                        ws.group_offset,
                        ws.chunk_info,
                        ws.group_info,
                        {dense ? nullptr : ws.unit_mask, ws.progress},
                        {size_t(nmax) * p.v_heads, ws.flags_bytes}};
  table_kernel<<<1, kTableThreads, 0, stream>>>(table);
  SGDN_TRY_LAUNCH("table_kernel");
  return {};
}

}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
