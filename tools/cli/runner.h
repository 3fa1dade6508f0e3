// The runner: put a workload on a device, call the library warmup + iters times per pass, time each
// timed call, and bring the outputs back to the host for the checker.
#pragma once

#include "device.h"
#include "progress.h"
#include "workload.h"

#include <string>
#include <vector>

namespace flashattn::cli {

struct Timing {
    std::vector<double> ms; // one entry per timed iteration
    bool ran() const { return !ms.empty(); }
    double median_ms() const;
    double min_ms() const;
};

struct RunConfig {
    int warmup = 1, iters = 5;
    bool backward = false;
    bool deterministic = false;
};

struct RunResult {
    Timing forward, backward;
    // --deterministic: whether one more backward reproduced dq, dk and dv bit for bit.
    bool reproducibility_checked = false;
    bool reproducible = false;
};

// Fills `outputs` with the last iteration's results. A failing library call throws flashattn::Error
// carrying fa_status and fa_last_error().
RunResult run_attention(const Workload& work, Outputs& outputs, Device& device, const RunConfig& config,
                        Progress& progress, const std::string& label);

} // namespace flashattn::cli
