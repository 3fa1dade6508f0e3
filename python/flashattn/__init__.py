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


def set_num_threads(num_threads: int) -> None:
    """Threads the CPU backend uses (default: FLASHATTN_NUM_THREADS, else all cores); 0 restores the default."""
    _lib.set_num_threads(int(num_threads))


def get_num_threads() -> int:
    return _lib.get_num_threads()


def library_path() -> str:
    """The libflashattn.so this package loaded."""
    return _lib.path
