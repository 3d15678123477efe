// The stages of the GPU forward (SPEC §3–§7, §12), each a host launcher over the kernels of its own file, in
// the order forward() runs them:
//   1. chunk table   table.cu        one block: cu_seqlens -> per-sequence chunk / group offsets, one record
//                                    per chunk and per output group, the zeroed flags
//   2. prepare       prepare_tc.cu   per (chunk, value head): γ (cumulative log decay), L with the solver's
//                    fallback_fp32.cu  band, the banded forward substitution giving U = T(β⊙V) and
//                                    W = T(β⊙e^γ⊙K), Γ, and the score statistic ‖(e^{Γ−γ}⊙K)ᵀU‖_F
//   3. scores        scores.cu       per (sequence, value head): update_norm or survival, then unit scores
//   4. selection     selection.cu    dense / random / stride / topk / head_budget / threshold by radix
//                                    selects (no sort); then the unit mask expanded to value heads, budgets
//                                    counted and each group's start state recorded as (snapshot slot, log
//                                    decay since)
//   5. recurrence    recurrence_tc.cu (32 columns), recurrence_wg.cu (64 columns), fallback_fp32.cu:
//                                    per (sequence, value head, V tile) the carried state visits selected
//                                    events only, decaying in between; a snapshot after each event
//   5'. or, for long lone sparse chains, context parallelism: segments.cu (the segments, the combine) and
//                    recurrence_tc.cu (phase 1: segments' transitions and local states; phase 3: replays)
//   6. outputs       outputs_tc.cu, fallback_fp32.cu: per (group, value head) from the group's start state,
//                                    the dense chunk step over its chunks (SPEC §6), beside the recurrence
//   5+6. one pass    fused.cu        the dense selector's recurrence and outputs together (packed batches)
// Two paths: fp32 arithmetic on fp32 or bf16 inputs (any supported shape, fallback_fp32.cu), and, where
// Problem::uses_tensor_cores(), the bf16 tensor-core kernels (namespace tc). plan.cu says which tensor-core
// form runs for which shape; forward.cu runs the stages.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "kernels/common/records.h"
#include "kernels/gdn_device.h"

