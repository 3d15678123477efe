#include "experiments/runner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "analysis/metrics.h"
#include "analysis/tables.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/hdf5_file.h"
#include "data/file_schema.h"
#include "data/file_workload.h"
#include "data/workload.h"
#ifdef SGDN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_backend.h"
#endif
#include <omp.h>

namespace sgdn {
namespace fs = std::filesystem;

namespace {

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

// An flock() on OUT.h5.lock. Merges take it exclusively; part writers take it shared while they create the
// parts folder and their temporary file, so that a merge never removes the folder under them and its
// cleanup of abandoned temporary files never sees a file whose writer has not locked it yet. The exclusive
// holder writes who it is into the file and removes the file when done: a run leaves no lock file behind.
// Waiting is bounded (`sgdn run --lock-wait`) and said on the progress stream.
class FileLock {
 public:
  enum class Kind { shared, exclusive };
  // `what`: what the lock guards, for messages. wait_seconds < 0: try once, without a message; whether the
  // lock was taken is then held().
  FileLock(const std::string& path, Kind kind, double wait_seconds, const std::string& what,
           std::ostream& progress)
      : path_(path), kind_(kind) {
    const auto start = std::chrono::steady_clock::now();
    bool told = false;
    for (;;) {
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      require(fd_ >= 0, "cannot open lock file '", path, "': ", std::strerror(errno));
      if (::flock(fd_, (kind == Kind::exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) {
        // The last holder may have removed the file meanwhile: then lock the file that now has the name.
        struct stat locked {
        }, named{};
        if (::fstat(fd_, &locked) == 0 && ::stat(path.c_str(), &named) == 0 &&
            locked.st_ino == named.st_ino && locked.st_dev == named.st_dev) {
          if (kind == Kind::exclusive) record_holder();
          return;
        }
      } else {
        require(errno == EWOULDBLOCK, "cannot lock '", path, "': ", std::strerror(errno));
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (wait_seconds < 0) {
          release_descriptor();
          return;
        }
        if (!told) {
          progress << "sgdn run: waiting for " << what << ": '" << path << "' is held by " << holder()
                   << " (waiting at most " << format_seconds(wait_seconds) << "; --lock-wait SECONDS)\n"
                   << std::flush;
          told = true;
        }
        if (waited >= wait_seconds) {
          const std::string by = holder();
          release_descriptor();
          fail("gave up waiting for ", what, " after ", format_seconds(waited), ": '", path,
               "' is still held by ", by,
               ". Let that process finish and run again, or wait longer with --lock-wait SECONDS");
        }
      }
      release_descriptor();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  ~FileLock() {
    if (fd_ < 0) return;
    if (kind_ == Kind::exclusive) ::unlink(path_.c_str());  // while still holding it (see the constructor)
    release_descriptor();
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  void record_holder() {
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    const std::string text = "sgdn process " + std::to_string(::getpid()) + " on " + host + "\n";
    if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) < 0) {
      // Only a courtesy to whoever waits: the lock itself holds.
    }
  }
  // Who holds the lock, as the exclusive holder recorded it.
  std::string holder() const {
    char text[300] = {};
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    std::string who = n > 0 ? std::string(text, size_t(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == '\r')) who.pop_back();
    return who.empty() ? "another process" : who + " (merging)";
  }
  void release_descriptor() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string path_;
  Kind kind_;
  int fd_ = -1;
};

std::string lock_path(const std::string& out) {
  return out + ".lock";
}

// Writes one part file: the folder and the temporary file are made under the shared lock (see FileLock),
// the content after it, so that a merge by another shard can run meanwhile.
void write_part(const std::string& out, const fs::path& parts, const std::string& part,
                const RunnerOptions& options, std::ostream& progress,
                const std::function<void(h5::File&)>& fill) {
  std::optional<h5::AtomicFile> atomic;
  {
    const FileLock guard(lock_path(out), FileLock::Kind::shared, options.lock_wait_seconds,
                         "the merge into '" + out + "' to finish", progress);
    fs::create_directories(parts);
    atomic.emplace(part);
  }
  fill(atomic->file());
  atomic->commit();
}

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

PreparedWorkload& prepare_workload(const RunSpec& run, const RunnerOptions& options, const fs::path& parts,
                                   std::unique_ptr<PreparedWorkload>& cache, std::ostream& progress) {
  const std::string& out = options.out;
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
    // Rounded to float32 as the file stores it: a resumed or grown run reads the stored copy, and every run
    // of a workload must measure its error against the same reference.
    w->exact_o = run_exact(w->workload.inputs, 64, false).o.cast<float>().cast<double>();
    progress << "  workload " << w->wid << " (" << w->workload.inputs.shape.str() << "): exact outputs in "
             << std::fixed << std::setprecision(1)
             << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s\n";
  }
  if (!part_exists)
    write_part(out, parts, part, options, progress, [&](h5::File& f) {
      write_schema_attributes(f);
      // dump.level = analysis keeps no exact outputs either (a grown sweep computes them again).
      const bool exact = run.get("dump.level") != "analysis";
      write_workload(f, w->wid, w->workload, exact ? w->exact_o : Tensor<double>(), run.dumps("inputs"));
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

// The build and the machine that made a run: the source revision (and whether the tree was dirty), the
// compiler, the host, the CPU threads, the GPU of a cuda run.
void write_build_attributes(h5::File& f, const std::string& root, const std::string& backend) {
  const BuildInfo& build = this_build();
  f.set_attr(root, "build_revision", build.revision);
  f.set_attr(root, "build_dirty", int64_t(build.dirty ? 1 : 0));
  f.set_attr(root, "build_source", build.source_id);
  f.set_attr(root, "build_compiler", build.compiler);
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  f.set_attr(root, "build_host", std::string(host));
  f.set_attr(root, "build_threads", int64_t(omp_get_max_threads()));
#ifdef SGDN_WITH_CUDA
  if (backend == "cuda") {
    cudaDeviceProp properties{};
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&properties, device) == cudaSuccess)
      f.set_attr(root, "build_gpu", std::string(properties.name));
  }
#else
  (void)backend;
#endif
}

// Runs one configuration and writes its part file.
void execute_run(const RunSpec& run, PreparedWorkload& pw, const RunnerOptions& runner, const fs::path& parts,
                 std::ostream& progress) {
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
    if (!reference && !run.dumps("outputs") && pw.workload.needle)
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

  write_part(runner.out, parts, part_of_run(parts, run.id), runner, progress, [&](h5::File& f) {
    const std::string root = "/runs/" + run.id;
    f.create_group(root);
    std::vector<std::string> written = {"events/mask", "events/score", "events/budget", "metrics"};
    for (const auto& [key, value] : run.resolved) f.set_attr(root, key, h5::attr_value_from_text(value));
    f.set_attr(root, "workload", run.workload_id);
    f.set_attr(root, "backend", backend);
    f.set_attr(root, "label", run.label());
    write_build_attributes(f, root, backend);
    for (const auto& [axis, name] : run.variants)
      f.set_attr(root, axis.empty() ? "variant" : "variant." + axis, name);
    if (run.dumps("outputs")) {
      write_described(f, root, "outputs/o", res.o);
      written.insert(written.begin(), "outputs/o");
    }
    write_described(f, root, "events/mask", res.event_mask);
    write_described(f, root, "events/score", res.event_score);
    write_described(f, root, "events/budget", res.budget);
    if (run.dumps("states") && !res.snapshots.empty()) {
      write_described(f, root, "states/snapshots", res.snapshots);
      write_described(f, root, "states/snapshot_index", res.snapshot_index);
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
      write_described(f, root, "metrics/output_error_per_head", vec(err->per_head));
      write_described(f, root, "metrics/output_error_per_bucket", vec(err->per_bucket));
      Tensor<int64_t> starts({int64_t(err->bucket_start.size())});
      std::copy(err->bucket_start.begin(), err->bucket_start.end(), starts.data());
      write_described(f, root, "metrics/bucket_start", starts);
      f.set_attr(m, "output_error", err->overall);
    }
    write_described(f, root, "metrics/retention_per_unit", vec(ret.per_unit));
    f.set_attr(m, "retention", ret.overall);
    f.set_attr(m, "flops_ratio", cost.flops_ratio);
    f.set_attr(m, "sequential_ratio", cost.sequential_ratio);
    f.set_attr(m, "state_bytes", cost.state_bytes);
    f.set_attr(m, "dense_state_bytes", cost.dense_state_bytes);
    f.set_attr(m, "seconds", res.seconds);
    if (!res.state_error.empty()) {
      write_described(f, root, "metrics/state_error", res.state_error.cast<float>());
      const std::vector<double> by_chunk = state_error_by_chunk(res.state_error);
      write_described(f, root, "metrics/state_error_per_chunk", vec(by_chunk));
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
      write_described(f, root, "metrics/needle_correct", correct_t);
      write_described(f, root, "metrics/needle_answer_cosine", cosine);
      write_described(f, root, "metrics/needle_depths", vec(acc.depths));
      write_described(f, root, "metrics/needle_accuracy_by_depth", vec(acc.accuracy));
      f.set_attr(m, "needle_accuracy", acc.overall);
    }
    f.set_attr(root, "written", join(written, ","));
  });
}

// The source id of the build that made a run ("" for runs written before builds were recorded).
std::string build_source_of(const h5::File& file, const std::string& run_path) {
  return file.has_attr(run_path, "build_source") ? file.attr_string(run_path, "build_source") : "";
}

// The runs of a file, each with the source id of the build that made it.
std::map<std::string, std::string> runs_in(const std::string& path) {
  std::map<std::string, std::string> runs;
  if (!fs::exists(path)) return runs;
  const h5::File file = h5::File::open(path);
  if (file.is_group("/runs"))
    for (const std::string& id : file.children("/runs")) runs[id] = build_source_of(file, "/runs/" + id);
  return runs;
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

// Adds every finished part to the experiment file (atomically), then removes the parts it merged. Under the
// exclusive lock it first removes what killed processes left: temporary files of merges and part writes.
// Parts still being written (their temporary files are locked) stay, and the folder goes once empty.
void merge_parts(const RunnerOptions& options, const fs::path& parts, std::ostream& progress) {
  const std::string& out = options.out;
  const FileLock lock(lock_path(out), FileLock::Kind::exclusive, options.lock_wait_seconds,
                      "the lock to merge into '" + out + "'", progress);
  const fs::path out_path(out);
  std::vector<std::string> removed = h5::remove_abandoned_temporaries(out_path.parent_path().string(),
                                                                      out_path.filename().string() + ".tmp-");
  const std::vector<std::string> in_parts = h5::remove_abandoned_temporaries(parts.string());
  removed.insert(removed.end(), in_parts.begin(), in_parts.end());
  for (const std::string& path : removed)
    progress << "sgdn run: removed '" << path << "', left by an interrupted run\n";
  std::vector<fs::path> files;
  std::error_code missing;  // another process running the same command merged and removed the folder
  for (fs::directory_iterator it(parts, missing), end; !missing && it != end; it.increment(missing))
    if (it->path().extension() == ".h5") files.push_back(it->path());
  std::sort(files.begin(), files.end());
  if (!files.empty()) {
    const bool existing = fs::exists(out);
    // The merged file holds at most the current one and every part, plus HDF5's bookkeeping.
    uint64_t need = existing ? uint64_t(fs::file_size(out)) : 0;
    for (const fs::path& part : files) need += uint64_t(fs::file_size(part));
    need += need / 10 + (uint64_t(1) << 20);
    h5::AtomicFile target(out, /*start_from_existing=*/existing, need);
    h5::File& f = target.file();
    if (!existing) write_schema_attributes(f);
    for (const fs::path& part : files) {
      const h5::File source = h5::File::open(part.string());
      for (const char* top : {"/workloads", "/runs"}) {
        if (!source.is_group(top)) continue;
        for (const std::string& id : source.children(top)) {
          const std::string path = std::string(top) + "/" + id;
          // A run made again by another build replaces the file's (its space is reused by h5repack only).
          if (top == std::string("/runs") && f.exists(path) &&
              build_source_of(f, path) != build_source_of(source, path))
            f.remove(path);
          copy_missing(f, source, path);
        }
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
  }
  // Only an empty folder goes: another shard's runs may still be writing into it.
  std::error_code not_empty;
  fs::remove(parts, not_empty);
}

// After a failure: the parts folder if this call made it and nothing is in it, without waiting for a lock
// another process holds.
void remove_empty_parts_folder(const std::string& out, const fs::path& parts) {
  try {
    std::ostringstream quiet;
    const FileLock lock(lock_path(out), FileLock::Kind::exclusive, -1, "", quiet);
    std::error_code not_empty;
    if (lock.held()) fs::remove(parts, not_empty);
  } catch (const Error&) {
    // A lock file that cannot be made: nothing to clean either.
  }
}

// Refuses an experiment file of another schema version, or a file sgdn did not write, before any work.
void check_output_file(const std::string& out) {
  std::error_code ignored;
  if (!fs::exists(out, ignored)) return;
  const h5::File file = h5::File::open(out);
  require_writable_experiment_schema(file);
}

// What a run holds in memory at once, roughly: the inputs (float64, and a float32 copy), the exact outputs
// and the run's outputs, the exact states per chunk, the state snapshots. For generated workloads (a file
// workload's size is that of its file).
double estimated_run_bytes(const RunSpec& run) {
  if (run.get("workload.kind") == "file") return 0;
  const double B = double(run.get_int("workload.batch")), T = double(run.get_int("workload.tokens"));
  const double H = double(run.get_int("workload.qk_heads")), HV = double(run.get_int("workload.v_heads"));
  const double K = double(run.get_int("workload.key_dim")), V = double(run.get_int("workload.value_dim"));
  const double chunks = std::ceil(T / double(run.get_int("run.chunk")));
  const double inputs = B * T * (2 * H * K + HV * V + 2 * HV) * (8 + 4);
  const bool reference = run.get_bool("run.reference");
  const double outputs = B * T * HV * V * ((reference ? 8 : 0) + 4);
  const double state = B * HV * K * V * 4;
  const double states =
      state * chunks *
      ((reference && run.get_bool("run.state_error") ? 1 : 0) + (run.dumps("states") ? 1 : 0));
  return inputs + outputs + states;
}

// Refuses, before anything is allocated or written, a run that cannot fit this machine's memory.
void check_memory(const std::vector<const RunSpec*>& runs) {
  const double physical = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  if (physical <= 0) return;
  for (const RunSpec* run : runs) {
    const double need = estimated_run_bytes(*run);
    if (need <= physical) continue;
    auto gib = [](double bytes) {
      std::ostringstream out;
      out << std::setprecision(3) << bytes / double(1ull << 30) << " GiB";
      return out.str();
    };
    fail("run ", run->id, " (", run->label(), ") needs about ", gib(need),
         " of memory, more than this machine's ", gib(physical), ": lower workload.tokens (now ",
         run->get("workload.tokens"), "), or workload.batch, workload.v_heads or workload.qk_heads");
  }
}

// An experiment file that is the input of one of its own file workloads would grow with every call.
void check_out_is_not_an_input(const std::vector<RunSpec>& runs, const std::string& out) {
  std::error_code ignored;
  if (!fs::exists(out, ignored)) return;
  for (const RunSpec& run : runs) {
    if (run.get("workload.kind") != "file") continue;
    const std::string input = run.get("workload.path");
    require(!fs::equivalent(input, out, ignored), "--out '", out, "' is the input file of workload.path = '",
            input, "': write the results to another file");
  }
}

}  // namespace

std::vector<RunState> run_states(const std::vector<RunSpec>& runs, const std::string& out) {
  const std::map<std::string, std::string> in_file = runs_in(out);
  const fs::path parts = out + ".parts";
  const std::string& mine = this_build().source_id;
  std::vector<RunState> states;
  for (const RunSpec& run : runs) {
    std::optional<std::string> made_by;
    if (auto it = in_file.find(run.id); it != in_file.end()) made_by = it->second;
    const std::string part = part_of_run(parts, run.id);
    std::error_code ignored;
    if (fs::exists(part, ignored)) {
      const std::string in_part = build_source_of(h5::File::open(part), "/runs/" + run.id);
      if (!made_by || in_part == mine)
        made_by = in_part;  // a part of this build is merged over the file's run
    }
    states.push_back(!made_by           ? RunState::to_run
                     : *made_by == mine ? RunState::done
                                        : RunState::done_by_other_build);
  }
  return states;
}

RunnerSummary run_experiment(const Experiment& experiment, const RunnerOptions& options,
                             std::ostream& progress) {
  require(!options.out.empty(), "sgdn run: no output file (--out FILE.h5)");
  const std::vector<RunSpec> all = experiment.expand();  // validates every run before anything is written
  check_out_is_not_an_input(all, options.out);
  check_output_file(options.out);
  const std::vector<std::string> labels = distinct_labels(all);
  std::vector<size_t> mine;
  for (size_t i = 0; i < all.size(); ++i)
    if (int64_t(i) % options.shard_count == options.shard_index) mine.push_back(i);

  RunnerSummary summary;
  summary.runs = int64_t(mine.size());
  const fs::path parts = options.out + ".parts";
  if (mine.empty()) {
    progress << "sgdn run: no runs";
    if (options.shard_count > 1)
      progress << " in shard " << options.shard_index << "/" << options.shard_count << " (the experiment has "
               << all.size() << ")";
    progress << "; nothing to do\n";
    return summary;
  }
  const std::vector<RunState> states = run_states(all, options.out);
  std::vector<size_t> pending;
  int64_t other_build = 0;
  for (size_t i : mine) {
    if (states[i] == RunState::done || (options.reuse_runs && states[i] == RunState::done_by_other_build)) {
      ++summary.already_done;
    } else {
      other_build += states[i] == RunState::done_by_other_build;
      pending.push_back(i);
    }
  }
  if (other_build > 0)
    progress << "sgdn run: " << other_build << " runs in " << options.out
             << " were made by another build than " << this_build().source_id
             << " and run again (--reuse-runs keeps them)\n";
  std::vector<const RunSpec*> pending_runs;
  for (size_t i : pending) pending_runs.push_back(&all[i]);
  check_memory(pending_runs);
  progress << "sgdn run: " << mine.size() << " runs";
  if (options.shard_count > 1) progress << " in shard " << options.shard_index << "/" << options.shard_count;
  progress << " (of " << all.size() << "), " << summary.already_done << " already done, " << pending.size()
           << " to run -> " << options.out << "\n";

  try {
    std::unique_ptr<PreparedWorkload> cache;
    const auto start = std::chrono::steady_clock::now();
    for (size_t i : pending) {
      const RunSpec& run = all[i];
      if (options.stop_after >= 0 && summary.ran >= options.stop_after) return summary;
      PreparedWorkload& pw = prepare_workload(run, options, parts, cache, progress);
      const auto run_start = std::chrono::steady_clock::now();
      execute_run(run, pw, options, parts, progress);
      ++summary.ran;
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double left = elapsed / double(summary.ran) * double(pending.size() - size_t(summary.ran));
      progress << "[" << summary.already_done + summary.ran << "/" << mine.size() << "] " << run.id << " "
               << labels[i] << "  " << std::fixed << std::setprecision(2)
               << std::chrono::duration<double>(now - run_start).count() << " s, about "
               << format_seconds(left) << " left\n"
               << std::flush;
    }
    merge_parts(options, parts, progress);
  } catch (...) {
    remove_empty_parts_folder(options.out, parts);
    throw;
  }
  summary.merged = true;
  return summary;
}

}  // namespace sgdn
