#include "experiments/config.h"

#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/defaults.h"
#include "core/hdf5_file.h"
#include "data/file_workload.h"
#include "data/needle_workload.h"
#include "data/random_workload.h"
#include "data/workload.h"

namespace sgdn {
namespace po = boost::program_options;

namespace {

void add_specs(std::map<std::string, KeySpec>& keys, const std::string& section,
               const std::vector<ParamSpec>& specs) {
  for (const ParamSpec& p : specs) keys.emplace(section + "." + p.key, KeySpec{p.default_value, p.help, {}});
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = trim(item);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

const std::vector<std::string> kSections = {"workload", "run", "solver", "selector", "dump"};

void check_known_key(const std::string& key, const char* where) {
  if (config_keys().count(key)) return;
  const size_t dot = key.find('.');
  const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
  if (std::find(kSections.begin(), kSections.end(), section) == kSections.end()) {
    fail("unknown config key '", key, "'", where, ": the sections are [", join(kSections, "] ["),
         "] and [sweep]");
  }
  fail("unknown config key '", key, "'", where, "; allowed in [", section,
       "]: ", join(keys_of_section(section), ", "));
}

// "section.key=value" sets a key; "sweep.section.key=a, b" sets the values a sweep takes (replacing the
// file's list). The command line wins over the file: a plain key also ends the file's sweep of it.
void set_override(Settings& settings, std::map<std::string, std::vector<std::string>>& sweep,
                  const std::string& assignment) {
  const size_t eq = assignment.find('=');
  require(eq != std::string::npos, "--set expects section.key=value, got '", assignment, "'");
  const std::string key = trim(assignment.substr(0, eq));
  const std::string value = trim(assignment.substr(eq + 1));
  if (key.compare(0, 6, "sweep.") == 0) {
    const std::string swept = key.substr(6);
    check_known_key(swept, " (from --set sweep.*)");
    const std::vector<std::string> values = split_list(value);
    require(!values.empty(), "--set ", key, " lists no values (expected ", key, "=a, b, ...)");
    sweep[swept] = values;
    return;
  }
  check_known_key(key, " (from --set)");
  settings[key] = value;
  sweep.erase(key);
}

// Numbers in their shortest exact form and booleans as true/false; anything else as written.
std::string canonical_value(const std::string& text) {
  if (text == "true" || text == "yes" || text == "on") return "true";
  if (text == "false" || text == "no" || text == "off") return "false";
  try {
    return std::to_string(parse_int("", text));
  } catch (const Error&) {
  }
  try {
    return h5::format_lossless(parse_double("", text));
  } catch (const Error&) {
  }
  return text;
}

// Keys added after results were first written, at their registered default (which computes what builds
// without them computed): left out of the run and workload identities there, so that earlier result files
// still resume.
bool later_key_at_default(const std::string& key, const std::string& canonical) {
  static const std::set<std::string> later_keys = {"selector.max_fraction",
                                                   "workload.positions",
                                                   "workload.key_overlap",
                                                   "workload.strong_writes",
                                                   "workload.decay_spectrum",
                                                   "workload.value_norm",
                                                   "dump.level"};
  return later_keys.count(key) && canonical == canonical_value(config_keys().at(key).default_value);
}

}  // namespace

const std::map<std::string, KeySpec>& config_keys() {
  static const std::map<std::string, KeySpec> keys = [] {
    std::map<std::string, KeySpec> k;
    k["workload.kind"] = {"random", "workload generator", {"random", "needle", "file"}};
    k["workload.batch"] = {"1", "sequences per batch", {}};
    k["workload.tokens"] = {"4096", "tokens per sequence (T >= 1)", {}};
    k["workload.qk_heads"] = {"16", "query/key heads H", {}};
    k["workload.v_heads"] = {"32", "value heads HV, a multiple of H", {}};
    k["workload.key_dim"] = {"128", "K", {}};
    k["workload.value_dim"] = {"128", "V", {}};
    k["workload.seed"] = {"0", "generator seed", {}};
    k["workload.path"] = {"", "kind = file: an HDF5 file with /workloads/<wid>/inputs", {}};
    k["workload.id"] = {"", "kind = file: the one workload to run (empty: every workload in the file)", {}};
    add_specs(k, "workload", RandomWorkloadOptions::param_specs());
    add_specs(k, "workload", NeedleOptions::param_specs());
    k["run.backend"] = {"cpu", "cpu | cuda", {"cpu", "cuda"}};
    k["run.precision"] = {"float32",
                          "float64 | float32 on cpu; bfloat16 | float32 inputs on cuda",
                          {"float64", "float32", "bfloat16"}};
    k["run.timing_repeats"] = {
        "1", "cuda: the forward runs this many times; metrics/seconds is the median GPU time", {}};
    k["run.chunk"] = {std::to_string(defaults::kChunk), "chunk size C", {}};
    k["run.group"] = {std::to_string(defaults::kGroup), "output window G in chunks (SPEC §6)", {}};
    k["run.normalize_qk"] = {"false", "L2-normalise q and k before the run", {}};
    k["run.position_buckets"] = {"8", "position buckets of the output error", {}};
    k["run.state_error"] = {"true", "measure the carried state against the exact one at every chunk", {}};
    k["run.reference"] = {
        "true",
        "compute the float64 exact outputs (output and state error); false keeps task metrics only",
        {}};
    k["solver.name"] = {defaults::kSolver, "intra-chunk solver", solver_registry().names()};
    for (const std::string& name : solver_registry().names())
      add_specs(k, "solver", solver_registry().entry(name).params);
    k["selector.name"] = {defaults::kSelector, "event selector", selector_registry().names()};
    k["selector.score"] = {defaults::kScore, "event score", score_registry().names()};
    k["selector.granularity"] = {
        defaults::kGranularity, "pair: one decision per head group; head: per value head", {"pair", "head"}};
    for (const std::string& name : selector_registry().names())
      add_specs(k, "selector", selector_registry().entry(name).params);
    for (const std::string& name : score_registry().names())
      add_specs(k, "selector", score_registry().entry(name).params);
    k["dump.inputs"] = {"true", "write the workload inputs and exact outputs", {}};
    k["dump.outputs"] = {"true", "write each run's outputs", {}};
    k["dump.states"] = {"false", "write each run's state snapshots", {}};
    k["dump.level"] = {"full",
                       "full: what the dump.* keys ask for; analysis: only events and metrics (no inputs, "
                       "exact outputs, outputs or states), for big sweeps",
                       {"full", "analysis"}};
    return k;
  }();
  return keys;
}

std::vector<std::string> keys_of_section(const std::string& section) {
  std::vector<std::string> out;
  for (const auto& [key, spec] : config_keys())
    if (key.compare(0, section.size() + 1, section + ".") == 0) out.push_back(key.substr(section.size() + 1));
  return out;
}

std::string short_hash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf).substr(0, 12);
}

