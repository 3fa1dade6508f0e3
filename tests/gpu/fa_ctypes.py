"""Minimal ctypes binding of libflashattn's C ABI for the GPU tests and the benchmark.

Tensors are torch tensors in the library's (batch, seqlen, heads, head_dim) layout (varlen:
(total, heads, head_dim)); their data pointers and element strides go into fa_fwd_params as is,
so any strided view with a contiguous last dimension is passed without copies.

The library is found through $FLASHATTN_LIB, else build-gpu/src/libflashattn.so.
"""
import ctypes
import os
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]

FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32 = 0, 1, 2
FA_BACKEND_AUTO, FA_BACKEND_CPU, FA_BACKEND_CUDA = 0, 1, 2
STATUS = {0: "FA_OK", 1: "FA_ERROR_INVALID_ARGUMENT", 2: "FA_ERROR_UNSUPPORTED",
          3: "FA_ERROR_BACKEND_UNAVAILABLE", 4: "FA_ERROR_DEVICE", 5: "FA_ERROR_OUT_OF_MEMORY",
          6: "FA_ERROR_INTERNAL"}
DTYPES = {torch.float16: FA_FLOAT16, torch.bfloat16: FA_BFLOAT16, torch.float32: FA_FLOAT32}


class FaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("batch_stride", ctypes.c_int64),
                ("row_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64)]


class FaFwdParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int32), ("seqlen_q", ctypes.c_int32), ("seqlen_k", ctypes.c_int32),
        ("num_heads", ctypes.c_int32), ("num_heads_k", ctypes.c_int32), ("head_dim", ctypes.c_int32),
        ("q", FaTensor), ("k", FaTensor), ("v", FaTensor), ("out", FaTensor),
        ("softmax_lse", ctypes.c_void_p),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("total_q", ctypes.c_int64), ("total_k", ctypes.c_int64),
        ("seqused_k", ctypes.c_void_p),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32), ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", ctypes.c_void_p), ("alibi_batch_stride", ctypes.c_int64),
        ("dropout_p", ctypes.c_float), ("rng_seed", ctypes.c_uint64), ("rng_offset", ctypes.c_uint64),
        ("attn_probs", ctypes.c_void_p),
        ("num_splits", ctypes.c_int32),
        ("backend", ctypes.c_int),
        ("stream", ctypes.c_void_p),
    ]


class FaBwdParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("fwd", FaFwdParams), ("dout", FaTensor),
                ("dq", FaTensor), ("dk", FaTensor), ("dv", FaTensor), ("deterministic", ctypes.c_int32),
                ("workspace", ctypes.c_void_p), ("workspace_size", ctypes.c_size_t)]


class FlashAttnError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"{STATUS.get(status, status)}: {message}")
        self.status = STATUS.get(status, str(status))
        self.message = message


def load_library(path=None):
    path = path or os.environ.get("FLASHATTN_LIB") or REPO / "build-gpu" / "src" / "libflashattn.so"
    lib = ctypes.CDLL(str(path))
    lib.fa_fwd_params_init.argtypes = [ctypes.POINTER(FaFwdParams)]
    lib.fa_bwd_params_init.argtypes = [ctypes.POINTER(FaBwdParams)]
    for name in ("fa_forward", "fa_varlen_forward"):
        getattr(lib, name).argtypes = [ctypes.POINTER(FaFwdParams)]
        getattr(lib, name).restype = ctypes.c_int
    for name in ("fa_backward", "fa_varlen_backward"):
        getattr(lib, name).argtypes = [ctypes.POINTER(FaBwdParams)]
        getattr(lib, name).restype = ctypes.c_int
    lib.fa_last_error.restype = ctypes.c_char_p
    lib.fa_cuda_available.restype = ctypes.c_int
    lib.fa_version_string.restype = ctypes.c_char_p
    return lib


_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = load_library()
    return _lib


