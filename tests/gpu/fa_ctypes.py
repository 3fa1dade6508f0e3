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
    lib.fa_bwd_workspace_size.argtypes = [ctypes.POINTER(FaBwdParams)]
    lib.fa_bwd_workspace_size.restype = ctypes.c_size_t
    lib.fa_last_error.restype = ctypes.c_char_p
    lib.fa_cuda_available.restype = ctypes.c_int
    lib.fa_version_string.restype = ctypes.c_char_p
    lib.fa_set_overrides.argtypes = [ctypes.c_char_p]
    lib.fa_set_overrides.restype = ctypes.c_int
    return lib


def set_overrides(spec):
    """fa_set_overrides (src/core/overrides.h): force a kernel choice for the process; "" = none."""
    status = lib().fa_set_overrides(spec.encode())
    if status != 0:
        raise FlashAttnError(status, lib().fa_last_error().decode())


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


def make_bwd_params(q, k, v, out, lse, dout, dq, dk, dv, *, deterministic=False, workspace=None, **kw):
    b = FaBwdParams()
    lib().fa_bwd_params_init(ctypes.byref(b))
    varlen = kw.get("cu_seqlens_q") is not None
    b.fwd = make_fwd_params(q, k, v, out, lse=lse, **kw)
    b.dout, b.dq, b.dk, b.dv = (fa_tensor(t, varlen) for t in (dout, dq, dk, dv))
    b.deterministic = int(deterministic)
    if workspace is not None:
        b.workspace, b.workspace_size = workspace.data_ptr(), workspace.numel()
    return b


def backward(q, k, v, out, lse, dout, *, dq=None, dk=None, dv=None, deterministic=False, use_workspace=False, **kw):
    """Run the backward; returns (dq, dk, dv), pre-poisoned with NaN. use_workspace: the caller
    allocates fa_bwd_workspace_size bytes (as a framework would) instead of the library."""
    varlen = kw.get("cu_seqlens_q") is not None
    dq = torch.full_like(q, float("nan")) if dq is None else dq
    dk = torch.full_like(k, float("nan")) if dk is None else dk
    dv = torch.full_like(v, float("nan")) if dv is None else dv
    params = make_bwd_params(q, k, v, out, lse, dout, dq, dk, dv, deterministic=deterministic, **kw)
    workspace = None
    if use_workspace:
        size = lib().fa_bwd_workspace_size(ctypes.byref(params))
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=q.device)
        params.workspace, params.workspace_size = workspace.data_ptr(), size
    fn = lib().fa_varlen_backward if varlen else lib().fa_backward
    status = fn(ctypes.byref(params))
    if status != 0:
        raise FlashAttnError(status, lib().fa_last_error().decode())
    return dq, dk, dv


# ---- Inference (issue 6): paged K/V, fa_kvcache_forward, fa_combine -------------------------------
# fa_fwd_params with the fields appended after 0.1.0 (FaFwdParams above is the 0.1.0 prefix, which the
# library still accepts); initialised through fa_fwd_params_init_sized.

class FaFwdParamsPaged(ctypes.Structure):
    _fields_ = FaFwdParams._fields_ + [
        ("block_table", ctypes.c_void_p), ("block_table_batch_stride", ctypes.c_int64),
        ("max_blocks_per_seq", ctypes.c_int32), ("page_size", ctypes.c_int32), ("num_blocks", ctypes.c_int32),
    ]


class FaKvcacheParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32), ("fwd", FaFwdParamsPaged), ("batch_cache", ctypes.c_int32),
        ("cache_seqlens", ctypes.c_void_p), ("cache_batch_idx", ctypes.c_void_p), ("cache_leftpad", ctypes.c_void_p),
        ("k_new", FaTensor), ("v_new", FaTensor), ("seqlen_new", ctypes.c_int32),
        ("rotary_cos", ctypes.c_void_p), ("rotary_sin", ctypes.c_void_p), ("rotary_dim", ctypes.c_int32),
        ("seqlen_rotary", ctypes.c_int32), ("rotary_interleaved", ctypes.c_int32),
    ]


