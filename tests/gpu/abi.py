"""The GPU tests' and benchmarks' side of the C ABI: the package's binding (python/flashattn/_library.py,
the one ctypes copy of include/flashattn/flashattn.h) and helpers that fill its structs from torch tensors.

Tensors are in the library's (batch, seqlen, heads, head_dim) layout (varlen: (total, heads, head_dim));
their data pointers and element strides go into the params as they are, so any strided view with a
contiguous last dimension is passed without copies.

The library: $FLASHATTN_LIBRARY, else build-gpu/src/libflashattn.so. The binding: python/ of this
repository (put first on sys.path here, so that an installed flashattn package is not used instead).
"""
import contextlib
import os
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if not os.environ.get("FLASHATTN_LIBRARY"):
    os.environ["FLASHATTN_LIBRARY"] = str(REPO / "build-gpu" / "src" / "libflashattn.so")
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

from flashattn import _library as C  # noqa: E402
from flashattn._library import BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA, FlashAttnError, Library  # noqa: E402,F401

lib = C.load()
DTYPES = {torch.float16: C.FLOAT16, torch.bfloat16: C.BFLOAT16, torch.float32: C.FLOAT32}

# The process's own forced choices (FLASHATTN_OVERRIDES, e.g. from scripts/gpu.py pytest --overrides):
# what a test's or a benchmark variant's overrides go on top of, and what they return to.
BASE_OVERRIDES = os.environ.get("FLASHATTN_OVERRIDES", "")


def set_overrides(spec, library=None):
    """fa_set_overrides with spec after BASE_OVERRIDES (a later key wins); "" puts BASE_OVERRIDES back."""
    library = library or lib
    library.check(library.set_overrides(",".join(s for s in (BASE_OVERRIDES, spec) if s).encode()))


@contextlib.contextmanager
def overrides(spec, library=None):
    """set_overrides(spec) inside the block, put back afterwards."""
    set_overrides(spec, library)
    try:
        yield
    finally:
        set_overrides("", library)


def _copy(struct):
    return type(struct).from_buffer_copy(struct)


def _ptr(t):
    return None if t is None else t.data_ptr()


def tensor(t, varlen=False):
    """(batch, seqlen, heads, d) or varlen (total, heads, d) torch tensor -> fa_tensor."""
    if t is None:
        return C.Tensor(None, 0, 0, 0)
    assert t.stride(-1) == 1, "head_dim must be contiguous"
    if varlen:
        return C.Tensor(t.data_ptr(), 0, t.stride(0), t.stride(1))
    return C.Tensor(t.data_ptr(), t.stride(0), t.stride(1), t.stride(2))


def make_fwd_params(q, k, v, out, *, lse=None, softmax_scale=0.0, causal=False, window=(-1, -1),
                    softcap=0.0, alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, attn_probs=None,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                    seqused_k=None, learnable_sink=None, backend=BACKEND_AUTO, stream=None):
    """v and out may have a head dim unlike q's (head_dim_v = v.shape[-1]); learnable_sink: fp32 (heads,)."""
    p = _copy(lib.fwd_defaults)
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
    p.q, p.k, p.v, p.out = (tensor(t, varlen) for t in (q, k, v, out))
    p.head_dim_v = v.shape[-1]
    p.learnable_sink = _ptr(learnable_sink)
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


def call_forward(params, varlen=False, library=None):
    library = library or lib
    library.check((library.varlen_forward if varlen else library.forward)(params))


def forward(q, k, v, *, out=None, return_lse=True, return_probs=False, **kw):
    """Run the forward; returns (out, lse, attn_probs). Outputs are pre-poisoned with NaN."""
    varlen = kw.get("cu_seqlens_q") is not None
    if out is None:
        out = torch.full((*q.shape[:-1], v.shape[-1]), float("nan"), device=q.device, dtype=q.dtype)
    lse = None
    if return_lse:
        shape = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
        lse = torch.full(shape, float("nan"), device=q.device, dtype=torch.float32)
    probs = None
    if return_probs:
        probs = torch.full((q.shape[0], q.shape[2], q.shape[1], k.shape[1]), float("nan"), device=q.device,
                           dtype=torch.float32)
    call_forward(make_fwd_params(q, k, v, out, lse=lse, attn_probs=probs, **kw), varlen)
    return out, lse, probs