def fa_tensor(t, varlen=False):
    """(batch, seqlen, heads, d) or varlen (total, heads, d) torch tensor -> FaTensor."""
    if t is None:
        return FaTensor(None, 0, 0, 0)
    assert t.stride(-1) == 1, "head_dim must be contiguous"
    if varlen:
        return FaTensor(t.data_ptr(), 0, t.stride(0), t.stride(1))
    return FaTensor(t.data_ptr(), t.stride(0), t.stride(1), t.stride(2))


def _ptr(t):
    return None if t is None else t.data_ptr()


def make_fwd_params(q, k, v, out, *, lse=None, softmax_scale=0.0, causal=False, window=(-1, -1),
                    softcap=0.0, alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, attn_probs=None,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                    seqused_k=None, backend=FA_BACKEND_AUTO, stream=None):
    p = FaFwdParams()
    lib().fa_fwd_params_init(ctypes.byref(p))
    varlen = cu_seqlens_q is not None
    p.dtype = DTYPES[q.dtype]
    if varlen:
        p.batch = cu_seqlens_q.numel() - 1
        p.seqlen_q, p.seqlen_k = max_seqlen_q, max_seqlen_k
        p.num_heads, p.head_dim = q.shape[1], q.shape[2]
        p.num_heads_k = k.shape[1]
        p.total_q, p.total_k = q.shape[0], k.shape[0]
        p.cu_seqlens_q, p.cu_seqlens_k = _ptr(cu_seqlens_q), _ptr(cu_seqlens_k)
    else:
        p.batch, p.seqlen_q, p.num_heads, p.head_dim = q.shape
        p.seqlen_k, p.num_heads_k = k.shape[1], k.shape[2]
    p.q, p.k, p.v, p.out = (fa_tensor(t, varlen) for t in (q, k, v, out))
    p.softmax_lse = _ptr(lse)
    p.seqused_k = _ptr(seqused_k)
    p.softmax_scale = softmax_scale
    p.causal = int(causal)
    p.window_left, p.window_right = window
    p.softcap = softcap
    if alibi_slopes is not None:
        p.alibi_slopes = alibi_slopes.data_ptr()
        p.alibi_batch_stride = alibi_slopes.stride(0) if alibi_slopes.dim() == 2 else 0
    p.dropout_p = dropout_p
    p.rng_seed, p.rng_offset = seed, offset
    p.attn_probs = _ptr(attn_probs)
    p.backend = backend
    p.stream = stream
    return p


def call_forward(params, varlen=False):
    fn = lib().fa_varlen_forward if varlen else lib().fa_forward
    status = fn(ctypes.byref(params))
    if status != 0:
        raise FlashAttnError(status, lib().fa_last_error().decode())


def forward(q, k, v, *, out=None, return_lse=True, return_probs=False, **kw):
    """Run the forward; returns (out, lse, attn_probs). Outputs are pre-poisoned with NaN."""
    varlen = kw.get("cu_seqlens_q") is not None
    if out is None:
        out = torch.full_like(q, float("nan"))
    lse = None
    if return_lse:
        if varlen:
            lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device=q.device, dtype=torch.float32)
        else:
            lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=q.device,
                             dtype=torch.float32)
    probs = None
    if return_probs:
        probs = torch.full((q.shape[0], q.shape[2], q.shape[1], k.shape[1]), float("nan"), device=q.device,
                           dtype=torch.float32)
    params = make_fwd_params(q, k, v, out, lse=lse, attn_probs=probs, **kw)
    call_forward(params, varlen)
    return out, lse, probs


def backward_status(q, k, v, out, lse, dout):
    """Calls fa_backward; returns (status name, message)."""
    b = FaBwdParams()
    lib().fa_bwd_params_init(ctypes.byref(b))
    b.fwd = make_fwd_params(q, k, v, out, lse=lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    b.dout, b.dq, b.dk, b.dv = fa_tensor(dout), fa_tensor(dq), fa_tensor(dk), fa_tensor(dv)
    status = lib().fa_backward(ctypes.byref(b))
    return STATUS.get(status, str(status)), lib().fa_last_error().decode()
