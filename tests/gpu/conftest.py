"""Every GPU test module needs the library, and on CUDA a device with a usable CUDA backend."""
import pytest
import torch

import abi
from harness import ON_CUDA


@pytest.fixture(scope="module", autouse=True)
def library():
    if ON_CUDA and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if ON_CUDA and not abi.lib.cuda_available():
        pytest.skip("libflashattn has no usable CUDA backend")
    return abi.lib


@pytest.fixture
def overrides():
    """abi.set_overrides for one test (the planner's forced choices, on top of the process's
    FLASHATTN_OVERRIDES), put back afterwards."""
    yield abi.set_overrides
    abi.set_overrides("")
