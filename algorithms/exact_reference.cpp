#include "algorithms/engine.h"

namespace sgdn {

ExactReference run_exact(const Inputs<double>& inputs, int64_t chunk, bool record_chunk_states) {
  const auto solver = solver_registry().create("exact", Params("solver", {}));
  const auto score = score_registry().create("update_norm", Params("selector", {}));
  const auto selector = selector_registry().create("dense", Params("selector", {}));
  EngineConfig config;
  config.chunk = chunk;
  config.solver = solver.get();
  config.score = score.get();
  config.selector = selector.get();
  config.record_chunk_states = record_chunk_states;
  EngineResult<double> result = run_cpu(inputs, config);
  return {std::move(result.o), std::move(result.final_state), std::move(result.chunk_states)};
}

}  // namespace sgdn
