// The tensor maps (CUtensorMap) through which the tensor-core stages copy their tiles.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "kernels/common/records.h"
#include "kernels/stages.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {

// The tensor maps of the pre-pass's, the recurrence's and the output blocks' copies (RecTmaMaps), the
// recurrence's for blocks of `columns` V columns: W and U [slot_rows][128] from the workspace (W's box and
// U's whole rows for the pre-pass's stores and the output blocks' loads, U's columns for the recurrence), Q,
// K and V [tokens][heads][128], and the snapshots [snapshot_slots x 128][128] (bf16) that the 32- and
// 64-column mma.sync blocks store by tensor copies and the output blocks load (two 64-column halves of 128
// rows). The driver's encoder is reached through the runtime, so that nothing links libcuda. Every
// tensor-core forward encodes them before its pre-pass (the fused dense form too, whose recurrence reads none
// of them), so the limits below hold for all of them.
std::string rec_tma_maps(RecTmaMaps& m, const bf16* w, const bf16* u, int64_t slot_rows, const void* q,
                         const void* k, const void* v, int64_t tokens, int H, int HV, int columns,
                         const bf16* snapshots, int64_t snapshot_slots) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return "the CUDA driver offers no cuTensorMapEncodeTiled (the tensor-core copies need it)";
  if (slot_rows >= (int64_t(1) << 31))  // the copies' row coordinates are 32-bit
    return "too many chunks x value heads for the tensor-core recurrence (" + std::to_string(slot_rows / kC) +
           " slots of 64 rows; fewer than 2^25 allowed)";
  auto tiled = [&](CUtensorMap* map, const void* base, cuuint32_t rank, const cuuint64_t* dims,
                   const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle,
                   const char* what) -> std::string {
    const cuuint32_t unit[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims,
                              strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r == CUDA_SUCCESS) return {};
    return std::string("cannot describe ") + what +
           " for the tensor-core copies (cuTensorMapEncodeTiled error " + std::to_string(int(r)) +
           (reinterpret_cast<uintptr_t>(base) % 16 ? "; it is not 16-byte aligned)" : ")");
  };
  const cuuint64_t uw_dims[2] = {cuuint64_t(kD), cuuint64_t(slot_rows)}, uw_strides[1] = {kD * sizeof(bf16)};
  const cuuint32_t w_box[2] = {64, kC}, u_box[2] = {cuuint32_t(columns), kC};
  const cuuint64_t k_dims[3] = {cuuint64_t(kD), cuuint64_t(H), cuuint64_t(tokens)};
  const cuuint64_t k_strides[2] = {kD * sizeof(bf16), cuuint64_t(H) * kD * sizeof(bf16)};
  const cuuint32_t kv_box[3] = {64, 1, kC};
  std::string err = tiled(&m.w, w, 2, uw_dims, uw_strides, w_box, CU_TENSOR_MAP_SWIZZLE_128B, "W");
  if (err.empty())
    err = tiled(&m.u_rows, u, 2, uw_dims, uw_strides, w_box, CU_TENSOR_MAP_SWIZZLE_128B,
                "U (the pre-pass's stores)");
  if (err.empty())
    err = tiled(&m.u, u, 2, uw_dims, uw_strides, u_box,
                columns == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, "U");
  if (err.empty()) err = tiled(&m.k, k, 3, k_dims, k_strides, kv_box, CU_TENSOR_MAP_SWIZZLE_128B, "K");
  if (err.empty()) err = tiled(&m.q, q, 3, k_dims, k_strides, kv_box, CU_TENSOR_MAP_SWIZZLE_128B, "Q");
  const cuuint64_t v_dims[3] = {cuuint64_t(kD), cuuint64_t(HV), cuuint64_t(tokens)};
  const cuuint64_t v_strides[2] = {kD * sizeof(bf16), cuuint64_t(HV) * kD * sizeof(bf16)};
  if (err.empty()) err = tiled(&m.v, v, 3, v_dims, v_strides, kv_box, CU_TENSOR_MAP_SWIZZLE_128B, "V");
  // The snapshots as [slots x 128 rows][128], a block's tile 128 rows x its columns.
  if (snapshot_slots * kD >= (int64_t(1) << 31))
    return "too many snapshot slots for the tensor-core recurrence (" + std::to_string(snapshot_slots) +
           "; fewer than 2^24 allowed)";
  const cuuint64_t snap_dims[2] = {cuuint64_t(kD), cuuint64_t(snapshot_slots * kD)};
  const cuuint32_t snap_box[2] = {cuuint32_t(columns), kD};
  if (err.empty())
    err = tiled(&m.snap, snapshots, 2, snap_dims, uw_strides, snap_box,
                columns == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, "the snapshots");
  const cuuint32_t snap_rows_box[2] = {64, kD};  // the output blocks' copies: 64 columns x 128 rows
  if (err.empty())
    err = tiled(&m.snap_rows, snapshots, 2, snap_dims, uw_strides, snap_rows_box, CU_TENSOR_MAP_SWIZZLE_128B,
                "the snapshots");
  return err;
}

}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