std::string RunSpec::get(const std::string& key) const {
  auto it = resolved.find(key);
  require(it != resolved.end(), "run ", id, " has no key ", key);
  return it->second;
}
int64_t RunSpec::get_int(const std::string& key) const {
  return parse_int(key, get(key));
}
double RunSpec::get_double(const std::string& key) const {
  return parse_double(key, get(key));
}
bool RunSpec::get_bool(const std::string& key) const {
  return parse_bool(key, get(key));
}

bool RunSpec::dumps(const std::string& item) const {
  return get("dump.level") != "analysis" && get_bool("dump." + item);
}

Params RunSpec::section(const std::string& name) const {
  std::map<std::string, std::string> values;
  for (const auto& [key, value] : resolved)
    if (key.compare(0, name.size() + 1, name + ".") == 0) values[key.substr(name.size() + 1)] = value;
  return Params(name, values);
}

std::string RunSpec::label() const {
  std::ostringstream out;
  out << get("solver.name");
  if (get("solver.name") == "block_adjacent")
    out << "(b" << get("solver.block") << ",band" << get("solver.band") << ")";
  out << " " << get("selector.name");
  if (resolved.count("selector.rho")) out << " rho=" << get("selector.rho");
  if (resolved.count("selector.tau")) out << " tau=" << get("selector.tau");
  out << selector_param_text(get("selector.name"), resolved);
  out << " G=" << get("run.group") << " " << get("workload.kind");
  if (resolved.count("workload.task")) out << ":" << get("workload.task");
  if (resolved.count("workload.tokens")) out << " T=" << get("workload.tokens");
  if (resolved.count("workload.id") && !get("workload.id").empty()) out << " " << get("workload.id");
  for (const auto& [axis, name] : variants) out << " [" << (axis.empty() ? "" : axis + ".") << name << "]";
  return out.str();
}

