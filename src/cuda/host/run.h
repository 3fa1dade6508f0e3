// Running a planned forward (host/backend.cu): the plain forward and, after its appends, the
// KV-cache call (host/kvcache.cu) share it.
#pragma once

#include "host/device_scope.h"
#include "host/planner.h"

#include "core/problem.h"

namespace flashattn::cuda {

// Refuses (FA_ERROR_UNSUPPORTED) what the problem asks for and the CUDA kernels do not compute yet:
// a value head dim unlike the query's, learnable sinks. Every entry point calls it before planning,
// so such a call fails with a message rather than computing something else.
void require_kernels_support(const Problem& problem);

// Runs `problem` on `device` as `plan` says, its scratch from `workspace` (carved by plan.workspace).
void run_forward(const Problem& problem, const ForwardPlan& plan, const Workspace& workspace, int device);

} // namespace flashattn::cuda
