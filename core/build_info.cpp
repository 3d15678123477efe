#include "core/build_info.h"

#include "sgdn_build_revision.h"

#ifndef SGDN_VERSION
#define SGDN_VERSION "unknown"
#endif

namespace sgdn {

const BuildInfo& this_build() {
  static const BuildInfo info = [] {
    BuildInfo b;
    b.version = SGDN_VERSION;
    b.revision = SGDN_BUILD_REVISION;
    const std::string suffix = "-dirty";
    b.dirty = b.revision.size() > suffix.size() &&
              b.revision.compare(b.revision.size() - suffix.size(), suffix.size(), suffix) == 0;
    b.source_id = SGDN_BUILD_SOURCE;
#if defined(__clang__)
    b.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
    b.compiler = "gcc " __VERSION__;
#else
    b.compiler = "unknown";
#endif
    return b;
  }();
  return info;
}

}  // namespace sgdn