std::vector<std::string> distinct_labels(const std::vector<RunSpec>& runs) {
  std::map<std::string, std::vector<size_t>> by_label;
  for (size_t i = 0; i < runs.size(); ++i) by_label[runs[i].label()].push_back(i);
  std::vector<std::string> labels(runs.size());
  for (const auto& [label, members] : by_label) {
    // The keys in which runs of one label differ (a key a run lacks counts as a difference).
    auto value_of = [&](size_t i, const std::string& key) {
      auto it = runs[i].resolved.find(key);
      return it == runs[i].resolved.end() ? std::string("-") : it->second;
    };
    std::set<std::string> differing;
    for (size_t i : members)
      for (size_t keys_of : {i, members.front()})
        for (const auto& entry : runs[keys_of].resolved)
          if (value_of(i, entry.first) != value_of(members.front(), entry.first))
            differing.insert(entry.first);
    for (size_t i : members) {
      labels[i] = label;
      for (const std::string& key : differing) labels[i] += " " + key + "=" + value_of(i, key);
    }
  }
  return labels;
}

RunSpec resolve_run(const Settings& settings) {
  auto value = [&](const std::string& key) {
    auto it = settings.find(key);
    return it != settings.end() ? it->second : config_keys().at(key).default_value;
  };
  RunSpec run;
  Settings& r = run.resolved;
  auto take = [&](const std::string& key) {
    const std::string v = value(key);
    const auto& allowed = config_keys().at(key).allowed;
    require(allowed.empty() || std::find(allowed.begin(), allowed.end(), v) != allowed.end(), key, " = '", v,
            "' is not allowed; allowed: ", join(allowed, ", "));
    r[key] = v;
    return v;
  };
  auto take_int = [&](const std::string& key, int64_t lo) {
    const int64_t v = parse_int(key, take(key));
    require(v >= lo, key, " = ", v, " must be >= ", lo);
    return v;
  };
  auto take_bool =
      [&](const std::string& key) {  // stored as true / false however it was written (1, yes, on)
        const bool b = parse_bool(key, take(key));
        r[key] = b ? "true" : "false";
        return b;
      };
  // A strategy's parameter; a boolean one is stored as true / false like the keys above (so that
  // `skip_own_group = 1` and `= true` are one run).
  auto take_param = [&](const std::string& section, const ParamSpec& p) {
    const std::string key = section + "." + p.key;
    if (p.boolean)
      take_bool(key);
    else
      take(key);
  };
  auto take_section_specs = [&](const std::string& section, const std::vector<ParamSpec>& specs) {
    for (const ParamSpec& p : specs) take_param(section, p);
  };

  // [workload]: the keys of its kind only.
  const std::string kind = take("workload.kind");
  if (kind == "file") {
    require(!take("workload.path").empty(), "workload.path must name an HDF5 file when workload.kind = file");
    take("workload.id");
  } else {
    Shape shape;
    shape.batch = take_int("workload.batch", 1);
    shape.tokens = take_int("workload.tokens", 1);
    shape.qk_heads = take_int("workload.qk_heads", 1);
    shape.v_heads = take_int("workload.v_heads", 1);
    shape.key_dim = take_int("workload.key_dim", 1);
    shape.value_dim = take_int("workload.value_dim", 1);
    take_int("workload.seed", 0);
    shape.validate();
    if (kind == "random") {
      take_section_specs("workload", RandomWorkloadOptions::param_specs());
      RandomWorkloadOptions::from_params(run.section("workload")).validate();
    } else {
      take_section_specs("workload", NeedleOptions::param_specs());
      NeedleOptions::from_params(run.section("workload")).resolved(shape);
    }
  }
  // The workload id: its canonical keys, the generators' version, and for a file its size and time, so
  // that a changed generator or input file is a new workload rather than a stale one.
  std::string workload_text = "generator_version=" + std::to_string(kWorkloadGeneratorVersion) + "\n";
  for (const auto& [key, v] : r)
    if (!later_key_at_default(key, canonical_value(v)))
      workload_text += key + "=" + canonical_value(v) + "\n";
  if (kind == "file") {
    std::error_code ec;
    const std::string path = r["workload.path"];
    workload_text += "file_size=" + std::to_string(std::filesystem::file_size(path, ec)) + "\n";
    const auto mtime = std::filesystem::last_write_time(path, ec);
    workload_text += "file_time=" + std::to_string(mtime.time_since_epoch().count()) + "\n";
  }
  run.workload_id = "w" + short_hash(workload_text);

  // [run]
  const std::string backend = take("run.backend");
#ifndef SGDN_WITH_CUDA
  require(backend == "cpu", "run.backend = cuda: this sgdn was built without the CUDA backend ",
          "(configure with -DSGDN_WITH_CUDA=ON on a machine with nvcc)");
#endif
  const std::string precision = take("run.precision");
  if (backend == "cpu") {
    require(precision == "float64" || precision == "float32", "run.precision = '", precision,
            "' is not available on the cpu backend; allowed: float64, float32");
  } else {
    require(precision == "bfloat16" || precision == "float32", "run.precision = '", precision,
            "' is not available on the cuda backend; allowed: bfloat16, float32");
    take_int("run.timing_repeats", 1);  // a cuda key only, and not part of the run id
  }
  take_int("run.chunk", 1);
  take_int("run.group", 1);
  take_bool("run.normalize_qk");
  take_int("run.position_buckets", 1);
  take_bool("run.state_error");
  take_bool("run.reference");
  // [solver], [selector]: the chosen strategies' parameters only.
  take_section_specs("solver", solver_registry().entry(take("solver.name")).params);
  const std::string selector = take("selector.name");
  take_section_specs("selector", selector_registry().entry(selector).params);
  // A selector that ignores scores (dense, random, stride) makes the score key unused: it takes the
  // default, so sweeping scores does not multiply those runs.
  const bool settings_without_score = !selector_reads_scores(selector);
  const std::string score =
      settings_without_score ? config_keys().at("selector.score").default_value : take("selector.score");
  r["selector.score"] = score;
  for (const ParamSpec& p : score_registry().entry(score).params) {
    if (settings_without_score) {
      r["selector." + p.key] = p.default_value;
    } else {
      take_param("selector", p);
    }
  }
  take("selector.granularity");
  take_bool("dump.inputs");
  take_bool("dump.outputs");
  take_bool("dump.states");
  take("dump.level");

  make_run_strategies(run);  // parameter ranges, block vs chunk
  // Canonical text, so that `0.1` and `0.10`, or `yes` and `true`, are one run.
  for (auto& [key, v] : r) v = canonical_value(v);
  // How a run is measured is not what it computes: the timing repeats stay out of its identity, so a rerun
  // with more repeats finds the run done.
  static const std::set<std::string> measurement_only = {"run.timing_repeats"};
  std::string text;
  for (const auto& [key, v] : r) {
    if (measurement_only.count(key) || later_key_at_default(key, v)) continue;
    text += key + "=" + v + "\n";
  }
  run.id = "r" + short_hash(text);
  return run;
}