namespace sgdn {
namespace cuda {
namespace detail {

// ---- table.cu
// The workspace's layout: one function carves it for both the size query (base null) and the run.
Workspace carve(const Problem& p, void* base);
// The chunk and group records for output groups of `out_group` chunks (a sequence's last `out_tail` alone),
// and the zeroed progress flags and (unless the selector is dense) unit mask.
std::string launch_chunk_table(const Problem& p, const Workspace& ws, const int32_t* cu_seqlens,
                               int out_group, int out_tail, cudaStream_t stream);

// ---- fallback_fp32.cu: the fp32 path of any supported shape
// The widest of 64, 32, 16 columns that divides V: the fp32 recurrence's and outputs' V tile.
int value_tile(const Problem& p);
std::string launch_prepare_fp32(const Problem& p, const PrepareArgs& args, cudaStream_t stream);
std::string launch_recurrence_fp32(const Problem& p, const RecurrenceArgs& args, cudaStream_t stream);
std::string launch_outputs_fp32(const Problem& p, const OutputArgs& args, cudaStream_t stream);

// ---- scores.cu
// survival's head scores, the zero scores of a sparse selector without a score, and the unit scores that
// topk, threshold and head_budget with a floor or cap read (update_norm's head scores are the pre-pass's
// statistic; the dense selector's zero scores come with its mask). Nothing where none of these is needed.
std::string launch_scores(const Problem& p, const Workspace& ws, const float* statistic, float* head_score,
                          cudaStream_t stream);
// Whether the selector reads the unit scores (topk, threshold, head_budget with a floor or a cap).
bool reads_unit_scores(const Problem& p);

// ---- selection.cu
// The unit mask of a sparse selector (nothing for the dense one).
std::string launch_selection(const Problem& p, const Workspace& ws, const float* head_score,
                             cudaStream_t stream);
// The unit mask (null: every event) expanded to the value heads' `head_mask`, the budgets counted, and every
// output group's start recorded; `zero_score` (optional) zeroed; `records_done` (optional): the expansion
// runs beside the recurrence and counts its blocks there (see expand_mask_kernel).
constexpr int kExpandThreads = 128;
std::string launch_expand_mask(const Problem& p, const Workspace& ws, bool chunk_runs,
                               const uint8_t* unit_mask, uint8_t* head_mask, int32_t* budget,
                               float* zero_score, int32_t* records_done, cudaStream_t stream);
cudaError_t expand_mask_attributes(cudaFuncAttributes* attributes);

namespace tc {
// ---- tensor_maps.cu
std::string rec_tma_maps(RecTmaMaps& m, const bf16* w, const bf16* u, int64_t slot_rows, const void* q,
                         const void* k, const void* v, int64_t tokens, int H, int HV, int columns,
                         const bf16* snapshots, int64_t snapshot_slots);

// ---- plan.cu
// Recurrence blocks of `columns` (32 or 64) V columns: one per (sequence, value head, V tile).
int64_t recurrence_tc_blocks(const Problem& p, int columns = kTcTile);
// The dense selector's one-pass forms (fused.cu).
enum class Fused {
  none,
  two_warpgroups,    // recurrence_out_wg_kernel: 128 columns on two warpgroups
  warp_specialised,  // recurrence_out_ws_kernel: 64 columns, the chain and the outputs on two warpgroups
};
// Context parallelism of the sparse chain (CpArgs): L_e, and the segments a (sequence, value head) can have
// at most; zero where it does not run.
struct CpPlan {
  int events = 0;
  int max_segments = 0;
};
CpPlan cp_plan(const Problem& p, int multiprocessors);
// The tensor-core path's forms for problem p: forward() launches them, stage_registers reads their registers.
struct TcPlan {
  int rec_columns = 0;        // V columns per recurrence block: 32 or 64
  Fused fused = Fused::none;  // the one-pass form, if any
  int stages = 0;             // copy stages of the separate recurrence
  int output_run = 1;         // chunks per output block (G = 1)
  CpPlan cp;                  // context parallelism, where it runs (instead of the separate recurrence)
};
TcPlan tc_plan(const Problem& p, int multiprocessors);
// A sequence's last chunks that the output stage takes one per block where it takes runs (group_split): the
// run that held the last chunk would end after the chain does.
constexpr int kOutputTail = 1;
// The device's multiprocessor count.
std::string multiprocessors(int* count);

// A tensor-core kernel of the separate stages as its launcher runs it: the kernel, its name, its threads and
// its dynamic shared memory.
template <class Kernel>
struct StageKernel {
  Kernel kernel;
  const char* name;
  int threads;
  size_t smem;
};
using RecurrenceKernel = StageKernel<void (*)(RecurrenceArgs, bf16*, const bf16*, RecTmaMaps)>;
using OutputKernel = StageKernel<void (*)(OutputArgs, const bf16*, const bf16*, RecTmaMaps)>;

// ---- prepare_tc.cu
std::string launch_prepare_tc(const Problem& p, const PrepareArgs& args, const RecTmaMaps& maps,
                              int multiprocessors, cudaStream_t stream);

// ---- recurrence_tc.cu: the 32-column blocks (8 warps, warpgroup products), 2 or 4 copy stages
RecurrenceKernel narrow_recurrence_kernel(int stages);
// ---- recurrence_wg.cu: the 64-column blocks (one warpgroup), 2 or 3 copy stages
RecurrenceKernel wide_recurrence_kernel(int stages);
// The separate recurrence that the plan picks (recurrence_tc.cu), and its launch.
RecurrenceKernel recurrence_kernel(const TcPlan& plan);
std::string launch_recurrence_tc(const Problem& p, const TcPlan& plan, const RecurrenceArgs& args, bf16* u,
                                 const bf16* w, const RecTmaMaps& maps, cudaStream_t stream);
// Context parallelism's phase cp.phase (1 or 3) on 32-column blocks.
std::string launch_recurrence_cp(const Problem& p, const RecurrenceArgs& args, const CpArgs& cp,
                                 const RecTmaMaps& maps, cudaStream_t stream);

// ---- segments.cu: context parallelism of the sparse chain, in place of the separate recurrence: the
// segments cut from the head mask, phase 1, the combine, phase 3 (the output stage after them)
std::string launch_context_parallel(const Problem& p, const CpPlan& plan, const Workspace& ws,
                                    const RecurrenceArgs& args, const RecTmaMaps& maps, cudaStream_t stream);

// ---- outputs_tc.cu: the output blocks beside the recurrence
OutputKernel output_kernel(const Problem& p, const TcPlan& plan);
// early: beside the recurrence (waiting on its progress flags); else after it in stream order.
std::string launch_outputs_tc(const Problem& p, const TcPlan& plan, const OutputArgs& args, const bf16* u,
                              const bf16* w, const RecTmaMaps& maps, cudaStream_t stream, bool early = true);

// ---- fused.cu: the dense selector's recurrence and outputs in one pass
std::string launch_fused(const Problem& p, Fused form, const RecurrenceArgs& rec, const OutputArgs& out,
                         const bf16* u, const bf16* w, cudaStream_t stream);
}  // namespace tc

}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