# Today's layouts (rng_state, then the KV-cache workspace fields): what make_kvcache_params fills
# when a workspace is asked for. Initialised through the _sized functions.
class FaFwdParamsCurrent(ctypes.Structure):
    _fields_ = FaFwdParamsPaged._fields_ + [("rng_state", ctypes.c_void_p)]


class FaKvcacheParamsCurrent(ctypes.Structure):
    _fields_ = ([("struct_size", ctypes.c_uint32), ("fwd", FaFwdParamsCurrent)] + FaKvcacheParams._fields_[2:]
                + [("workspace", ctypes.c_void_p), ("workspace_size", ctypes.c_size_t)])


class FaLseView(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("batch_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64),
                ("row_stride", ctypes.c_int64)]


class FaCombineParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32), ("num_splits", ctypes.c_int32), ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32), ("num_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32),
        ("out_partial", FaTensor), ("out_partial_split_stride", ctypes.c_int64),
        ("lse_partial", FaLseView), ("lse_partial_split_stride", ctypes.c_int64),
        ("dtype", ctypes.c_int), ("out", FaTensor), ("lse", FaLseView), ("backend", ctypes.c_int),
        ("stream", ctypes.c_void_p),
    ]


def _bind_inference(l):
    if getattr(l, "_inference_bound", False):
        return l
    l.fa_fwd_params_init_sized.argtypes = [ctypes.POINTER(FaFwdParamsPaged), ctypes.c_size_t]
    l.fa_kvcache_params_init.argtypes = [ctypes.POINTER(FaKvcacheParams)]
    l.fa_combine_params_init.argtypes = [ctypes.POINTER(FaCombineParams)]
    l.fa_kvcache_forward.argtypes = [ctypes.c_void_p]  # either layout: the struct's address
    l.fa_kvcache_forward.restype = ctypes.c_int
    l.fa_kvcache_params_init_sized.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    l.fa_kvcache_workspace_size.argtypes = [ctypes.c_void_p]
    l.fa_kvcache_workspace_size.restype = ctypes.c_size_t
    l.fa_combine.argtypes = [ctypes.POINTER(FaCombineParams)]
    l.fa_combine.restype = ctypes.c_int
    l._inference_bound = True
    return l


def _raise_on(status):
    if status != 0:
        raise FlashAttnError(status, lib().fa_last_error().decode())


def _with_paging(params, block_table, page_size, num_blocks):
    """An FaFwdParamsPaged holding `params` (0.1.0 fields) and the block table."""
    l = _bind_inference(lib())
    p = FaFwdParamsPaged()
    l.fa_fwd_params_init_sized(ctypes.byref(p), ctypes.sizeof(FaFwdParamsPaged))
    for name, _ in FaFwdParams._fields_[1:]:
        setattr(p, name, getattr(params, name))
    if block_table is not None:
        assert block_table.dtype == torch.int32 and block_table.stride(1) == 1
        p.block_table = block_table.data_ptr()
        p.block_table_batch_stride = block_table.stride(0)
        p.max_blocks_per_seq = block_table.shape[1]
        p.page_size = page_size
        p.num_blocks = num_blocks
    return p


def _paged_params(q, k, v, block_table, num_splits, kw):
    """(FaFwdParamsPaged, out, lse, varlen) of paged_forward's call; outputs poisoned with NaN."""
    varlen = kw.get("cu_seqlens_q") is not None
    kw = dict(kw)
    seqlen_k = kw.pop("seqlen_k", None)
    out = torch.full_like(q, float("nan"))
    if varlen:
        lse = torch.full((q.shape[1], q.shape[0]), float("nan"), device=q.device, dtype=torch.float32)
    else:
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=q.device, dtype=torch.float32)
    base = make_fwd_params(q, k, v, out, lse=lse, **kw)
    if block_table is not None:
        base.k, base.v = FaTensor(k.data_ptr(), *k.stride()[:3]), FaTensor(v.data_ptr(), *v.stride()[:3])
        base.num_heads_k = k.shape[2]
        if varlen:
            base.total_k = 0  # ignored with a block table
    if seqlen_k is not None:
        base.seqlen_k = seqlen_k
    base.num_splits = num_splits
    return _with_paging(base, block_table, k.shape[1], k.shape[0]), out, lse, varlen


