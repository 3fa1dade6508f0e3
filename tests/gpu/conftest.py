"""Every GPU test module needs the library, and on CUDA a device with a usable CUDA backend."""
import pytest
import torch

import fa_ctypes as fa
from harness import ON_CUDA


@pytest.fixture(scope="module", autouse=True)
def library():
    if ON_CUDA and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    lib = fa.lib()
    if ON_CUDA and not lib.fa_cuda_available():
        pytest.skip("libflashattn has no usable CUDA backend")
    return lib
