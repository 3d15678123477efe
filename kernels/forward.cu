// The GPU forward (gdn_device.h): the problem's checks and workspace, and forward(), which runs the stages
// of stages.h in order: chunk table, pre-pass, scores, selection, recurrence, outputs.
#include <cmath>
#include <string>

#include "kernels/gdn_device.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {

std::string check_problem(const Problem& p) {
  auto msg = [](auto... parts) {
    std::string out;
    ((out += parts), ...);
    return out;
  };
  if (p.num_seqs < 1) return msg("num_seqs = ", std::to_string(p.num_seqs), " must be >= 1");
  if (p.total_tokens < 1) return msg("total_tokens = ", std::to_string(p.total_tokens), " must be >= 1");
  if (p.total_tokens >= (int64_t(1) << 31)) return "total_tokens must be < 2^31";
  if (p.qk_heads < 1 || p.v_heads < 1) return "qk_heads and v_heads must be >= 1";
  if (p.v_heads % p.qk_heads != 0)
    return msg("v_heads = ", std::to_string(p.v_heads),
               " is not a multiple of qk_heads = ", std::to_string(p.qk_heads));
  if (p.v_heads > kMaxValueHeads) return msg("v_heads = ", std::to_string(p.v_heads), " exceeds 1024");
  for (auto [name, dim] : {std::pair<const char*, int>{"key_dim", p.key_dim}, {"value_dim", p.value_dim}})
    if (dim < 16 || dim > kMaxHeadDim || dim % 16 != 0)
      return msg(name, " = ", std::to_string(dim),
                 " is not supported by the CUDA backend; allowed: 16, 32, ..., 128");
  if (p.chunk < 1 || p.chunk > kMaxChunk)
    return msg("chunk = ", std::to_string(p.chunk), " is not supported by the CUDA backend; allowed: 1..64");
  if (p.group < 1) return msg("group = ", std::to_string(p.group), " must be >= 1");
  if (p.solver_block < 1 || p.chunk % p.solver_block != 0)
    return msg("solver block = ", std::to_string(p.solver_block),
               " does not divide chunk = ", std::to_string(p.chunk));
  if (!(p.rho > 0 && p.rho <= 1)) return msg("selector rho = ", std::to_string(p.rho), " is outside (0, 1]");
  if (!(p.tau >= 0)) return "selector tau must be >= 0";
  if (p.min_per_head < 0) return "selector min_per_head must be >= 0";
  if (p.selector == SelectorKind::head_budget && !(p.max_fraction >= p.rho && p.max_fraction <= 1))
    return msg("selector max_fraction = ", std::to_string(p.max_fraction),
               " is outside [rho, 1] (rho = ", std::to_string(p.rho), ")");
  const bool uses_scores = p.selector == SelectorKind::topk || p.selector == SelectorKind::head_budget ||
                           p.selector == SelectorKind::threshold;
  if (uses_scores && p.score == ScoreKind::none)
    return msg("selector '", selector_name(p.selector), "' needs a score (update_norm or survival)");
  if (int(p.input_dtype) < 0 || int(p.input_dtype) > 1 || int(p.output_dtype) < 0 || int(p.output_dtype) > 1)
    return "dtype must be float32 or bfloat16";
  if (int64_t(p.max_chunks()) * p.v_heads >= (int64_t(1) << 31))
    return "too many chunks x heads for 32-bit indices";
  // The tensor-core recurrence's grid has one dimension: a block per (sequence, value head, V tile).
  if (p.uses_tensor_cores() && detail::tc::recurrence_tc_blocks(p) >= (int64_t(1) << 31))
    return msg("num_seqs x v_heads = ", std::to_string(p.num_seqs * p.v_heads),
               " is too large for the tensor-core recurrence (times ", std::to_string(detail::tc::kVTiles),
               " blocks must be < 2^31)");
  return {};
}

size_t workspace_bytes(const Problem& p) {
  if (!check_problem(p).empty()) return 0;
  return detail::carve(p, nullptr).total;
}

SnapshotView snapshot_view(const Problem& p, void* workspace) {
  detail::Workspace ws = detail::carve(p, workspace);
  SnapshotView view;
  view.snapshots = ws.snapshots;
  view.snapshots_bf16 = p.uses_tensor_cores();
  view.snapshot_chunk = ws.snapshot_chunk;
  view.snapshot_count = ws.snapshot_count;
  view.chunk_offset = ws.chunk_offset;
  view.max_slots = (p.max_chunks() + p.num_seqs) * p.v_heads;
  return view;
}