def _bind_forward_workspace(l):
    """The forward's workspace entry points (bound on first use: older builds timed by --lib lack them)."""
    if not getattr(l, "_forward_workspace_bound", False):
        for name in ("fa_forward_with_workspace", "fa_varlen_forward_with_workspace"):
            getattr(l, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            getattr(l, name).restype = ctypes.c_int
        l.fa_forward_workspace_size.argtypes = [ctypes.c_void_p]
        l.fa_forward_workspace_size.restype = ctypes.c_size_t
        l._forward_workspace_bound = True
    return l


def paged_forward(q, k, v, block_table, *, num_splits=1, workspace=None, **kw):
    """fa_forward / fa_varlen_forward with k, v as (num_blocks, page_size, heads_k, d) pools reached
    through block_table (batch, max_blocks) int32 (None: contiguous k/v, e.g. for split-KV alone).
    Dense calls pass the key lengths as seqused_k and seqlen_k=; varlen calls cu_seqlens_k.
    workspace: a uint8 device tensor for fa_(varlen_)forward_with_workspace (its numel the size).
    Returns (out, lse)."""
    p, out, lse, varlen = _paged_params(q, k, v, block_table, num_splits, kw)
    l = lib()
    if workspace is None:
        fn = l.fa_varlen_forward if varlen else l.fa_forward  # declared with the 0.1.0 struct: same prefix
        _raise_on(fn(ctypes.cast(ctypes.pointer(p), ctypes.POINTER(FaFwdParams))))
    else:
        l = _bind_forward_workspace(l)
        fn = l.fa_varlen_forward_with_workspace if varlen else l.fa_forward_with_workspace
        _raise_on(fn(ctypes.addressof(p), workspace.data_ptr() if workspace.numel() else None, workspace.numel()))
    return out, lse


def forward_workspace_size(q, k, v, block_table, *, num_splits=1, **kw):
    """fa_forward_workspace_size of paged_forward's call with the same arguments."""
    p, _, _, _ = _paged_params(q, k, v, block_table, num_splits, kw)
    return _bind_forward_workspace(lib()).fa_forward_workspace_size(ctypes.addressof(p))


def kvcache_forward(q, k_cache, v_cache, cache_seqlens, **kw):
    """fa_kvcache_forward (flash_attn_with_kvcache's arguments, see make_kvcache_params); caches updated
    in place. Returns (out, lse), pre-poisoned with NaN."""
    kp, out, lse = make_kvcache_params(q, k_cache, v_cache, cache_seqlens, **kw)
    _raise_on(lib().fa_kvcache_forward(ctypes.byref(kp)))
    return out, lse


def make_kvcache_params(q, k_cache, v_cache, cache_seqlens, *, k=None, v=None, rotary_cos=None, rotary_sin=None,
                        rotary_interleaved=False, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                        softmax_scale=0.0, causal=False, window=(-1, -1), softcap=0.0, alibi_slopes=None,
                        num_splits=0, backend=FA_BACKEND_AUTO, stream=None, out=None, lse=None, workspace=None):
    """(params, out, lse) for fa_kvcache_forward. k_cache/v_cache: (batch_cache, capacity, heads_k, d),
    or (num_blocks, page_size, heads_k, d) pools with block_table (batch, max_blocks) int32. out/lse: given, or
    new tensors poisoned with NaN. workspace None: the layout before rng_state (FaKvcacheParams, which
    the library still reads; it allocates its own scratch); else today's layout (FaKvcacheParamsCurrent):
    "none" without a workspace, "auto" with fa_kvcache_workspace_size bytes (kept as
    params.keep_workspace), a uint8 tensor as given."""
    l = _bind_inference(lib())
    out = torch.full_like(q, float("nan")) if out is None else out
    if lse is None:
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=q.device, dtype=torch.float32)
    if workspace is None:
        kp = FaKvcacheParams()
        l.fa_kvcache_params_init(ctypes.byref(kp))
    else:
        kp = FaKvcacheParamsCurrent()
        l.fa_kvcache_params_init_sized(ctypes.addressof(kp), ctypes.sizeof(kp))
    f = kp.fwd
    f.dtype = DTYPES[q.dtype]
    f.batch, f.seqlen_q, f.num_heads, f.head_dim = q.shape
    f.num_heads_k = k_cache.shape[2]
    paged = block_table is not None
    f.seqlen_k = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    f.q, f.k, f.v, f.out = fa_tensor(q), fa_tensor(k_cache), fa_tensor(v_cache), fa_tensor(out)
    f.softmax_lse = lse.data_ptr()
    f.softmax_scale = softmax_scale
    f.causal = int(causal)
    f.window_left, f.window_right = window
    f.softcap = softcap
    if alibi_slopes is not None:
        f.alibi_slopes = alibi_slopes.data_ptr()
        f.alibi_batch_stride = alibi_slopes.stride(0) if alibi_slopes.dim() == 2 else 0
    f.num_splits = num_splits
    f.backend = backend
    f.stream = stream
    if paged:
        f.block_table = block_table.data_ptr()
        f.block_table_batch_stride = block_table.stride(0)
        f.max_blocks_per_seq = block_table.shape[1]
        f.page_size = k_cache.shape[1]
        f.num_blocks = k_cache.shape[0]
    else:
        kp.batch_cache = k_cache.shape[0]
    kp.cache_seqlens = cache_seqlens.data_ptr()
    kp.cache_batch_idx = _ptr(cache_batch_idx)
    kp.cache_leftpad = _ptr(cache_leftpad)
    if k is not None:
        kp.k_new, kp.v_new, kp.seqlen_new = fa_tensor(k), fa_tensor(v), k.shape[1]
    if rotary_cos is not None:
        kp.rotary_cos, kp.rotary_sin = rotary_cos.data_ptr(), rotary_sin.data_ptr()
        kp.rotary_dim = 2 * rotary_cos.shape[1]
        kp.seqlen_rotary = rotary_cos.shape[0]
        kp.rotary_interleaved = int(rotary_interleaved)
    if isinstance(workspace, str):
        size = l.fa_kvcache_workspace_size(ctypes.addressof(kp)) if workspace == "auto" else 0
        workspace = torch.empty(size, dtype=torch.uint8, device=q.device) if size else None
    if workspace is not None:
        kp.workspace, kp.workspace_size = workspace.data_ptr(), workspace.numel()
        kp.keep_workspace = workspace
    return kp, out, lse


