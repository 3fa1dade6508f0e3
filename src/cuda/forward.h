// The CUDA forward with its scratch memory from a Workspace (backend.cu): fa_forward allocates it
// per call; fa_kvcache_forward (kvcache.cu) passes the caller's workspace, if any.
#pragma once

#include "device_scope.h"

#include "core/problem.h"

#include <cstddef>

namespace flashattn::cuda {

// The workspace bytes forward(problem, workspace) takes on `device` (0 when it stages nothing and
// does not split the keys).
size_t forward_workspace_size(const Problem& problem, int device);

void forward(const Problem& problem, Workspace& workspace);

} // namespace flashattn::cuda
