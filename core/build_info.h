// The build this program comes from, recorded with every run so that a file says which build made which
// run, and so that a rebuilt program does not take another build's runs for its own.
#pragma once
#include <string>

namespace sgdn {

struct BuildInfo {
  std::string version;   // the project version (CMake's PROJECT_VERSION)
  std::string revision;  // `git describe --always --dirty` at build time; "unknown" outside git
  bool dirty = false;    // the tree had uncommitted changes
  // What identifies the code: the revision, and for a dirty tree a hash of its changes as well.
  std::string source_id;
  std::string compiler;  // e.g. "gcc 12.2.0"
};

const BuildInfo& this_build();

}  // namespace sgdn
