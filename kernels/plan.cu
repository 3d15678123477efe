// The plan: which form of each tensor-core stage runs for which shape, with the reason for each. A lone
// sequence's forward is bounded by its busiest chain's latency, a packed batch's by the multiprocessors'
// throughput.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/common/launch.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {

// Recurrence blocks of `columns` (32 or 64) V columns: one per (sequence, value head, V tile).
int64_t recurrence_tc_blocks(const Problem& p, int columns) {
  return p.num_seqs * p.v_heads * (kD / columns);
}

std::string multiprocessors(int* count) {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess)
    return std::string("CUDA error reading the multiprocessor count: ") + cudaGetErrorString(status);
  return {};
}

namespace {

// V columns per recurrence block: 32 (recurrence_tc_kernel, 8 warps issuing warpgroup products) while those
// blocks fit one per multiprocessor, or two for a sparse selector with G = 1: the shortest event of a chain;
// else 64 (recurrence_wg_kernel): half the blocks, half the copies of W and K through L2 per column.
int recurrence_columns(const Problem& p, int multiprocessors) {
  const int64_t narrow = tc::recurrence_tc_blocks(p);
  if (narrow <= multiprocessors) return 32;
  const bool sparse_two_per_sm =
      p.selector != SelectorKind::dense && p.group == 1 && narrow <= int64_t(2) * multiprocessors;
  return sparse_two_per_sm ? 32 : 64;
}
// A selector whose every chain holds at most this fraction of its sequence's chunks counts as
// throughput-bound.
constexpr double kShortChain = 0.5;
// The most of a sequence's chunks that one unit's chain can hold, as the selector's settings bound it.
double chain_bound(const Problem& p) {
  switch (p.selector) {
    case SelectorKind::random:
    case SelectorKind::stride:
    case SelectorKind::topk:
      return p.rho;
    case SelectorKind::head_budget:
      return p.max_fraction;
    default:
      return 1.0;
  }
}
// Copy stages of the separate recurrence: 2 where the blocks' throughput counts (the dense selector, chains
// bounded at kShortChain with G = 1, more blocks than multiprocessors), which leaves room for an output block
// beside each recurrence block; else enough to keep a lone busy chain fed: 4 at 32 columns, 3 at 64.
int recurrence_stages(const Problem& p, int multiprocessors, int columns) {
  const bool throughput = p.selector == SelectorKind::dense ||
                          (p.group == 1 && chain_bound(p) <= kShortChain) ||
                          tc::recurrence_tc_blocks(p, columns) > multiprocessors;
  return throughput ? 2 : columns == 32 ? 4 : 3;
}
// Chunks per output block with G = 1 and a sparse selector (each chunk from its own start state): runs of 4
// where that leaves at least 16 blocks per multiprocessor, of 2 where it leaves 4, else 1, so that the
// chunks after a skipped one reuse the snapshot in shared memory and a block's start is paid once per run.
int output_run(const Problem& p, int multiprocessors) {
  if (!p.uses_tensor_cores() || p.group != 1 || p.selector == SelectorKind::dense) return 1;
  const int64_t blocks_of_one = p.max_chunks() * p.v_heads, enough = int64_t(16) * multiprocessors;
  return blocks_of_one >= 4 * enough ? 4 : blocks_of_one >= 2 * 4 * int64_t(multiprocessors) ? 2 : 1;
}

// The dense selector's one-pass forms where the 64-column recurrence would run (G = 1, packed batches), so
// that neither v nor the state goes through memory: two warpgroups a block beyond one wave, else the
// warp-specialised blocks.
Fused fused_form(const Problem& p, int multiprocessors, int columns) {
  if (!p.uses_tensor_cores() || p.selector != SelectorKind::dense || p.group != 1 || columns != 64)
    return Fused::none;
  return tc::recurrence_tc_blocks(p, 64) > multiprocessors ? Fused::two_warpgroups : Fused::warp_specialised;
}
// The share of a sequence's head-events that the selector keeps at most (threshold: all of them).
double event_bound(const Problem& p) {
  return p.selector == SelectorKind::threshold ? 1.0 : p.rho;
}
// Context parallelism's costs in events of the busiest chain (1.04 µs each at 32K, H100): the output stage,
// which runs after the replays instead of beside the chain, per (chunk, value head) (alone 0.344 ms at 32K
// on the H200, ~0.44 on the H100, over 512 x 32), and the combine per segment (a 128 x 128 x 32 fp32
// product, ~3 µs).
constexpr double kCpOutputEvents = 0.025;
constexpr double kCpCombineEvents = 3;
constexpr int64_t kCpMinEvents = 16;
}  // namespace

