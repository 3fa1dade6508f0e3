"""flashattn: FlashAttention-2 for PyTorch tensors on the CPU and on CUDA GPUs.

A drop-in for the flash_attn 2.x functions (`import flashattn as flash_attn`), backed by
libflashattn's C ABI through ctypes. See docs/python.md.
"""

from ._library import FlashAttnArgumentError, FlashAttnError
from ._ops import lib as _lib
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = _lib.version_string().decode()

__all__ = [
    "FlashAttnArgumentError",
    "FlashAttnError",
    "check_device_faults",
    "cuda_available",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "get_num_threads",
    "library_path",
    "set_num_threads",
]


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a usable GPU."""
    return bool(_lib.cuda_available())


def check_device_faults(device=None) -> None:
    """Raise FlashAttnArgumentError (a ValueError and a RuntimeError) if a CUDA kernel of this library
    found an index out of range in an array that lives on the GPU since the last check.

    cu_seqlens_q/k, seqused_k, cache_seqlens, cache_batch_idx, cache_leftpad and block_table entries in
    GPU memory are read by the kernels only (checking them on the host would synchronise every call).
    A kernel clamps each value into its range, so a bad one never touches memory outside the tensors
    or breaks the CUDA context; the sequence it belongs to gets NaN output and lse, and no appended row
    lands where the bad value would put it; the other sequences are unaffected. This waits for the current stream of `device`
    (default: the current device), then reports the first such value (argument, element, value, valid
    range) and clears it. Call it where the program synchronises anyway, e.g. once per decode step when
    the sampled tokens reach the host. CPU tensors are checked at the call instead."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    index = device.index if device.index is not None else torch.cuda.current_device()
    _lib.check(_lib.check_device_faults(index, torch.cuda.current_stream(index).cuda_stream))


def set_num_threads(num_threads: int) -> None:
    """Threads the CPU backend uses (default: FLASHATTN_NUM_THREADS, else all cores); 0 restores the default."""
    _lib.set_num_threads(int(num_threads))


def get_num_threads() -> int:
    return _lib.get_num_threads()


def library_path() -> str:
    """The libflashattn.so this package loaded."""
    return _lib.path
