// The C ABI (kernels/sgdn_cuda.h): bad input returns a status and a message naming the problem, never a
// crash; a good call gives the same outputs as the C++ backend.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/builtin_strategies.h"
#include "core/defaults.h"
#include "core/strategy_table.h"
#include "kernels/gdn_device.h"
#include "kernels/sgdn_cuda.h"

namespace {

struct DeviceArena {
  std::vector<void*> blocks;
  void* alloc(size_t bytes) {
    void* ptr = nullptr;
    REQUIRE(cudaMalloc(&ptr, bytes) == cudaSuccess);
    REQUIRE(cudaMemset(ptr, 0, bytes) == cudaSuccess);
    blocks.push_back(ptr);
    return ptr;
  }
  ~DeviceArena() {
    for (void* ptr : blocks) cudaFree(ptr);
  }
};

std::string last_error() {
  return sgdn_cuda_last_error();
}

}  // namespace

TEST_CASE("the device's and the C ABI's strategy names are the table's and the CPU's", "[gpu][capi]") {
  using namespace sgdn;
  for (StrategyFamily family : kStrategyFamilies) {
    const StrategyList list = strategies(family);
    INFO(family_name(family));
    CHECK(sgdn_cuda_strategy_count(int32_t(family)) == list.count);
    for (const StrategyEntry& entry : list) {
      const char* name = sgdn_cuda_strategy_name(int32_t(family), entry.code);
      REQUIRE(name != nullptr);
      CHECK(std::string(name) == entry.name);
    }
    CHECK(sgdn_cuda_strategy_name(int32_t(family), list.count) == nullptr);
  }
  CHECK(sgdn_cuda_strategy_count(4) == 0);
  CHECK(sgdn_cuda_strategy_name(4, 0) == nullptr);
  CHECK(SGDN_CUDA_SELECT_COUNT == strategies(StrategyFamily::selector).count);
  CHECK(SGDN_CUDA_SCORE_COUNT == strategies(StrategyFamily::score).count);
  // The device's names, each a registered CPU selector.
  for (const StrategyEntry& entry : strategies(StrategyFamily::selector)) {
    const std::string name = cuda::selector_name(cuda::SelectorKind(entry.code));
    CHECK(name == entry.name);
    CHECK(selector_registry().contains(name));
  }
  // The codes callers pass as numbers stay what they were.
  CHECK(SGDN_CUDA_SCORE_NONE == 0);
  CHECK(SGDN_CUDA_SCORE_UPDATE_NORM == 1);
  CHECK(SGDN_CUDA_SCORE_SURVIVAL == 2);
  CHECK(SGDN_CUDA_SELECT_DENSE == 0);
  CHECK(SGDN_CUDA_SELECT_RANDOM == 1);
  CHECK(SGDN_CUDA_SELECT_STRIDE == 2);
  CHECK(SGDN_CUDA_SELECT_TOPK == 3);
  CHECK(SGDN_CUDA_SELECT_HEAD_BUDGET == 4);
  CHECK(SGDN_CUDA_SELECT_THRESHOLD == 5);
}

TEST_CASE("the C ABI's default config is the project's (core/defaults.h)", "[gpu][capi]") {
  using namespace sgdn;
  sgdn_cuda_config c;
  std::memset(&c, 0x5A, sizeof c);  // every field must be written
  sgdn_cuda_default_config(&c);
  CHECK(c.num_seqs == 1);
  CHECK(c.chunk == defaults::kChunk);
  CHECK(c.group == defaults::kGroup);
  CHECK(std::string(defaults::kSolver) == "block_adjacent");
  CHECK(c.solver_block == defaults::kSolverBlock);
  CHECK(c.solver_band == defaults::kSolverBand);
  CHECK(std::string(strategy_name(StrategyFamily::score, c.score)) == defaults::kScore);
  CHECK(std::string(strategy_name(StrategyFamily::selector, c.selector)) == defaults::kSelector);
  CHECK(std::string(strategy_name(StrategyFamily::granularity, c.head_granularity)) ==
        defaults::kGranularity);
  CHECK(c.survival_skip_own_group == int32_t(defaults::kSkipOwnGroup));
  CHECK(c.rho == defaults::kRho);
  CHECK(c.tau == defaults::kTau);
  CHECK(c.seed == defaults::kSeed);
  CHECK(c.min_per_head == defaults::kMinPerHead);
  CHECK(c.max_fraction == defaults::kMaxFraction);
  CHECK(c.scale == 0.f);
  CHECK(c.input_dtype == SGDN_CUDA_FLOAT32);
  CHECK(c.output_dtype == SGDN_CUDA_FLOAT32);
  CHECK(c.tensor_cores == 1);
  CHECK(c.total_tokens == 0);
}