namespace detail {
namespace {

// The pre-pass's arguments (both paths); its statistic goes to `statistic`.
PrepareArgs prepare_args(const Problem& p, const DeviceTensors& t, const Workspace& ws, float* statistic) {
  return {t.k,
          t.v,
          t.g,
          t.beta,
          ws.chunk_offset,
          ws.chunk_info,
          p.qk_heads,
          p.v_heads,
          p.key_dim,
          p.value_dim,
          p.chunk,
          p.solver_block,
          p.solver_band >= p.chunk / p.solver_block ? -1 : p.solver_band,
          p.score != ScoreKind::none,
          ws.gamma,
          ws.u,
          ws.w,
          ws.chunk_decay,
          statistic};
}

// The recurrence's arguments, reading the value heads' mask `head_mask`.
RecurrenceArgs recurrence_args(const Problem& p, const DeviceTensors& t, const Workspace& ws,
                               const uint8_t* head_mask) {
  return {t.k,
          t.initial_state,
          ws.seq_start,
          ws.seq_len,
          ws.chunk_offset,
          head_mask,
          ws.chunk_decay,
          ws.gamma,
          ws.u,
          ws.w,
          p.qk_heads,
          p.v_heads,
          p.key_dim,
          p.value_dim,
          p.chunk,
          value_tile(p),
          ws.snapshots,
          ws.snapshot_chunk,
          ws.snapshot_count,
          t.final_state,
          ws.progress};
}

// The output stage's arguments for groups of `out_group` chunks (read by the one-pass forms too).
OutputArgs output_args(const Problem& p, const DeviceTensors& t, const Workspace& ws, int out_group) {
  return {t.q,
          t.k,
          ws.group_info,
          ws.gamma,
          ws.u,
          ws.w,
          ws.snapshots,
          ws.group_slot,
          ws.group_log_decay,
          ws.progress,
          ws.blocks_done,
          p.qk_heads,
          p.v_heads,
          p.key_dim,
          p.value_dim,
          p.chunk,
          out_group,
          value_tile(p),
          p.scale > 0 ? p.scale : 1.0f / std::sqrt(float(p.key_dim)),
          t.o};
}

// The tensor copies' maps: the pre-pass loads K and V and stores W and U through them, the recurrence
// (blocks of `columns`) and the output blocks load.
std::string tensor_maps(const Problem& p, const DeviceTensors& t, const Workspace& ws, int columns,
                        tc::RecTmaMaps* maps) {
  const int64_t nmax = p.max_chunks(), HV = p.v_heads;
  return tc::rec_tma_maps(*maps, reinterpret_cast<const tc::bf16*>(ws.w),
                          reinterpret_cast<const tc::bf16*>(ws.u), nmax * HV * p.chunk, t.q, t.k, t.v,
                          p.total_tokens, p.qk_heads, p.v_heads, columns,
                          reinterpret_cast<const tc::bf16*>(ws.snapshots), (nmax + p.num_seqs) * HV);
}

}  // namespace
}  // namespace detail