def make_bwd_params(q, k, v, out, lse, dout, dq, dk, dv, *, deterministic=False, workspace=None, dsink=None, **kw):
    b = _copy(lib.bwd_defaults)
    varlen = kw.get("cu_seqlens_q") is not None
    b.fwd = make_fwd_params(q, k, v, out, lse=lse, **kw)
    b.dout, b.dq, b.dk, b.dv = (tensor(t, varlen) for t in (dout, dq, dk, dv))
    b.dsink = _ptr(dsink)
    b.deterministic = int(deterministic)
    if workspace is not None:
        b.workspace, b.workspace_size = workspace.data_ptr(), workspace.numel()
    return b


def backward(q, k, v, out, lse, dout, *, dq=None, dk=None, dv=None, deterministic=False, use_workspace=False, **kw):
    """Run the backward; returns (dq, dk, dv), pre-poisoned with NaN. use_workspace: the caller
    allocates fa_bwd_workspace_size bytes (as a framework would) instead of the library. With
    learnable_sink=, pass dsink= (fp32, heads) to receive its gradient."""
    varlen = kw.get("cu_seqlens_q") is not None
    dq = torch.full_like(q, float("nan")) if dq is None else dq
    dk = torch.full_like(k, float("nan")) if dk is None else dk
    dv = torch.full_like(v, float("nan")) if dv is None else dv
    params = make_bwd_params(q, k, v, out, lse, dout, dq, dk, dv, deterministic=deterministic, **kw)
    workspace = None
    if use_workspace:
        size = lib.bwd_workspace_size(params)
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=q.device)
        params.workspace, params.workspace_size = workspace.data_ptr(), size
    lib.check((lib.varlen_backward if varlen else lib.backward)(params))
    return dq, dk, dv


# ---- Inference: paged K/V and split-KV in fa_forward, fa_kvcache_forward, fa_combine --------------

def _paged_params(q, k, v, block_table, num_splits, kw):
    """(params, out, lse, varlen) of paged_forward's call; outputs poisoned with NaN."""
    varlen = kw.get("cu_seqlens_q") is not None
    kw = dict(kw)
    seqlen_k = kw.pop("seqlen_k", None)
    out = torch.full((*q.shape[:-1], v.shape[-1]), float("nan"), device=q.device, dtype=q.dtype)
    shape = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    lse = torch.full(shape, float("nan"), device=q.device, dtype=torch.float32)
    p = make_fwd_params(q, k, v, out, lse=lse, **kw)
    if block_table is not None:
        assert block_table.dtype == torch.int32 and block_table.stride(1) == 1
        p.k, p.v = C.Tensor(k.data_ptr(), *k.stride()[:3]), C.Tensor(v.data_ptr(), *v.stride()[:3])
        p.num_heads_k = k.shape[2]
        if varlen:
            p.total_k = 0  # ignored with a block table
        p.block_table = block_table.data_ptr()
        p.block_table_batch_stride = block_table.stride(0)
        p.max_blocks_per_seq = block_table.shape[1]
        p.page_size, p.num_blocks = k.shape[1], k.shape[0]
    if seqlen_k is not None:
        p.seqlen_k = seqlen_k
    p.num_splits = num_splits
    return p, out, lse, varlen


def paged_forward(q, k, v, block_table, *, num_splits=1, workspace=None, **kw):
    """fa_forward / fa_varlen_forward with k, v as (num_blocks, page_size, heads_k, d) pools reached
    through block_table (batch, max_blocks) int32 (None: contiguous k/v, e.g. for split-KV alone).
    Dense calls pass the key lengths as seqused_k and seqlen_k=; varlen calls cu_seqlens_k.
    workspace: a uint8 device tensor for fa_(varlen_)forward_with_workspace (its numel the size).
    Returns (out, lse)."""
    p, out, lse, varlen = _paged_params(q, k, v, block_table, num_splits, kw)
    if workspace is None:
        call_forward(p, varlen)
    else:
        fn = lib.varlen_forward_with_workspace if varlen else lib.forward_with_workspace
        lib.check(fn(p, workspace.data_ptr() if workspace.numel() else None, workspace.numel()))
    return out, lse


def forward_workspace_size(q, k, v, block_table, *, num_splits=1, **kw):
    """fa_forward_workspace_size of paged_forward's call with the same arguments."""
    p, _, _, _ = _paged_params(q, k, v, block_table, num_splits, kw)
    return lib.forward_workspace_size(p)


