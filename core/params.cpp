#include "core/params.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace sgdn {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

double parse_double(const std::string& what, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  require(end != begin && *end == '\0' && errno == 0 && std::isfinite(value), what, " = '", text,
          "' is not a finite number");
  return value;
}

int64_t parse_int(const std::string& what, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(begin, &end, 10);
  require(end != begin && *end == '\0' && errno == 0, what, " = '", text, "' is not a whole number");
  return value;
}

bool parse_bool(const std::string& what, const std::string& text) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  fail(what, " = '", text, "' is not a boolean (allowed: true, false, 1, 0, yes, no, on, off)");
}

std::string Params::qualified(const std::string& key) const {
  return section_.empty() ? key : section_ + "." + key;
}

std::string Params::get_string(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

double Params::get_double(const std::string& key, double fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : parse_double(qualified(key), it->second);
}

int64_t Params::get_int(const std::string& key, int64_t fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : parse_int(qualified(key), it->second);
}

bool Params::get_bool(const std::string& key, bool fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : parse_bool(qualified(key), it->second);
}

double Params::get_double_in(const std::string& key, double fallback, double lo, double hi,
                             bool lo_open) const {
  const double value = get_double(key, fallback);
  const bool ok = (lo_open ? value > lo : value >= lo) && value <= hi;
  require(ok, qualified(key), " = ", value, " is outside ", lo_open ? "(" : "[", lo, ", ", hi, "]");
  return value;
}

int64_t Params::get_int_at_least(const std::string& key, int64_t fallback, int64_t lo) const {
  const int64_t value = get_int(key, fallback);
  require(value >= lo, qualified(key), " = ", value, " must be >= ", lo);
  return value;
}

}  // namespace sgdn
