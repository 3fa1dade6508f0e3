// `flashattn-cli bench`: every combination of head dim x seqlen x causal, forward and backward,
// printed as a table while it runs and written to PREFIX.csv and PREFIX.json.
#pragma once

#include "device.h"
#include "options.h"
#include "progress.h"

namespace flashattn::cli {

// Returns the exit code: 1 if any point failed to run or failed its check.
int run_bench(const Options& options, Device& device, Progress& progress);

} // namespace flashattn::cli
