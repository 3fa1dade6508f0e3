// Running a planned forward (host/backend.cu): the plain forward and, after its appends, the
// KV-cache call (host/kvcache.cu) share it.
#pragma once

#include "host/device_scope.h"
#include "host/planner.h"

#include "core/problem.h"

namespace flashattn::cuda {

// Runs `problem` on `device` as `plan` says, its scratch from `workspace` (carved by plan.workspace).
void run_forward(const Problem& problem, const ForwardPlan& plan, const Workspace& workspace, int device);

} // namespace flashattn::cuda
