// The reporter of a single run: a human-readable report, or one JSON line (--json).
#pragma once

#include "checker.h"
#include "flops.h"
#include "options.h"
#include "runner.h"
#include "workload.h"

#include <optional>
#include <ostream>
#include <string>

namespace flashattn::cli {

struct RunReport {
    const Options& options;
    const Workload& work;
    std::string device;
    float scale;                     // the softmax scale actually used
    FlopCount flops;
    RunResult run;
    std::optional<CheckResult> check; // absent when skipped or the reference failed
    std::string check_note;           // why there is no check result
    bool check_required;              // --check given: a missing check is a failure
};

// Every reason to exit with 1: a tolerance exceeded, a non-reproducible deterministic backward, or a
// check that was asked for and could not run.
bool run_failed(const RunReport& report);

void print_report(std::ostream& out, const RunReport& report);
std::string json_line(const RunReport& report);

// "bf16 b=2 sq=512 sk=512 h=8/8 d=64 causal ..." for headers and labels.
std::string describe_problem(const ProblemSpec& spec);
// Only the options beyond the shape: " window=128,0 softcap=30 alibi dropout=0.1" (or "").
std::string describe_variants(const ProblemSpec& spec);

} // namespace flashattn::cli
