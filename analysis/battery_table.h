// The needle battery's table for `sgdn analyze`: needle accuracy per construction (a workload variant) for
// each configuration, the worst construction, and the largest gap to dense on the same shape.
#pragma once
#include <iosfwd>
#include <vector>

#include "analysis/tables.h"

namespace sgdn {

// One table per shape; none unless the needle runs span at least two constructions. A construction is the
// run's [variant.NAME] when it has one, else the workload keys (other than the shape and the seed) that
// differ between the runs. Runs of one configuration, shape and construction (several seeds) are averaged.
std::vector<Table> battery_tables(const std::vector<RunRecord>& runs);

}  // namespace sgdn