def make_kvcache_params(q, k_cache, v_cache, cache_seqlens, *, k=None, v=None, rotary_cos=None, rotary_sin=None,
                        rotary_interleaved=False, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                        softmax_scale=0.0, causal=False, window=(-1, -1), softcap=0.0, alibi_slopes=None,
                        num_splits=0, backend=BACKEND_AUTO, stream=None, out=None, lse=None, workspace=None,
                        learnable_sink=None):
    """(params, out, lse) for fa_kvcache_forward. k_cache/v_cache: (batch_cache, capacity, heads_k, d),
    or (num_blocks, page_size, heads_k, d) pools with block_table (batch, max_blocks) int32. out/lse:
    given, or new tensors poisoned with NaN. workspace: None (the library allocates its own scratch),
    "auto" (fa_kvcache_workspace_size bytes, kept as params.keep_workspace) or a uint8 tensor."""
    if out is None:
        out = torch.full((*q.shape[:-1], v_cache.shape[-1]), float("nan"), device=q.device, dtype=q.dtype)
    if lse is None:
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=q.device, dtype=torch.float32)
    kp = _copy(lib.kv_defaults)
    f = kp.fwd
    f.dtype = DTYPES[q.dtype]
    f.batch, f.seqlen_q, f.num_heads, f.head_dim = q.shape
    f.num_heads_k = k_cache.shape[2]
    paged = block_table is not None
    f.seqlen_k = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    f.q, f.k, f.v, f.out = tensor(q), tensor(k_cache), tensor(v_cache), tensor(out)
    f.head_dim_v = v_cache.shape[-1]
    f.learnable_sink = _ptr(learnable_sink)
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
        kp.k_new, kp.v_new, kp.seqlen_new = tensor(k), tensor(v), k.shape[1]
    if rotary_cos is not None:
        kp.rotary_cos, kp.rotary_sin = rotary_cos.data_ptr(), rotary_sin.data_ptr()
        kp.rotary_dim = 2 * rotary_cos.shape[1]
        kp.seqlen_rotary = rotary_cos.shape[0]
        kp.rotary_interleaved = int(rotary_interleaved)
    if isinstance(workspace, str):
        size = lib.kvcache_workspace_size(kp) if workspace == "auto" else 0
        workspace = torch.empty(size, dtype=torch.uint8, device=q.device) if size else None
    if workspace is not None:
        kp.workspace, kp.workspace_size = workspace.data_ptr(), workspace.numel()
        kp.keep_workspace = workspace
    return kp, out, lse


def kvcache_forward(q, k_cache, v_cache, cache_seqlens, **kw):
    """fa_kvcache_forward (flash_attn_with_kvcache's arguments, see make_kvcache_params); caches updated
    in place. Returns (out, lse), pre-poisoned with NaN."""
    kp, out, lse = make_kvcache_params(q, k_cache, v_cache, cache_seqlens, **kw)
    lib.check(lib.kvcache_forward(kp))
    return out, lse


def kvcache_workspace_size(q, k_cache, v_cache, cache_seqlens, **kw):
    """fa_kvcache_workspace_size of the call kvcache_forward(q, ..., **kw) would make."""
    kp, _, _ = make_kvcache_params(q, k_cache, v_cache, cache_seqlens, **kw)
    return lib.kvcache_workspace_size(kp)


def combine(out_partial, lse_partial, out, lse=None, backend=BACKEND_AUTO):
    """fa_combine: out_partial (splits, batch, rows, heads, d) fp32 and lse_partial (splits, batch, heads, rows)
    fp32, any strides (last dim of out_partial contiguous); out (batch, rows, heads, d); lse (batch, heads, rows)."""
    cp = _copy(lib.combine_defaults)
    cp.num_splits, cp.batch, cp.seqlen_q, cp.num_heads, cp.head_dim = out_partial.shape
    cp.out_partial = C.Tensor(out_partial.data_ptr(), *out_partial.stride()[1:4])
    cp.out_partial_split_stride = out_partial.stride(0)
    cp.lse_partial = C.LseView(lse_partial.data_ptr(), *lse_partial.stride()[1:4])
    cp.lse_partial_split_stride = lse_partial.stride(0)
    cp.dtype = DTYPES[out.dtype]
    cp.out = tensor(out)
    if lse is not None:
        cp.lse = C.LseView(lse.data_ptr(), *lse.stride())
    cp.backend = backend
    lib.check(lib.combine(cp))

