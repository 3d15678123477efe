// Experiment configuration (SPEC §11): INI files read with Boost.Program_options, `--set` overrides,
// `[sweep]` lists expanded to their cartesian product, and each run resolved to the keys that define it.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/engine.h"
#include "core/params.h"

namespace sgdn {

// "section.key" -> value, as text.
using Settings = std::map<std::string, std::string>;

struct KeySpec {
  std::string default_value;
  std::string help;
  std::vector<std::string> allowed;  // for keys that take one of a few words; empty otherwise
};

// Every key a config may hold, by "section.key": the fixed keys of SPEC §11, the generator keys of the
// workloads and the parameters of every registered strategy.
const std::map<std::string, KeySpec>& config_keys();
std::vector<std::string> keys_of_section(const std::string& section);

// One run: the settings that define it (only the keys its workload kind and strategies use) and its ids.
struct RunSpec {
  Settings resolved;
  std::string id;           // "r" + hash of `resolved`: stable, so a rerun finds finished runs
  std::string workload_id;  // "w" + hash of the workload keys
  // The variant of each variant axis it came from (axis "" for [variant.NAME]); names, not part of the id.
  std::vector<std::pair<std::string, std::string>> variants;
  std::string get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  Params section(const std::string& name) const;  // the keys of one section, without the prefix
  std::string label() const;                      // short human description for progress and tables
  // Whether the run writes `item` ("inputs", "outputs", "states"): its dump.<item> key, unless dump.level =
  // analysis, which keeps only what `sgdn analyze` and analysis/plot.py read (events and metrics).
  bool dumps(const std::string& item) const;
};

struct Experiment {
  std::string source;  // the config path
  Settings base;       // file + overrides, defaults not yet applied
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;  // key -> values, in key order
  // Named bundles of settings: sweep axes whose values set several keys at once. [variant.NAME] sections
  // form the axis "" (e.g. the constructions of a needle battery), [variant.AXIS.NAME] sections the axis
  // AXIS (e.g. shapes whose K and V go together). Axes and their variants keep the file's order; they vary
  // slower than [sweep]. A key belongs to one axis or to [sweep]; the command line wins over both.
  struct VariantAxis {
    std::string name;
    std::vector<std::pair<std::string, Settings>> variants;
  };
  std::vector<VariantAxis> variant_axes;
  // Every run of the sweep, resolved and validated (strategies created once to check their parameters),
  // without duplicates (two sweep points can resolve to the same run).
  std::vector<RunSpec> expand() const;
};

// Reads a config file and applies `overrides` ("section.key=value"). Unknown sections and keys, malformed
// lines and unknown values are sgdn::Error naming the key and what is allowed.
Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides);
// The same from INI text (tests).
Experiment parse_experiment(const std::string& ini_text, const std::vector<std::string>& overrides,
                            const std::string& source = "<string>");

// A label per run that tells it from the others: label(), followed where runs share it by the keys in
// which they differ ("run.chunk=32"). For `sgdn list` and the progress lines.
std::vector<std::string> distinct_labels(const std::vector<RunSpec>& runs);

// Resolves one point of the sweep: defaults filled in, keys unused by its workload kind and strategies
// dropped, values validated. Throws sgdn::Error naming the key.
RunSpec resolve_run(const Settings& settings);

// The strategies of a run, created from its resolved settings.
struct RunStrategies {
  std::unique_ptr<Solver> solver;
  std::unique_ptr<Score> score;
  std::unique_ptr<Selector> selector;
  EngineConfig engine_config(const RunSpec& run) const;
};
RunStrategies make_run_strategies(const RunSpec& run);

// "--shard i/n" -> (i, n), 0 <= i < n.
std::pair<int64_t, int64_t> parse_shard(const std::string& text);

// 64-bit FNV-1a of the text, as 12 hex digits.
std::string short_hash(const std::string& text);

}  // namespace sgdn
