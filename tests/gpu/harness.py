"""What the GPU test modules share: where tensors live, the skip markers, input helpers.

FA_TEST_DEVICE=cpu runs the same cases against the CPU backend (checks the test code without a GPU).
"""
import os

import pytest
import torch

DEV = os.environ.get("FA_TEST_DEVICE", "cuda")
ON_CUDA = DEV == "cuda"
cuda_only = pytest.mark.skipif(not ON_CUDA, reason="CUDA-specific behaviour")
heavy = pytest.mark.skipif(not ON_CUDA, reason="too slow for the CPU check mode")


def sync():
    if ON_CUDA:
        torch.cuda.synchronize()


def rand(*shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device=DEV, dtype=torch.float32) * scale).to(dtype)


def kernels_launched(fn):
    """fn() under torch.profiler on CUDA: (its result, the names of the CUDA kernels it launched).
    The set is empty off CUDA or without CUPTI."""
    if not ON_CUDA:
        return fn(), set()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = fn()
        sync()
    return result, {e.name for e in prof.events()}


def cu(lengths):
    """cu_seqlens (int32, on DEV) of a list of sequence lengths."""
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), device=DEV, dtype=torch.int32)