std::string forward(const Problem& p, const DeviceTensors& t, void* workspace, size_t workspace_size,
                    cudaStream_t stream) {
  using namespace detail;
  if (std::string problem = check_problem(p); !problem.empty()) return problem;
  const Workspace ws = carve(p, workspace);
  if (!workspace || workspace_size < ws.total)
    return "workspace of " + std::to_string(workspace_size) + " bytes is smaller than the " +
           std::to_string(ws.total) + " bytes this problem needs";
  if (!t.cu_seqlens && p.num_seqs != 1) return "cu_seqlens is required when num_seqs > 1";
  uint8_t* head_mask = t.event_mask ? t.event_mask : ws.head_mask;
  float* head_score = t.event_score ? t.event_score : ws.head_score;
  int32_t* budget = t.budget ? t.budget : ws.budget;
  const bool dense = p.selector == SelectorKind::dense, use_tc = p.uses_tensor_cores();
  int sms = 0;
  if (use_tc)
    if (std::string e = tc::multiprocessors(&sms); !e.empty()) return e;
  const tc::TcPlan plan = use_tc ? tc::tc_plan(p, sms) : tc::TcPlan{};
  // The output stage's groups: G chunks, or runs of chunks each from its own state (tensor cores, G = 1,
  // sparse), whose records are then per chunk.
  const bool chunk_runs = plan.output_run > 1;
  const int out_group = chunk_runs ? plan.output_run : int(p.group);

  // 1. chunk table
  if (std::string e =
          launch_chunk_table(p, ws, t.cu_seqlens, out_group, chunk_runs ? tc::kOutputTail : 0, stream);
      !e.empty())
    return e;
  // The dense selector keeps every event: its mask, budgets and (zero) scores need nothing from the pre-pass.
  if (dense)
    if (std::string e =
            launch_expand_mask(p, ws, chunk_runs, nullptr, head_mask, budget,
                               p.score == ScoreKind::none ? head_score : nullptr, nullptr, stream);
        !e.empty())
      return e;

  // 2. pre-pass (update_norm's statistic is its head score, written in place)
  float* const statistic = p.score == ScoreKind::update_norm ? head_score : ws.statistic;
  const PrepareArgs prep = prepare_args(p, t, ws, statistic);
  auto* u_tc = reinterpret_cast<tc::bf16*>(ws.u);
  auto* w_tc = reinterpret_cast<tc::bf16*>(ws.w);
  tc::RecTmaMaps maps{};
  if (use_tc)
    if (std::string e = tensor_maps(p, t, ws, plan.rec_columns, &maps); !e.empty()) return e;
  if (std::string e =
          use_tc ? tc::launch_prepare_tc(p, prep, maps, sms, stream) : launch_prepare_fp32(p, prep, stream);
      !e.empty())
    return e;

  // 3. scores
  if (std::string e = launch_scores(p, ws, statistic, head_score, stream); !e.empty()) return e;

  // 4. selection: the unit mask, expanded to the value heads here, or on the tensor-core path beside the
  // recurrence, which reads the unit mask itself (the expansion and a launch's handoff off the chains' path)
  if (std::string e = launch_selection(p, ws, head_score, stream); !e.empty()) return e;
  // (Context parallelism reads the expanded mask: its segments are cut from it before the chains start.)
  const bool context_parallel = plan.cp.events > 0;
  const bool expand_beside = use_tc && !dense && !context_parallel;
  if (!dense && !expand_beside)
    if (std::string e =
            launch_expand_mask(p, ws, chunk_runs, ws.unit_mask, head_mask, budget, nullptr, nullptr, stream);
        !e.empty())
      return e;

  // 5. sparse recurrence and 6. outputs
  RecurrenceArgs rec = recurrence_args(p, t, ws, head_mask);
  OutputArgs out = output_args(p, t, ws, out_group);
  if (expand_beside) {
    rec.mask = ws.unit_mask;
    rec.mask_heads = p.v_heads / p.units();
    out.records_done = ws.records_done;
    out.records_expected = int32_t(p.num_seqs * p.v_heads);
  }
  if (!use_tc) {
    if (std::string e = launch_recurrence_fp32(p, rec, stream); !e.empty()) return e;
    return launch_outputs_fp32(p, out, stream);
  }
  if (plan.fused != tc::Fused::none) return tc::launch_fused(p, plan.fused, rec, out, u_tc, w_tc, stream);
  // Context parallelism: the output stage after the replays, in stream order (its blocks would otherwise
  // wait on progress flags that only the heads' last segments publish).
  if (context_parallel) {
    if (std::string e = tc::launch_context_parallel(p, plan.cp, ws, rec, maps, stream); !e.empty()) return e;
    return tc::launch_outputs_tc(p, plan, out, u_tc, w_tc, maps, stream, false);
  }
  if (std::string e = tc::launch_recurrence_tc(p, plan, rec, u_tc, w_tc, maps, stream); !e.empty()) return e;
  if (expand_beside)
    if (std::string e = launch_expand_mask(p, ws, chunk_runs, ws.unit_mask, head_mask, budget, nullptr,
                                           ws.records_done, stream);
        !e.empty())
      return e;
  return tc::launch_outputs_tc(p, plan, out, u_tc, w_tc, maps, stream);
}

}  // namespace cuda
}  // namespace sgdn