TEST_CASE("C ABI rejects bad input with a status and a message", "[gpu][capi]") {
  const int T = 100, H = 2, HV = 4, K = 64, V = 64;
  sgdn_cuda_config config;
  sgdn_cuda_default_config(&config);
  config.total_tokens = T;
  config.qk_heads = H;
  config.v_heads = HV;
  config.key_dim = K;
  config.value_dim = V;
  size_t bytes = 0;
  REQUIRE(sgdn_cuda_workspace_size(&config, &bytes) == SGDN_CUDA_OK);
  REQUIRE(bytes > 0);

  DeviceArena arena;
  std::vector<float> host_q(size_t(T * H * K));
  for (size_t i = 0; i < host_q.size(); ++i) host_q[i] = float(std::sin(double(i))) * 0.1f;
  sgdn_cuda_tensors t{};
  t.q = arena.alloc(size_t(T * H * K) * 4);
  t.k = arena.alloc(size_t(T * H * K) * 4);
  t.v = arena.alloc(size_t(T * HV * V) * 4);
  t.g = static_cast<float*>(arena.alloc(size_t(T * HV) * 4));
  t.beta = arena.alloc(size_t(T * HV) * 4);
  t.o = arena.alloc(size_t(T * HV * V) * 4);
  REQUIRE(cudaMemcpy(const_cast<void*>(t.q), host_q.data(), host_q.size() * 4, cudaMemcpyHostToDevice) ==
          cudaSuccess);
  REQUIRE(cudaMemcpy(const_cast<void*>(t.k), host_q.data(), host_q.size() * 4, cudaMemcpyHostToDevice) ==
          cudaSuccess);
  void* workspace = arena.alloc(bytes);

  SECTION("a good call succeeds and clears the message") {
    CHECK(sgdn_cuda_forward(&config, &t, workspace, bytes, nullptr) == SGDN_CUDA_OK);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(last_error().empty());
    std::vector<float> o(size_t(T * HV * V));
    REQUIRE(cudaMemcpy(o.data(), t.o, o.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (float x : o) REQUIRE(std::isfinite(x));
  }
  SECTION("null arguments") {
    CHECK(sgdn_cuda_forward(nullptr, &t, workspace, bytes, nullptr) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK(sgdn_cuda_workspace_size(&config, nullptr) == SGDN_CUDA_INVALID_ARGUMENT);
    sgdn_cuda_tensors missing = t;
    missing.v = nullptr;
    CHECK(sgdn_cuda_forward(&config, &missing, workspace, bytes, nullptr) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("v is null"));
  }
  SECTION("host memory") {
    sgdn_cuda_tensors host = t;
    host.q = host_q.data();
    CHECK(sgdn_cuda_forward(&config, &host, workspace, bytes, nullptr) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("q is not device memory"));
  }
  SECTION("misaligned pointer") {
    sgdn_cuda_tensors shifted = t;
    shifted.k = static_cast<const char*>(t.k) + 4;
    CHECK(sgdn_cuda_forward(&config, &shifted, workspace, bytes, nullptr) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("k is not 16-byte aligned"));
  }
  SECTION("HV not a multiple of H") {
    sgdn_cuda_config bad = config;
    bad.qk_heads = 3;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("not a multiple"));
  }
  SECTION("unsupported head dims and chunk") {
    sgdn_cuda_config bad = config;
    bad.key_dim = 256;
    CHECK(sgdn_cuda_forward(&bad, &t, workspace, bytes, nullptr) == SGDN_CUDA_UNSUPPORTED);
    CHECK_THAT(last_error(), Catch::Contains("key_dim = 256"));
    bad = config;
    bad.value_dim = 72;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_UNSUPPORTED);
    bad = config;
    bad.chunk = 128;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_UNSUPPORTED);
  }
  SECTION("bad codes and ranges") {
    sgdn_cuda_config bad = config;
    bad.input_dtype = 7;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("input_dtype"));
    bad = config;
    bad.selector = 42;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    bad = config;
    bad.selector = SGDN_CUDA_SELECT_TOPK;
    bad.rho = 1.5;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("rho"));
    bad = config;
    bad.selector = SGDN_CUDA_SELECT_TOPK;
    bad.score = SGDN_CUDA_SCORE_NONE;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    bad = config;
    bad.solver_block = 24;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("divide"));
    // 2^24 sequences x 32 value heads x 4 V tiles: past the tensor-core recurrence's one-dimensional grid
    // (the chunk table's own bound, chunks x heads < 2^31, still holds).
    bad = config;
    bad.input_dtype = SGDN_CUDA_BFLOAT16;
    bad.key_dim = bad.value_dim = 128;
    bad.qk_heads = 16;
    bad.v_heads = 32;
    bad.num_seqs = int64_t(1) << 24;
    bad.total_tokens = int64_t(1) << 24;
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("too large for the tensor-core recurrence"));
    bad.tensor_cores = 0;  // the other kernels' grids take it
    CHECK(sgdn_cuda_workspace_size(&bad, &bytes) == SGDN_CUDA_OK);
  }
  SECTION("head_budget: a floor above the cap keeps the floor") {
    // T = 100: N = 2 chunks per head; max_fraction 0.5 caps a unit at 1 event, min_per_head asks for 2. The
    // C++ path refuses this (it knows N); the C ABI keeps the floor: every unit keeps both of its chunks.
    sgdn_cuda_config floor = config;
    floor.selector = SGDN_CUDA_SELECT_HEAD_BUDGET;
    floor.rho = 0.3;
    floor.max_fraction = 0.5;
    floor.min_per_head = 2;
    size_t floor_bytes = 0;
    REQUIRE(sgdn_cuda_workspace_size(&floor, &floor_bytes) == SGDN_CUDA_OK);
    void* floor_workspace = arena.alloc(floor_bytes);
    sgdn_cuda_tensors with_budget = t;
    with_budget.budget = static_cast<int32_t*>(arena.alloc(size_t(H) * 4));  // pair granularity: H units
    REQUIRE(sgdn_cuda_forward(&floor, &with_budget, floor_workspace, floor_bytes, nullptr) == SGDN_CUDA_OK);
    std::vector<int32_t> budget(static_cast<size_t>(H));
    REQUIRE(cudaMemcpy(budget.data(), with_budget.budget, budget.size() * 4, cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(budget == std::vector<int32_t>(static_cast<size_t>(H), 2));
  }
  SECTION("the dense selector reports every event kept, its budgets and its scores") {
    // T = 100: N = 2 chunks per head, H units (pair granularity). Without a score the scores are zeros; with
    // one they are the score's (here zeros too: v = 0 writes nothing into the state), never the poison.
    for (int32_t score : {SGDN_CUDA_SCORE_NONE, SGDN_CUDA_SCORE_SURVIVAL}) {
      INFO("score code " << score);
      sgdn_cuda_config dense = config;
      dense.selector = SGDN_CUDA_SELECT_DENSE;
      dense.score = score;
      sgdn_cuda_tensors events = t;
      events.event_mask = static_cast<uint8_t*>(arena.alloc(size_t(HV * 2)));
      events.event_score = static_cast<float*>(arena.alloc(size_t(HV * 2) * 4));
      events.budget = static_cast<int32_t*>(arena.alloc(size_t(H) * 4));
      REQUIRE(cudaMemset(events.event_mask, 0xFF, size_t(HV * 2)) == cudaSuccess);
      REQUIRE(cudaMemset(events.event_score, 0xFF, size_t(HV * 2) * 4) == cudaSuccess);  // NaN
      REQUIRE(cudaMemset(events.budget, 0xFF, size_t(H) * 4) == cudaSuccess);
      REQUIRE(sgdn_cuda_forward(&dense, &events, workspace, bytes, nullptr) == SGDN_CUDA_OK);
      std::vector<uint8_t> mask(size_t(HV * 2));
      std::vector<float> scores(size_t(HV * 2));
      std::vector<int32_t> budget(static_cast<size_t>(H));
      REQUIRE(cudaMemcpy(mask.data(), events.event_mask, mask.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(cudaMemcpy(scores.data(), events.event_score, scores.size() * 4, cudaMemcpyDeviceToHost) ==
              cudaSuccess);
      REQUIRE(cudaMemcpy(budget.data(), events.budget, budget.size() * 4, cudaMemcpyDeviceToHost) ==
              cudaSuccess);
      CHECK(mask == std::vector<uint8_t>(mask.size(), 1));
      CHECK(budget == std::vector<int32_t>(budget.size(), 2));  // a unit's events: its N chunks
      CHECK(scores == std::vector<float>(scores.size(), 0.f));
    }
  }
  SECTION("workspace too small") {
    CHECK(sgdn_cuda_forward(&config, &t, workspace, bytes / 2, nullptr) == SGDN_CUDA_WORKSPACE_TOO_SMALL);
  }
  SECTION("several sequences need cu_seqlens") {
    sgdn_cuda_config packed = config;
    packed.num_seqs = 2;
    size_t packed_bytes = 0;
    REQUIRE(sgdn_cuda_workspace_size(&packed, &packed_bytes) == SGDN_CUDA_OK);
    void* big = arena.alloc(packed_bytes);
    CHECK(sgdn_cuda_forward(&packed, &t, big, packed_bytes, nullptr) == SGDN_CUDA_INVALID_ARGUMENT);
    CHECK_THAT(last_error(), Catch::Contains("cu_seqlens"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // no sticky error left behind
}
