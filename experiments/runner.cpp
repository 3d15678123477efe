#include "experiments/runner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <set>

#include "analysis/metrics.h"
#include "analysis/tables.h"
#include "core/error.h"
#include "core/hdf5_file.h"
#include "data/file_workload.h"
#include "data/workload.h"
#ifdef SGDN_WITH_CUDA
#include "kernels/cuda_backend.h"
#endif

namespace sgdn {
namespace fs = std::filesystem;

namespace {

// A generated workload with its exact outputs, kept while consecutive runs use it.
struct PreparedWorkload {
  std::string wid;
  Workload workload;
  Tensor<double> exact_o;
  std::map<int64_t, Tensor<float>> exact_states;  // by chunk size, computed on demand
#ifdef SGDN_WITH_CUDA
  std::unique_ptr<CudaInputs> device_inputs;  // uploaded by the first cuda run, kept for the next ones
#endif
};

std::string part_of_run(const fs::path& parts, const std::string& rid) {
  return (parts / ("run-" + rid + ".h5")).string();
}
std::string part_of_workload(const fs::path& parts, const std::string& wid) {
  return (parts / ("workload-" + wid + ".h5")).string();
}

// The exact outputs of a workload stored by an earlier call, in the experiment file or in a part, if there.
void load_stored_exact(const std::string& path, PreparedWorkload& w) {
  if (!fs::exists(path)) return;
  const h5::File file = h5::File::open(path);
  if (file.is_group("/workloads/" + w.wid) && has_exact_outputs(file, w.wid))
    w.exact_o = load_exact_outputs(file, w.wid, w.workload.inputs.shape);
}

PreparedWorkload& prepare_workload(const RunSpec& run, const std::string& out, const fs::path& parts,
                                   std::unique_ptr<PreparedWorkload>& cache, std::ostream& progress) {
  if (cache && cache->wid == run.workload_id) return *cache;
  cache.reset();
  auto w = std::make_unique<PreparedWorkload>();
  w->wid = run.workload_id;
  const auto generation_start = std::chrono::steady_clock::now();
  w->workload = make_workload(run.section("workload"));
  progress << "  workload " << w->wid << " (" << w->workload.inputs.shape.str() << "): made in " << std::fixed
           << std::setprecision(1)
           << std::chrono::duration<double>(std::chrono::steady_clock::now() - generation_start).count()
           << " s\n";
  const std::string part = part_of_workload(parts, w->wid);
  const bool reference = run.get_bool("run.reference");
  const bool part_exists = fs::exists(part);  // written by an earlier, interrupted call
  if (part_exists)
    load_stored_exact(part, *w);
  else if (reference)  // a grown sweep: the experiment file may hold this workload's reference already
    load_stored_exact(out, *w);
  if (reference && w->exact_o.empty()) {
    const auto start = std::chrono::steady_clock::now();
    w->exact_o = run_exact(w->workload.inputs, 64, false).o;
    progress << "  workload " << w->wid << " (" << w->workload.inputs.shape.str() << "): exact outputs in "
             << std::fixed << std::setprecision(1)
             << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s\n";
  }
  if (!part_exists)
    h5::write_atomically(part, [&](h5::File& f) {
      write_schema_attributes(f);
      write_workload(f, w->wid, w->workload, w->exact_o, run.get_bool("dump.inputs"));
    });
  cache = std::move(w);
  return *cache;
}

template <class S>
EngineResult<float> to_float(EngineResult<S>&& r) {
  if constexpr (std::is_same_v<S, float>) {
    return std::move(r);
  } else {
    EngineResult<float> f;
    f.o = r.o.template cast<float>();
    f.final_state = r.final_state.template cast<float>();
    f.event_mask = std::move(r.event_mask);
    f.event_score = std::move(r.event_score);
    f.budget = std::move(r.budget);
    f.snapshots = std::move(r.snapshots);
    f.snapshot_index = std::move(r.snapshot_index);
    f.state_error = std::move(r.state_error);
    f.flops = r.flops;
    f.dense_flops = r.dense_flops;
    f.sequential_flops = r.sequential_flops;
    f.seconds = r.seconds;
    return f;
  }
}

// Runs one configuration and writes its part file.
void execute_run(const RunSpec& run, PreparedWorkload& pw, const std::string& part_path) {
  // A normalised copy only where asked for: long workloads are large.
  std::optional<Inputs<double>> normalized;
  if (run.get_bool("run.normalize_qk")) {
    normalized = pw.workload.inputs;
    l2_normalize_qk(*normalized);
  }
  const Inputs<double>& inputs = normalized ? *normalized : pw.workload.inputs;
  const RunStrategies strategies = make_run_strategies(run);
  EngineConfig config = strategies.engine_config(run);
  const int64_t chunk = config.chunk;
  // Without the reference (run.reference = false) only task metrics are measured: long needle sweeps.
  const bool reference = run.get_bool("run.reference");
  const bool measure_states = reference && run.get_bool("run.state_error");
  const bool on_cpu = run.get("run.backend") == "cpu";
  const bool exact_against_normalized = reference && run.get_bool("run.normalize_qk");
  Tensor<double> exact_o_normalized;
  if (measure_states) {
    if (exact_against_normalized || !pw.exact_states.count(chunk)) {
      ExactReference ref = run_exact(inputs, chunk, true);
      if (exact_against_normalized) exact_o_normalized = std::move(ref.o);
      pw.exact_states[chunk] = std::move(ref.chunk_states);
    }
    // The CPU engine measures the states as it goes; other backends' snapshots are compared afterwards.
    if (on_cpu) config.reference_states = &pw.exact_states[chunk];
    if (!on_cpu) config.keep_snapshots = true;
  } else if (exact_against_normalized) {
    exact_o_normalized = run_exact(inputs, chunk, false).o;
  }
  const Tensor<double>& exact_o = exact_against_normalized ? exact_o_normalized : pw.exact_o;

  EngineResult<float> res;
  bool o_is_query_rows = false;  // o is [1, Q, HV, V]: query q's row only
  const std::string backend = run.get("run.backend"), precision = run.get("run.precision");
  if (backend == "cpu") {
    res = precision == "float64" ? to_float(run_cpu(inputs, config)) : run_cpu(inputs.cast<float>(), config);
  } else {
#ifdef SGDN_WITH_CUDA
    CudaRunOptions options;
    options.input_precision = parse_cuda_precision(precision);
    // bf16 inputs take the tensor-core kernels where they apply (K = V = 128, C = 64); parity bound 1e-2.
    options.tensor_cores = options.input_precision == CudaPrecision::bfloat16;
    options.timing_repeats = int(run.get_int("run.timing_repeats"));
    // Only the rows the metrics read come back when o is neither compared nor dumped (needle sweeps).
    if (!reference && !run.get_bool("dump.outputs") && pw.workload.needle)
      options.output_tokens = needle_query_tokens(*pw.workload.needle, inputs.shape);
    if (normalized) {
      res = run_cuda(inputs.cast<float>(), config, options);
    } else {
      if (!pw.device_inputs || pw.device_inputs->precision() != options.input_precision) {
        pw.device_inputs.reset();
        pw.device_inputs = std::make_unique<CudaInputs>(inputs, options.input_precision, options.device);
      }
      res = run_cuda(*pw.device_inputs, config, options);
    }
    o_is_query_rows = !options.output_tokens.empty();
#else
    fail(
        "run.backend = cuda: this sgdn was built without the CUDA backend (configure with "
        "-DSGDN_WITH_CUDA=ON)");
#endif
  }
  if (measure_states && !on_cpu) {
    res.state_error = state_error_from_snapshots(inputs, chunk, res.event_mask, res.snapshots,
                                                 res.snapshot_index, pw.exact_states[chunk]);
  }
  if (exact_against_normalized) pw.exact_states.erase(chunk);

  const Shape& shape = inputs.shape;
  const std::optional<OutputError> err =
      reference ? std::optional<OutputError>(
                      output_error(res.o, exact_o, shape, run.get_int("run.position_buckets")))
                : std::nullopt;
  const Retention ret = retention(res.event_mask, res.budget);
  const Cost cost = cost_of(shape, chunk, res.flops, res.dense_flops, res.sequential_flops, res.event_mask);

  h5::write_atomically(part_path, [&](h5::File& f) {
    const std::string root = "/runs/" + run.id;
    f.create_group(root);
    std::vector<std::string> written = {"events/mask", "events/score", "events/budget", "metrics"};
    for (const auto& [key, value] : run.resolved) f.set_attr(root, key, h5::attr_value_from_text(value));
    f.set_attr(root, "workload", run.workload_id);
    f.set_attr(root, "backend", backend);
    f.set_attr(root, "label", run.label());
    for (const auto& [axis, name] : run.variants)
      f.set_attr(root, axis.empty() ? "variant" : "variant." + axis, name);
    if (run.get_bool("dump.outputs")) {
      f.write(root + "/outputs/o", res.o);
      written.insert(written.begin(), "outputs/o");
    }
    f.write(root + "/events/mask", res.event_mask);
    f.write(root + "/events/score", res.event_score);
    f.write(root + "/events/budget", res.budget);
    if (run.get_bool("dump.states") && !res.snapshots.empty()) {
      f.write(root + "/states/snapshots", res.snapshots);
      f.write(root + "/states/snapshot_index", res.snapshot_index);
      written.push_back("states/snapshots");
      written.push_back("states/snapshot_index");
    }
    const std::string m = root + "/metrics";
    auto vec = [](const std::vector<double>& v) {
      Tensor<double> t({int64_t(v.size())});
      std::copy(v.begin(), v.end(), t.data());
      return t;
    };
    if (err) {
      f.write(m + "/output_error_per_head", vec(err->per_head));
      f.write(m + "/output_error_per_bucket", vec(err->per_bucket));
      Tensor<int64_t> starts({int64_t(err->bucket_start.size())});
      std::copy(err->bucket_start.begin(), err->bucket_start.end(), starts.data());
      f.write(m + "/bucket_start", starts);
      f.set_attr(m, "output_error", err->overall);
    }
    f.write(m + "/retention_per_unit", vec(ret.per_unit));
    f.set_attr(m, "retention", ret.overall);
    f.set_attr(m, "flops_ratio", cost.flops_ratio);
    f.set_attr(m, "sequential_ratio", cost.sequential_ratio);
    f.set_attr(m, "state_bytes", cost.state_bytes);
    f.set_attr(m, "dense_state_bytes", cost.dense_state_bytes);
    f.set_attr(m, "seconds", res.seconds);
    if (!res.state_error.empty()) {
      f.write(m + "/state_error", res.state_error.cast<float>());
      const std::vector<double> by_chunk = state_error_by_chunk(res.state_error);
      f.write(m + "/state_error_per_chunk", vec(by_chunk));
      f.set_attr(m, "final_state_error", by_chunk.back());
    }
    if (pw.workload.needle) {
      const NeedleTruth& truth = *pw.workload.needle;
      // o holds either the whole batch or only the query rows, in query order (see output_tokens).
      if (o_is_query_rows)
        require(res.o.dims() == std::vector<int64_t>{1, truth.num_queries(), shape.v_heads, shape.value_dim},
                "needle scores: the backend returned o of shape ", dims_str(res.o.dims()), " for ",
                truth.num_queries(), " query rows");
      const std::vector<NeedleScore> scores = o_is_query_rows
                                                  ? needle_scores_on_query_rows(truth, res.o.data(), shape)
                                                  : needle_scores(truth, res.o.data(), shape);
      std::vector<int32_t> correct;
      Tensor<double> cosine({int64_t(scores.size())});
      for (size_t i = 0; i < scores.size(); ++i) {
        correct.push_back(scores[i].correct);
        cosine[int64_t(i)] = scores[i].answer_cosine;
      }
      const NeedleAccuracy acc = needle_accuracy(truth, correct);
      Tensor<int32_t> correct_t({int64_t(correct.size())});
      std::copy(correct.begin(), correct.end(), correct_t.data());
      f.write(m + "/needle_correct", correct_t);
      f.write(m + "/needle_answer_cosine", cosine);
      f.write(m + "/needle_depths", vec(acc.depths));
      f.write(m + "/needle_accuracy_by_depth", vec(acc.accuracy));
      f.set_attr(m, "needle_accuracy", acc.overall);
    }
    f.set_attr(root, "written", join(written, ","));
  });
}

std::set<std::string> runs_in(const std::string& path) {
  std::set<std::string> ids;
  if (!fs::exists(path)) return ids;
  const h5::File file = h5::File::open(path);
  if (file.is_group("/runs"))
    for (const std::string& id : file.children("/runs")) ids.insert(id);
  return ids;
}

// Copies what `source` has under `path` and `target` lacks: whole objects, or for a group that exists in
// both, its missing children (a workload first written without inputs or exact outputs gains them later).
void copy_missing(h5::File& target, const h5::File& source, const std::string& path) {
  if (!target.exists(path)) {
    target.copy_from(source, path, path);
  } else if (source.is_group(path) && target.is_group(path)) {
    for (const std::string& child : source.children(path)) copy_missing(target, source, path + "/" + child);
  }
}

// Holds an exclusive lock on `path` (created if missing) while it lives: shards that were given the same
// experiment file merge one after the other instead of overwriting each other's merge.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT, 0644)) {
    require(fd_ >= 0, "cannot open lock file '", path, "': ", std::strerror(errno));
    require(::flock(fd_, LOCK_EX) == 0, "cannot lock '", path, "': ", std::strerror(errno));
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

// Adds every finished part to the experiment file (atomically), then removes the parts it merged. Parts
// still being written (temporary names) and the parts folder of another shard's ongoing runs stay.
void merge_parts(const std::string& out, const fs::path& parts, bool remove_folder, std::ostream& progress) {
  const FileLock lock(out + ".lock");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(parts))
    if (entry.path().extension() == ".h5") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  const bool existing = fs::exists(out);
  h5::AtomicFile target(out, /*start_from_existing=*/existing);
  h5::File& f = target.file();
  if (!existing) write_schema_attributes(f);
  for (const fs::path& part : files) {
    const h5::File source = h5::File::open(part.string());
    for (const char* top : {"/workloads", "/runs"}) {
      if (!source.is_group(top)) continue;
      for (const std::string& id : source.children(top)) copy_missing(f, source, std::string(top) + "/" + id);
    }
  }
  if (f.is_group("/runs")) {
    for (const std::string& rid : f.children("/runs")) {
      const std::string wid = f.attr_string("/runs/" + rid, "workload");
      if (!f.is_group("/workloads/" + wid))
        progress << "sgdn run: warning: run " << rid << " names workload " << wid
                 << ", which the file lacks\n";
    }
  }
  target.commit();
  for (const fs::path& part : files) fs::remove(part);
  // The folder goes only when no other shard can be writing into it.
  std::error_code not_empty;
  if (remove_folder) fs::remove(parts, not_empty);
}

std::string format_seconds(double s) {
  std::ostringstream out;
  if (s < 90) {
    out << int(s + 0.5) << " s";
  } else if (s < 5400) {
    out << int(s / 60 + 0.5) << " min";
  } else {
    out << std::fixed << std::setprecision(1) << s / 3600 << " h";
  }
  return out.str();
}

}  // namespace

