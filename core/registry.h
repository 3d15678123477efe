// Strategies created by name (the tiny-cuda-nn pattern): each family (solver, score, selector) has one
// registry; registering a name twice is an error, and an unknown name is an error that lists the known ones.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/params.h"

namespace sgdn {

template <class Base>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Base>(const Params&)>;
  struct Entry {
    std::string name;
    std::string help;
    std::vector<ParamSpec> params;  // the keys this strategy reads from its section
    Factory make;
  };

  explicit Registry(std::string family) : family_(std::move(family)) {}

  void add(Entry entry) {
    require(!entry.name.empty(), family_, " registry: a strategy needs a name");
    require(entries_.count(entry.name) == 0, family_, " '", entry.name, "' is registered twice");
    entries_.emplace(entry.name, std::move(entry));
  }

  bool contains(const std::string& name) const { return entries_.count(name) != 0; }

  const Entry& entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) fail("unknown ", family_, " '", name, "'; known: ", join(names(), ", "));
    return it->second;
  }

  std::unique_ptr<Base> create(const std::string& name, const Params& params) const {
    return entry(name).make(params);
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, unused] : entries_) out.push_back(name);
    return out;
  }

  const std::string& family() const { return family_; }

 private:
  std::string family_;
  std::map<std::string, Entry> entries_;
};

}  // namespace sgdn
