// Errors raised for bad input or configuration. Every message names what is wrong and, where a set of
// values is allowed, lists it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace sgdn {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(concat(parts...));
}

template <class... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace sgdn