def kvcache_workspace_size(q, k_cache, v_cache, cache_seqlens, **kw):
    """fa_kvcache_workspace_size of the call kvcache_forward(q, ..., **kw) would make."""
    kw["workspace"] = "none"
    kp, _, _ = make_kvcache_params(q, k_cache, v_cache, cache_seqlens, **kw)
    return _bind_inference(lib()).fa_kvcache_workspace_size(ctypes.addressof(kp))


def combine(out_partial, lse_partial, out, lse=None, backend=FA_BACKEND_AUTO):
    """fa_combine: out_partial (splits, batch, rows, heads, d) fp32 and lse_partial (splits, batch, heads, rows)
    fp32, any strides (last dim of out_partial contiguous); out (batch, rows, heads, d); lse (batch, heads, rows)."""
    l = _bind_inference(lib())
    cp = FaCombineParams()
    l.fa_combine_params_init(ctypes.byref(cp))
    cp.num_splits, cp.batch, cp.seqlen_q, cp.num_heads, cp.head_dim = out_partial.shape
    cp.out_partial = FaTensor(out_partial.data_ptr(), *out_partial.stride()[1:4])
    cp.out_partial_split_stride = out_partial.stride(0)
    cp.lse_partial = FaLseView(lse_partial.data_ptr(), *lse_partial.stride()[1:4])
    cp.lse_partial_split_stride = lse_partial.stride(0)
    cp.dtype = DTYPES[out.dtype]
    cp.out = fa_tensor(out)
    if lse is not None:
        cp.lse = FaLseView(lse.data_ptr(), *lse.stride())
    cp.backend = backend
    _raise_on(l.fa_combine(ctypes.byref(cp)))
