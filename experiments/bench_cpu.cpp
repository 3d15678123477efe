// sgdn_bench_cpu: the speed of the CPU reference engine against Eigen's own matrix product.
//   sgdn_bench_cpu [T] [H] [HV] [K] [V]      (default: the Qwen3.5 head shape at T = 32768)
// Prints the seconds and flop rate of one dense float32 run (exact solver, every event kept) and of the
// default sparse configuration, and the rate of Eigen's float product on 64x128 by 128x128 blocks (the
// engine's typical product) run on every core at once, as the engine runs.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "algorithms/engine.h"
#include "data/random_workload.h"

using namespace sgdn;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Flop rate of C = A B with A 64x128, B 128x128 (float), each thread on its own matrices.
double eigen_block_rate() {
  const int reps = 20000;
  double rate = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel
    {
      Mat<float> a = Mat<float>::Random(64, 128), b = Mat<float>::Random(128, 128), c(64, 128);
      for (int i = 0; i < reps; ++i) {
        c.noalias() = a * b;
        a(0, 0) += c(1, 1) * 1e-9f;  // keep the products live
      }
    }
    const double flops = 2.0 * 64 * 128 * 128 * reps * omp_get_max_threads();
    rate = std::max(rate, flops / seconds_since(start));
  }
  return rate;
}

void run_config(const char* label, const Inputs<float>& in, const std::string& solver,
                const std::string& selector) {
  const auto s = solver_registry().create(solver, Params("solver", {}));
  const auto score = score_registry().create("survival", Params("selector", {}));
  const auto sel = selector_registry().create(selector, Params("selector", {}));
  EngineConfig cfg;
  cfg.solver = s.get();
  cfg.score = score.get();
  cfg.selector = sel.get();
  const EngineResult<float> r = run_cpu(in, cfg);
  std::printf("| %-34s | %8.2f | %10.1f | %12.1f |\n", label, r.seconds, r.flops / 1e9,
              r.flops / r.seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  Shape shape{1, 32768, 16, 32, 128, 128};
  int64_t* fields[] = {&shape.tokens, &shape.qk_heads, &shape.v_heads, &shape.key_dim, &shape.value_dim};
  for (int i = 1; i < argc && i <= 5; ++i) *fields[i - 1] = std::stoll(argv[i]);
  std::printf("CPU engine benchmark, %s, %d threads\n", shape.str().c_str(), omp_get_max_threads());
  const double eigen = eigen_block_rate();
  std::printf("Eigen float product 64x128 * 128x128 on %d threads: %.1f GFLOP/s\n\n", omp_get_max_threads(),
              eigen / 1e9);
  const Inputs<float> in = random_workload(shape, 0).inputs.cast<float>();
  std::printf("| %-34s | %8s | %10s | %12s |\n", "configuration (float32)", "seconds", "GFLOP", "GFLOP/s");
  std::printf("|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(10, '-').c_str(),
              std::string(12, '-').c_str(), std::string(14, '-').c_str());
  run_config("dense: exact solver, every event", in, "exact", "dense");
  run_config("sparse default: block_adjacent, head_budget 0.29", in, "block_adjacent", "head_budget");
  return 0;
}