CpPlan cp_plan(const Problem& p, int multiprocessors) {
  using CP = Problem::ContextParallel;
  if (!p.uses_tensor_cores() || p.selector == SelectorKind::dense || p.group != 1 ||
      p.context_parallel == CP::off)
    return {};
  const int64_t chunks = (p.total_tokens + p.chunk - 1) / p.chunk;  // a sequence's chunks, at most
  // Phase 1 runs 8 column tiles (the local state's 4, the transition's 4) per L_e events of a cut head, two
  // blocks per multiprocessor: L_e = ⌈8 E / (2 SMs)⌉, E the selector's bound on the head-events, keeps it in
  // about one wave.
  const double head_events = event_bound(p) * double(p.max_chunks()) * p.v_heads;
  int64_t events =
      std::max(kCpMinEvents, int64_t(std::ceil(8 * head_events / (2.0 * std::max(multiprocessors, 1)))));
  if (p.segment_events > 0) events = p.segment_events;
  // Automatic: where the chain blocks fill no more than the machine (a lone sequence's chains are its
  // critical path) and the busiest chain the selector allows outlasts phase 1, the combine, phase 3 and the
  // output stage that no longer runs beside it.
  const double busiest = chain_bound(p) * double(chunks);
  const double with_cp = 2.0 * double(events) + kCpCombineEvents * busiest / double(events) +
                         kCpOutputEvents * double(p.max_chunks()) * p.v_heads;
  if (p.context_parallel == CP::automatic &&
      (recurrence_tc_blocks(p) > multiprocessors || busiest <= with_cp))
    return {};
  return {int(std::min<int64_t>(events, chunks + 1)), int((chunks + events - 1) / events)};
}

TcPlan tc_plan(const Problem& p, int multiprocessors) {
  TcPlan t;
  t.cp = cp_plan(p, multiprocessors);
  // (Context parallelism's phases are 32-column blocks; the tensor maps' U boxes follow rec_columns.)
  t.rec_columns = t.cp.events > 0 ? 32 : recurrence_columns(p, multiprocessors);
  t.fused = fused_form(p, multiprocessors, t.rec_columns);
  t.stages = recurrence_stages(p, multiprocessors, t.rec_columns);
  t.output_run = output_run(p, multiprocessors);
  return t;
}

}  // namespace tc
}  // namespace detail

std::string stage_registers(const Problem& p, StageRegisters* r) {
  *r = {};
  if (std::string e = check_problem(p); !e.empty()) return e;
  if (!p.uses_tensor_cores()) return {};
  int sms = 0;
  if (std::string e = detail::tc::multiprocessors(&sms); !e.empty()) return e;
  const detail::tc::TcPlan plan = detail::tc::tc_plan(p, sms);
  if (plan.fused != detail::tc::Fused::none) return {};
  const detail::tc::RecurrenceKernel recurrence = detail::tc::recurrence_kernel(plan);
  const detail::tc::OutputKernel output = detail::tc::output_kernel(p, plan);
  cudaFuncAttributes rec{}, out{}, expand{};
  SGDN_TRY_CUDA(cudaFuncGetAttributes(&rec, recurrence.kernel));
  SGDN_TRY_CUDA(cudaFuncGetAttributes(&out, output.kernel));
  SGDN_TRY_CUDA(detail::expand_mask_attributes(&expand));
  r->separate = true;
  r->stages = plan.stages;
  r->recurrence_threads = recurrence.threads;
  r->recurrence_registers = rec.numRegs;
  r->output_threads = output.threads;
  r->output_registers = out.numRegs;
  r->expand_threads = detail::kExpandThreads;
  r->expand_registers = expand.numRegs;
  r->recurrence_smem = recurrence.smem;
  r->expand_smem = expand.sharedSizeBytes;
  return {};
}

}  // namespace cuda
}  // namespace sgdn