RunStrategies make_run_strategies(const RunSpec& run) {
  RunStrategies s;
  s.solver = solver_registry().create(run.get("solver.name"), run.section("solver"));
  s.score = score_registry().create(run.get("selector.score"), run.section("selector"));
  s.selector = selector_registry().create(run.get("selector.name"), run.section("selector"));
  s.solver->check_chunk(run.get_int("run.chunk"));
  return s;
}

EngineConfig RunStrategies::engine_config(const RunSpec& run) const {
  EngineConfig c;
  c.chunk = run.get_int("run.chunk");
  c.group = run.get_int("run.group");
  c.solver = solver.get();
  c.score = score.get();
  c.selector = selector.get();
  c.granularity = parse_granularity(run.get("selector.granularity"));
  c.keep_snapshots = run.dumps("states");
  return c;
}

Experiment parse_experiment(const std::string& ini_text, const std::vector<std::string>& overrides,
                            const std::string& source) {
  po::options_description desc;
  for (const auto& [key, spec] : config_keys()) {
    desc.add_options()(key.c_str(), po::value<std::string>());
    desc.add_options()(("sweep." + key).c_str(), po::value<std::string>());
  }
  std::istringstream in(ini_text);
  po::parsed_options parsed(&desc);
  try {
    parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    fail(source, ": ", e.what());
  }
  Experiment exp;
  exp.source = source;
  std::set<std::string> seen;
  std::map<std::string, std::vector<std::string>> sweep;
  for (const po::option& opt : parsed.options) {
    const std::string& key = opt.string_key;
    require(seen.insert(key).second, source, ": key '", key, "' is given twice");
    const std::string v = opt.value.empty() ? "" : opt.value.front();
    if (key.compare(0, 8, "variant.") == 0) {
      // variant[.AXIS].NAME.section.key: config keys have exactly one dot.
      std::vector<std::string> parts;
      std::stringstream path(key.substr(8));
      for (std::string part; std::getline(path, part, '.');) parts.push_back(part);
      require((parts.size() == 3 || parts.size() == 4) &&
                  std::none_of(parts.begin(), parts.end(), [](const std::string& x) { return x.empty(); }),
              source, ": '", key,
              "' is not a section.key setting in a [variant.NAME] or [variant.AXIS.NAME] section");
      const std::string axis = parts.size() == 4 ? parts[0] : "", name = parts[parts.size() - 3];
      const std::string setting = parts[parts.size() - 2] + "." + parts.back();
      check_known_key(
          setting, concat(" in [", key.substr(0, key.size() - setting.size() - 1), "] of ", source).c_str());
      auto a = std::find_if(exp.variant_axes.begin(), exp.variant_axes.end(),
                            [&](const Experiment::VariantAxis& x) { return x.name == axis; });
      if (a == exp.variant_axes.end()) a = exp.variant_axes.insert(exp.variant_axes.end(), {axis, {}});
      auto it = std::find_if(a->variants.begin(), a->variants.end(),
                             [&](const auto& variant) { return variant.first == name; });
      if (it == a->variants.end()) it = a->variants.insert(a->variants.end(), {name, {}});
      it->second[setting] = v;
    } else if (key.compare(0, 6, "sweep.") == 0) {
      check_known_key(key.substr(6), concat(" in [sweep] of ", source).c_str());
      sweep[key.substr(6)] = split_list(v);
      require(!sweep[key.substr(6)].empty(), source, ": [sweep] ", key.substr(6), " lists no values");
    } else {
      check_known_key(key, concat(" in ", source).c_str());
      exp.base[key] = v;
    }
  }
  for (const std::string& assignment : overrides) {
    set_override(exp.base, sweep, assignment);
    // The command line wins over the file, sweep lists and variants included.
    const std::string key = trim(assignment.substr(0, assignment.find('=')));
    for (auto& axis : exp.variant_axes)
      for (auto& variant : axis.variants) variant.second.erase(key);
  }
  std::map<std::string, std::string> axis_of_key;
  for (const auto& axis : exp.variant_axes)
    for (const auto& variant : axis.variants)
      for (const auto& setting : variant.second) {
        require(!sweep.count(setting.first), source, ": ", setting.first, " is set by [variant.",
                axis.name.empty() ? "" : axis.name + ".", variant.first,
                "] and swept in [sweep]; give it in one place");
        const auto [it, fresh] = axis_of_key.emplace(setting.first, axis.name);
        require(fresh || it->second == axis.name, source, ": ", setting.first,
                " is set by the variant axes '", it->second, "' and '", axis.name, "'; give it in one axis");
      }
  // Workload keys vary slowest, so consecutive runs share a workload (generated and solved exactly once).
  for (const auto& entry : sweep)
    if (entry.first.compare(0, 9, "workload.") == 0) exp.sweep.push_back(entry);
  for (const auto& entry : sweep)
    if (entry.first.compare(0, 9, "workload.") != 0) exp.sweep.push_back(entry);
  return exp;
}

Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides) {
  // A directory opens as an empty stream on Linux, which would run the built-in defaults.
  std::error_code ignored;
  require(!std::filesystem::is_directory(path, ignored), "cannot read config file '", path,
          "': it is a directory, not an INI file");
  std::ifstream file(path);
  require(bool(file), "cannot read config file '", path, "'");
  std::stringstream text;
  text << file.rdbuf();
  return parse_experiment(text.str(), overrides, path);
}

