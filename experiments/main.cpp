// sgdn: run | list | analyze | keys (SPEC §11).
//
// Exit status: 0 success; 1 an error while working (a bad config value, a file that cannot be read or
// written); 2 a usage error (an unknown command or option, a missing argument), with the usage on stderr.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "analysis/tables.h"
#include "core/build_info.h"
#include "core/error.h"
#include "experiments/config.h"
#include "experiments/runner.h"

namespace po = boost::program_options;
using namespace sgdn;

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

const char* kUsage =
    "usage:\n"
    "  sgdn run CONFIG.ini [--set section.key=value ...] [--out FILE.h5] [--backend cpu|cuda] [--shard i/n]\n"
    "                      [--lock-wait SECONDS] [--reuse-runs]\n"
    "  sgdn list CONFIG.ini [--set section.key=value ...] [--out FILE.h5]\n"
    "  sgdn analyze FILE.h5 [FILE.h5 ...] [--format table|csv|json]\n"
    "  sgdn keys                      every config key with its default\n"
    "  sgdn --version | --help        sgdn COMMAND --help: that command's options\n"
    "exit status: 0 success, 1 error, 2 usage error\n";

// A command line that does not say what to do: the usage goes with the message, the exit status is 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

std::string version_text() {
  const BuildInfo& build = this_build();
  return "sgdn " + build.version + " (revision " + build.revision + ", " + build.compiler + ")";
}

int command_run_or_list(const std::string& command, const std::vector<std::string>& args) {
  const bool run = command == "run";
  po::options_description desc("sgdn " + command + " options");
  std::vector<std::string> sets;
  std::string out, backend, shard = "0/1";
  RunnerOptions options;
  desc.add_options()("set", po::value(&sets)->composing(),
                     "override a config key: section.key=value, or a sweep: sweep.section.key=a,b")(
      "backend", po::value(&backend), "cpu | cuda (same as --set run.backend=...)")(
      "out", po::value(&out),
      run ? "experiment file (default: the config's name with .h5, in the current directory)"
          : "experiment file: show which runs it holds already")("help,h", "this help");
  if (run)
    desc.add_options()("shard", po::value(&shard), "run every n-th run starting at i: i/n")(
        "lock-wait", po::value(&options.lock_wait_seconds),
        "seconds to wait for FILE.h5.lock while another process merges into FILE.h5 (default 1800)")(
        "reuse-runs", po::bool_switch(&options.reuse_runs),
        "count runs that another build of sgdn made as done (by default they run again)");
  po::options_description hidden;
  hidden.add_options()("config", po::value<std::string>(), "");
  po::options_description all;
  all.add(desc).add(hidden);
  if (wants_help(args)) {
    std::cout << "usage: sgdn " << command << " CONFIG.ini [options]\n\n" << desc;
    return 0;
  }
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(concat("sgdn ", command, ": ", e.what()));
  }
  if (!vm.count("config")) throw UsageError(concat("sgdn ", command, ": no config file given"));
  const std::string config = vm["config"].as<std::string>();
  if (!backend.empty()) sets.push_back("run.backend=" + backend);
  const Experiment exp = load_experiment(config, sets);
  if (!run) {
    const std::vector<RunSpec> runs = exp.expand();
    const std::vector<std::string> labels = distinct_labels(runs);
    std::vector<RunState> states;
    if (!out.empty()) states = run_states(runs, out);
    int64_t done = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      std::cout << runs[i].id << "  " << runs[i].workload_id << "  ";
      if (!states.empty()) {
        const RunState s = states[i];
        done += s == RunState::done;
        std::cout << (s == RunState::done     ? "done         "
                      : s == RunState::to_run ? "to run       "
                                              : "other build  ");
      }
      std::cout << labels[i] << "\n";
    }
    std::cout << runs.size() << " runs";
    if (!states.empty()) std::cout << ", " << done << " done in " << out;
    std::cout << "\n";
    return 0;
  }
  require(options.lock_wait_seconds >= 0, "--lock-wait ", options.lock_wait_seconds, ": must be >= 0");
  std::tie(options.shard_index, options.shard_count) = parse_shard(shard);
  // Without --out each shard gets a file of its own, so shards never share one.
  const std::string stem = std::filesystem::path(config).stem().string();
  options.out = !out.empty()               ? out
                : options.shard_count == 1 ? stem + ".h5"
                                           : stem + ".shard-" + std::to_string(options.shard_index) + "-of-" +
                                                 std::to_string(options.shard_count) + ".h5";
  const RunnerSummary summary = run_experiment(exp, options, std::cerr);
  if (summary.runs == 0) {
    std::cerr << "sgdn run: nothing written\n";  // a shard past the number of runs, or no workloads
    return 0;
  }
  std::cerr << "sgdn run: " << summary.ran << " runs done now, " << summary.already_done
            << " found done; wrote " << options.out << "\n";
  print_analysis(std::cout, read_runs(options.out), std::cerr);
  return 0;
}

int command_analyze(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << "usage: sgdn analyze FILE.h5 [FILE.h5 ...] [--format table|csv|json]\n\n"
                 "The tables of the runs in the files (a run met in several files counts once), as\n"
                 "markdown tables (the default), csv or json.\n";
    return 0;
  }
  TableFormat format = TableFormat::table;
  std::vector<std::string> paths;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string value;
    if (a == "--format") {
      if (i + 1 == args.size()) throw UsageError("sgdn analyze: --format needs a value (table, csv, json)");
      value = args[++i];
    } else if (a.compare(0, 9, "--format=") == 0) {
      value = a.substr(9);
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError("sgdn analyze: unknown option '" + a + "'");
    } else {
      paths.push_back(a);
      continue;
    }
    try {
      format = parse_table_format(value);
    } catch (const Error& error) {
      throw UsageError(std::string("sgdn analyze: ") + error.what());
    }
  }
  if (paths.empty()) throw UsageError("sgdn analyze: no file given");
  std::vector<RunRecord> runs;
  for (const std::string& path : paths) {
    std::vector<RunRecord> more = read_runs(path);
    runs.insert(runs.end(), more.begin(), more.end());
  }
  print_analysis(std::cout, runs, std::cerr, format);
  return 0;
}

int command_keys(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout
        << "usage: sgdn keys\n\nEvery config key with its default, its meaning and its allowed values.\n";
    return 0;
  }
  if (!args.empty()) throw UsageError("sgdn keys: takes no arguments");
  for (const auto& [key, spec] : config_keys()) {
    std::cout << key << " = " << spec.default_value << "    # " << spec.help;
    if (!spec.allowed.empty()) std::cout << " (" << join(spec.allowed, " | ") << ")";
    std::cout << "\n";
  }
  return 0;
}

int dispatch(int argc, char** argv) {
  if (argc < 2) throw UsageError("sgdn: no command given");
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "--version") {
    std::cout << version_text() << "\n";
    return 0;
  }
  if (command == "run" || command == "list") return command_run_or_list(command, args);
  if (command == "analyze") return command_analyze(args);
  if (command == "keys") return command_keys(args);
  throw UsageError("sgdn: unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n" << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "sgdn: error: " << e.what() << "\n";
    return kExitError;
  }
}
