// Named parameters of a strategy, read from one config section, with typed, range-checked getters whose
// errors name the key (`selector.rho = 1.5 is outside (0, 1]`).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sgdn {

// One parameter a strategy declares: its key, default (as text) and a line of help; `boolean` when it is a
// switch (a config stores it as true / false however it was written: 1, yes, on, ...).
struct ParamSpec {
  std::string key;
  std::string default_value;
  std::string help;
  bool boolean = false;
};

class Params {
 public:
  Params() = default;
  Params(std::string section, std::map<std::string, std::string> values)
      : section_(std::move(section)), values_(std::move(values)) {}

  const std::string& section() const { return section_; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  void set(const std::string& key, const std::string& value) { values_[key] = value; }
  const std::map<std::string, std::string>& values() const { return values_; }

  std::string get_string(const std::string& key, const std::string& fallback) const;
  double get_double(const std::string& key, double fallback) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // A number in the interval (lo, hi] or [lo, hi] (lo_open chooses), else an error naming the key.
  double get_double_in(const std::string& key, double fallback, double lo, double hi, bool lo_open) const;
  int64_t get_int_at_least(const std::string& key, int64_t fallback, int64_t lo) const;
  // `section.key` for messages.
  std::string qualified(const std::string& key) const;

 private:
  std::string section_;
  std::map<std::string, std::string> values_;
};

// Parsers shared by Params and the config reader: whole-string numbers and booleans, else sgdn::Error.
double parse_double(const std::string& what, const std::string& text);
int64_t parse_int(const std::string& what, const std::string& text);
bool parse_bool(const std::string& what, const std::string& text);
std::string join(const std::vector<std::string>& items, const std::string& sep);

}  // namespace sgdn
