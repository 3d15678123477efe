// A fresh directory per test case, removed afterwards.
#pragma once
#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace sgdn::test {

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::random_device entropy;
    path = std::filesystem::temp_directory_path() /
           ("sgdn_test_" + std::to_string(entropy()) + std::to_string(entropy()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  // Every entry of the directory, to check that nothing (such as a temporary file) was left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace sgdn::test