RunnerSummary run_experiment(const Experiment& experiment, const RunnerOptions& options,
                             std::ostream& progress) {
  require(!options.out.empty(), "sgdn run: no output file (--out FILE.h5)");
  const std::vector<RunSpec> all = experiment.expand();  // validates every run before anything is written
  std::vector<RunSpec> mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (int64_t(i) % options.shard_count == options.shard_index) mine.push_back(all[i]);

  const fs::path parts = options.out + ".parts";
  const std::set<std::string> in_file = runs_in(options.out);
  RunnerSummary summary;
  summary.runs = int64_t(mine.size());
  std::vector<const RunSpec*> pending;
  for (const RunSpec& run : mine) {
    if (in_file.count(run.id) || fs::exists(part_of_run(parts, run.id))) {
      ++summary.already_done;
    } else {
      pending.push_back(&run);
    }
  }
  progress << "sgdn run: " << mine.size() << " runs";
  if (options.shard_count > 1) progress << " in shard " << options.shard_index << "/" << options.shard_count;
  progress << " (of " << all.size() << "), " << summary.already_done << " already done, " << pending.size()
           << " to run -> " << options.out << "\n";
  if (!pending.empty()) fs::create_directories(parts);

  std::unique_ptr<PreparedWorkload> cache;
  const auto start = std::chrono::steady_clock::now();
  for (const RunSpec* run : pending) {
    if (options.stop_after >= 0 && summary.ran >= options.stop_after) return summary;
    fs::create_directories(parts);  // also where another process removed it meanwhile
    PreparedWorkload& pw = prepare_workload(*run, options.out, parts, cache, progress);
    const auto run_start = std::chrono::steady_clock::now();
    execute_run(*run, pw, part_of_run(parts, run->id));
    ++summary.ran;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double left = elapsed / double(summary.ran) * double(pending.size() - size_t(summary.ran));
    progress << "[" << summary.already_done + summary.ran << "/" << mine.size() << "] " << run->id << " "
             << run->label() << "  " << std::fixed << std::setprecision(2)
             << std::chrono::duration<double>(now - run_start).count() << " s, about " << format_seconds(left)
             << " left\n"
             << std::flush;
  }
  if (fs::exists(parts)) {
    merge_parts(options.out, parts, options.shard_count == 1, progress);
    summary.merged = true;
  }
  return summary;
}

}  // namespace sgdn