std::vector<RunSpec> Experiment::expand() const {
  // (variants, settings) per point; the variant axes vary slowest.
  using Variants = std::vector<std::pair<std::string, std::string>>;
  std::vector<std::pair<Variants, Settings>> points = {{{}, base}};
  for (const VariantAxis& axis : variant_axes) {
    std::vector<std::pair<Variants, Settings>> next;
    for (const auto& p : points)
      for (const auto& [name, settings] : axis.variants) {
        auto q = p;
        q.first.push_back({axis.name, name});
        for (const auto& [key, v] : settings) q.second[key] = v;
        next.push_back(q);
      }
    points = std::move(next);
  }
  for (const auto& [key, values] : sweep) {
    std::vector<std::pair<Variants, Settings>> next;
    for (const auto& p : points)
      for (const std::string& v : values) {
        auto q = p;
        q.second[key] = v;
        next.push_back(q);
      }
    points = std::move(next);
  }
  std::vector<RunSpec> runs;
  std::set<std::string> ids;
  auto add = [&](const Settings& point, const Variants& variants) {
    RunSpec run = resolve_run(point);
    run.variants = variants;
    if (ids.insert(run.id).second) runs.push_back(std::move(run));
  };
  for (const auto& [variants, point] : points) {
    auto kind = point.find("workload.kind");
    auto id = point.find("workload.id");
    if (kind != point.end() && kind->second == "file" && (id == point.end() || id->second.empty())) {
      auto path = point.find("workload.path");
      require(path != point.end() && !path->second.empty(),
              "workload.path must name an HDF5 file when workload.kind = file");
      for (const std::string& wid : list_workloads(path->second)) {  // every workload in the file
        Settings q = point;
        q["workload.id"] = wid;
        add(q, variants);
      }
    } else {
      add(point, variants);
    }
  }
  return runs;
}

std::pair<int64_t, int64_t> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  require(slash != std::string::npos, "--shard expects i/n (for example 0/4), got '", text, "'");
  const int64_t i = parse_int("--shard index", text.substr(0, slash));
  const int64_t n = parse_int("--shard count", text.substr(slash + 1));
  require(n >= 1 && i >= 0 && i < n, "--shard ", text, ": need 0 <= i < n");
  return {i, n};
}

}  // namespace sgdn
