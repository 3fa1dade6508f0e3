// `flashattn-cli --kvcache`: one decode step on a KV cache (fa_kvcache_forward), contiguous or paged,
// optionally with rotary embedding; timed (with the K/V bytes it reads per second) and checked
// against the fp64 reference: out and lse by the tolerance rule, the caches after appending bit for bit.
#pragma once

#include "device.h"
#include "options.h"
#include "progress.h"

namespace flashattn::cli {

// Returns the exit code (1 when the check fails).
int run_kvcache(const Options& options, Device& device, Progress& progress);

} // namespace flashattn::cli
