// sgdn: run | list | analyze (SPEC §11).
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "analysis/tables.h"
#include "core/error.h"
#include "experiments/config.h"
#include "experiments/runner.h"

namespace po = boost::program_options;
using namespace sgdn;

namespace {

const char* kUsage =
    "usage:\n"
    "  sgdn run CONFIG.ini [--set section.key=value ...] [--out FILE.h5] [--backend cpu|cuda] [--shard i/n]\n"
    "                     [--lock-wait SECONDS]\n"
    "  sgdn list CONFIG.ini [--set section.key=value ...]\n"
    "  sgdn analyze FILE.h5 [FILE.h5 ...]\n"
    "  sgdn keys                      every config key with its default\n";

int command_run_or_list(const std::string& command, const std::vector<std::string>& args) {
  po::options_description desc("options");
  std::vector<std::string> sets;
  std::string out, backend, shard = "0/1";
  RunnerOptions options;
  desc.add_options()("set", po::value(&sets)->composing(), "override a config key: section.key=value")(
      "out", po::value(&out),
      "experiment file (default: the config's name with .h5, in the current directory)")(
      "backend", po::value(&backend), "cpu | cuda (same as --set run.backend=...)")(
      "shard", po::value(&shard), "run every n-th run starting at i: i/n")(
      "lock-wait", po::value(&options.lock_wait_seconds),
      "seconds to wait for FILE.h5.lock while another process merges into FILE.h5")(
      "config", po::value<std::string>(), "");
  po::positional_options_description pos;
  pos.add("config", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
  po::notify(vm);
  require(vm.count("config"), "sgdn ", command, ": no config file given\n", kUsage);
  const std::string config = vm["config"].as<std::string>();
  if (!backend.empty()) sets.push_back("run.backend=" + backend);
  const Experiment exp = load_experiment(config, sets);
  if (command == "list") {
    const std::vector<RunSpec> runs = exp.expand();
    const std::vector<std::string> labels = distinct_labels(runs);
    for (size_t i = 0; i < runs.size(); ++i)
      std::cout << runs[i].id << "  " << runs[i].workload_id << "  " << labels[i] << "\n";
    std::cout << runs.size() << " runs\n";
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

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::cout << kUsage;
      return argc < 2 ? 2 : 0;
    }
    const std::string command = argv[1];
    const std::vector<std::string> args(argv + 2, argv + argc);
    if (command == "run" || command == "list") return command_run_or_list(command, args);
    if (command == "analyze") {
      require(!args.empty(), "sgdn analyze: no file given\n", kUsage);
      std::vector<RunRecord> runs;
      for (const std::string& path : args) {
        std::vector<RunRecord> more = read_runs(path);
        runs.insert(runs.end(), more.begin(), more.end());
      }
      print_analysis(std::cout, runs, std::cerr);
      return 0;
    }
    if (command == "keys") {
      for (const auto& [key, spec] : config_keys()) {
        std::cout << key << " = " << spec.default_value << "    # " << spec.help;
        if (!spec.allowed.empty()) std::cout << " (" << join(spec.allowed, " | ") << ")";
        std::cout << "\n";
      }
      return 0;
    }
    fail("unknown command '", command, "'\n", kUsage);
  } catch (const Error& e) {
    std::cerr << "sgdn: error: " << e.what() << "\n";
    return 1;
  } catch (const po::error& e) {
    std::cerr << "sgdn: error: " << e.what() << "\n" << kUsage;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "sgdn: error: " << e.what() << "\n";
    return 1;
  }
}
