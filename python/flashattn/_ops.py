"""The two PyTorch operators behind every public function: `flashattn::fwd` and `flashattn::bwd`.

Each is a `torch.library.custom_op` with a fake (meta) implementation, and the pair is tied together
with `register_autograd`, so `torch.compile(fullgraph=True)` traces through attention without a
graph break and AOTAutograd sees the backward as one opaque call. The real implementations only
allocate outputs with torch (so the caching allocator and CUDA-graph capture see every byte), fill
one `fa_fwd_params` / `fa_bwd_params` struct and call the C ABI on the current CUDA stream.

Both operators take the dense and the varlen form: `cu_seqlens_q is None` selects the dense one.
v's head dim may differ from q's (out and dv follow v); `learnable_sink` (fp32, nheads) is optional
and gets its gradient (dsink) from the backward. Arguments arrive already checked by
`flash_attn_interface.py` (head dims padded to multiples of 8, softmax_scale resolved); the library
checks everything again and reports what it rejects.
"""

from typing import Optional

import torch
from torch import Tensor

from . import _library as C

lib = C.load()

_DTYPE_CODES = {torch.float16: C.FLOAT16, torch.bfloat16: C.BFLOAT16, torch.float32: C.FLOAT32}

def _view(t: Tensor) -> C.Tensor:
    """fa_tensor of a dense (batch, seqlen, heads, dim) or packed (total, heads, dim) tensor."""
    s = t.stride()
    if len(s) == 4:
        return C.Tensor(t.data_ptr(), s[0], s[1], s[2])
    return C.Tensor(t.data_ptr(), 0, s[0], s[1])


def _ptr(t: Optional[Tensor]):
    return None if t is None else t.data_ptr()


# ----------------------------------------------------------------------------------------------
# Dropout randomness. The library's Philox stream is keyed by (seed, offset). We draw the pair with a
# torch random op from the default generator of the tensors' device, into an int64 tensor on that
# device, and hand the library its address (fa_fwd_params.rng_state): the kernels read it when they
# run. So torch.manual_seed reproduces a run; inside CUDA-graph capture the draw is recorded like any
# torch random op, and torch gives every replay fresh Philox offsets, so each replay draws a new pair
# and drops new elements. The tensor is saved for the backward, which reads the same pair from it.

def _draw_rng_state(device: torch.device) -> Tensor:
    # 62-bit draws: any uint64 key would do, and these stay non-negative in int64.
    return torch.randint(0, 2**62, (2,), dtype=torch.int64, device=device)


# ----------------------------------------------------------------------------------------------
# Outputs. Allocated with torch (caching allocator, capture-safe); the fake implementations use the
# same functions, so traced and real shapes cannot drift apart.

def _forward_outputs(q: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor]):
    out_shape = (*q.shape[:-1], v.shape[-1])  # shaped like q, as wide as v
    if cu_seqlens_q is None:
        batch, seqlen_q, heads, _ = q.shape
        out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(batch, heads, seqlen_q, dtype=torch.float32, device=q.device)
    else:
        # Packed rows after cu_seqlens_q[-1] belong to no sequence: define them as attending to nothing.
        total_q, heads, _ = q.shape
        out = torch.zeros(out_shape, dtype=q.dtype, device=q.device)
        lse = torch.full((heads, total_q), float("-inf"), dtype=torch.float32, device=q.device)
    return out, lse


def _probs_output(q: Tensor, k: Tensor, cu_seqlens_q: Optional[Tensor], max_seqlen_q, max_seqlen_k, return_probs: bool):
    """attn_probs (batch, heads, seqlen_q, seqlen_k), varlen padded to the maxima; or an empty tensor."""
    if not return_probs:
        return torch.empty(0, dtype=torch.float32, device=q.device)
    if cu_seqlens_q is None:
        return torch.empty(q.shape[0], q.shape[2], q.shape[1], k.shape[1], dtype=torch.float32, device=q.device)
    return torch.empty(cu_seqlens_q.shape[0] - 1, q.shape[1], max_seqlen_q, max_seqlen_k, dtype=torch.float32,
                       device=q.device)


def _rng_output(q: Tensor, dropout_p: float):
    # (seed, offset) on q's device with dropout (see _draw_rng_state), else empty.
    return torch.empty(2 if dropout_p > 0 else 0, dtype=torch.int64, device=q.device)


def _backward_outputs(q: Tensor, k: Tensor, v: Tensor, learnable_sink: Optional[Tensor], varlen: bool):
    """(dq, dk, dv, dsink); dsink is empty without sinks (an operator returns tensors)."""
    make = torch.zeros_like if varlen else torch.empty_like  # varlen: rows outside every sequence get 0
    fmt = torch.contiguous_format
    dsink = (torch.empty(0, dtype=torch.float32, device=q.device) if learnable_sink is None
             else torch.empty_like(learnable_sink, memory_format=fmt))
    return make(q, memory_format=fmt), make(k, memory_format=fmt), make(v, memory_format=fmt), dsink


# ----------------------------------------------------------------------------------------------
# The C structs.

def _fwd_params(q, k, v, out, lse, probs, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink,
                max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                rng_state):
    cuda = q.is_cuda
    if cu_seqlens_q is None:
        batch, seqlen_q, heads, dim = q.shape
        seqlen_k, heads_k = k.shape[1], k.shape[2]
        total_q = total_k = 0
    else:
        total_q, heads, dim = q.shape
        total_k, heads_k = (0, k.shape[2]) if k.dim() == 4 else (k.shape[0], k.shape[1])  # 4-D: a paged pool
        batch, seqlen_q, seqlen_k = cu_seqlens_q.shape[0] - 1, max_seqlen_q, max_seqlen_k
    return C.FwdParams(
        struct_size=lib.fwd_struct_size,
        dtype=_DTYPE_CODES[q.dtype],
        batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, num_heads=heads, num_heads_k=heads_k, head_dim=dim,
        head_dim_v=v.shape[-1], learnable_sink=_ptr(learnable_sink),
        q=_view(q), k=_view(k), v=_view(v), out=_view(out),
        softmax_lse=lse.data_ptr(),
        cu_seqlens_q=_ptr(cu_seqlens_q), cu_seqlens_k=_ptr(cu_seqlens_k),
        total_q=total_q, total_k=total_k, seqused_k=_ptr(seqused_k),
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap,
        alibi_slopes=_ptr(alibi_slopes),
        # (batch, heads) slopes with batch stride 0 (an expanded (heads,) vector) mean "shared", as in the ABI
        alibi_batch_stride=alibi_slopes.stride(0) if alibi_slopes is not None and alibi_slopes.dim() == 2 else 0,
        dropout_p=dropout_p, rng_state=_ptr(rng_state) if rng_state is not None and rng_state.numel() else None,
        attn_probs=probs.data_ptr() if probs is not None and probs.numel() else None,
        # CUDA: the library's planner splits the keys when that fills the GPU (decoding through
        # flash_attn_func; never with dropout or attn_probs), as flash_attn's forward does by its
        # heuristic. The CPU backend's forward keeps one split.
        num_splits=0 if cuda else 1,
        backend=C.BACKEND_CUDA if cuda else C.BACKEND_CPU,
        stream=torch.cuda.current_stream(q.device).cuda_stream if cuda else None,
    )


# ----------------------------------------------------------------------------------------------
# The work, once. `probs` and `rng_state` are None when not asked for (the operators below turn
# them into empty tensors, since an operator returns tensors).

def _run_forward(params, q, varlen):
    """fa_forward / fa_varlen_forward. The library switches to the tensors' GPU itself (the stream in
    params is that GPU's current one); on CUDA its scratch (split-KV's partials, staged copies of odd
    layouts) comes from torch's allocator."""
    if q.is_cuda and (size := lib.forward_workspace_size(params)):
        workspace = torch.empty(size, dtype=torch.uint8, device=q.device)
        call = lib.varlen_forward_with_workspace if varlen else lib.forward_with_workspace
        lib.check(call(params, workspace.data_ptr(), size))
    else:
        lib.check((lib.varlen_forward if varlen else lib.forward)(params))


def forward_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink, max_seqlen_q,
                 max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap, return_probs,
                 deterministic):
    out, lse = _forward_outputs(q, v, cu_seqlens_q)
    probs = _probs_output(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, True) if return_probs else None
    rng_state = _draw_rng_state(q.device) if dropout_p > 0 else None
    params = _fwd_params(q, k, v, out, lse, probs, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes,
                         learnable_sink, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                         window_right, softcap, rng_state)
    _run_forward(params, q, varlen=cu_seqlens_q is not None)
    return out, lse, probs, rng_state


def backward_impl(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes,
                  learnable_sink, rng_state, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
                  window_right, softcap, deterministic):
    if dout.stride(-1) != 1:  # e.g. an expanded gradient; the library needs head_dim contiguous
        dout = dout.contiguous()
    varlen = cu_seqlens_q is not None
    dq, dk, dv, dsink = _backward_outputs(q, k, v, learnable_sink, varlen)
    fwd_params = _fwd_params(q, k, v, out, softmax_lse, None, cu_seqlens_q, cu_seqlens_k, seqused_k,
                             alibi_slopes, learnable_sink, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                             causal, window_left, window_right, softcap, rng_state)
    params = C.BwdParams(struct_size=lib.bwd_struct_size, fwd=fwd_params, dout=_view(dout), dq=_view(dq),
                         dk=_view(dk), dv=_view(dv), deterministic=deterministic,
                         dsink=dsink.data_ptr() if learnable_sink is not None else None)
    workspace = None
    if q.is_cuda:
        # Scratch from torch's allocator (no cudaMalloc in the library, capture-safe). Freeing it when
        # this returns is fine: the allocator hands the block only to later work on the same stream.
        size = lib.bwd_workspace_size(params)
        if size:
            workspace = torch.empty(size, dtype=torch.uint8, device=q.device)
            params.workspace, params.workspace_size = workspace.data_ptr(), size
    lib.check((lib.varlen_backward if varlen else lib.backward)(params))
    return dq, dk, dv, dsink


# ----------------------------------------------------------------------------------------------
# The operators, for torch.compile, export and anything else that traces.

@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
        seqused_k: Optional[Tensor], alibi_slopes: Optional[Tensor], learnable_sink: Optional[Tensor],
        max_seqlen_q: int, max_seqlen_k: int,
        dropout_p: float, softmax_scale: float, causal: bool, window_left: int, window_right: int,
        softcap: float, return_probs: bool, deterministic: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (out, softmax_lse, attn_probs or an empty tensor, rng_state: (seed, offset) int64 on q's
    device with dropout, else empty). `deterministic` only matters to the backward; it is an input here so
    that autograd can hand it on."""
    out, lse, probs, rng_state = forward_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes,
                                              learnable_sink, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                                              causal, window_left, window_right, softcap, return_probs, deterministic)
    if probs is None:
        probs = _probs_output(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, False)
    if rng_state is None:
        rng_state = _rng_output(q, dropout_p)
    return out, lse, probs, rng_state


@fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink, max_seqlen_q, max_seqlen_k,
      dropout_p, softmax_scale, causal, window_left, window_right, softcap, return_probs, deterministic):
    return (*_forward_outputs(q, v, cu_seqlens_q),
            _probs_output(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs),
            _rng_output(q, dropout_p))


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, softmax_lse: Tensor,
        cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor],
        alibi_slopes: Optional[Tensor], learnable_sink: Optional[Tensor], rng_state: Tensor, max_seqlen_q: int,
        max_seqlen_k: int, dropout_p: float, softmax_scale: float, causal: bool, window_left: int,
        window_right: int, softcap: float, deterministic: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Returns (dq, dk, dv, dsink) for the forward that produced out, softmax_lse and rng_state; dsink is
    empty without learnable_sink."""
    return backward_impl(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes,
                         learnable_sink, rng_state, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                         window_left, window_right, softcap, deterministic)


@bwd.register_fake
def _(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink,
      rng_state, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right, softcap,
      deterministic):
    return _backward_outputs(q, k, v, learnable_sink, cu_seqlens_q is not None)


# Autograd: gradients flow to q, k, v and learnable_sink; softmax_lse, attn_probs and rng_state are
# not differentiable (as in flash_attn).
_NUM_FWD_INPUTS = 18
_SINK_INPUT = 7  # learnable_sink's position among the forward's inputs


def _save_for_backward(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink, max_seqlen_q, max_seqlen_k,
     dropout_p, softmax_scale, causal, window_left, window_right, softcap, _return_probs, deterministic) = inputs
    out, lse, probs, rng_state = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink,
                          rng_state)
    ctx.options = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left, window_right,
                   softcap, deterministic)
    ctx.mark_non_differentiable(*(t for t in (lse, probs, rng_state) if t is not None))


def _input_grads(dq, dk, dv, dsink, learnable_sink):
    """The forward inputs' gradients: dq, dk, dv, and dsink in learnable_sink's place."""
    grads = [dq, dk, dv] + [None] * (_NUM_FWD_INPUTS - 3)
    if learnable_sink is not None:
        grads[_SINK_INPUT] = dsink.to(learnable_sink.dtype)
    return tuple(grads)


def _op_backward(ctx, dout, *_unused_grads):
    q, k, v, out, lse, cu_q, cu_k, seqused_k, alibi, sink, rng_state = ctx.saved_tensors
    dq, dk, dv, dsink = bwd(dout, q, k, v, out, lse, cu_q, cu_k, seqused_k, alibi, sink, rng_state, *ctx.options)
    return _input_grads(dq, dk, dv, dsink, sink)


fwd.register_autograd(_op_backward, setup_context=_save_for_backward)


# ----------------------------------------------------------------------------------------------
# Eager fast path. A custom operator costs tens of microseconds of dispatch per call in eager mode;
# plain tensors outside of tracing take a lighter autograd.Function around the same two functions.

class _EagerAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *inputs):
        output = forward_impl(*inputs)
        _save_for_backward(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, dout, *_unused_grads):
        q, k, v, out, lse, cu_q, cu_k, seqused_k, alibi, sink, rng_state = ctx.saved_tensors
        dq, dk, dv, dsink = backward_impl(dout, q, k, v, out, lse, cu_q, cu_k, seqused_k, alibi, sink, rng_state,
                                          *ctx.options)
        return _input_grads(dq, dk, dv, dsink, sink)


def attention(q, k, v, *options):
    """(out, softmax_lse, attn_probs, rng_state) with autograd to q, k, v and learnable_sink (options[4]);
    attn_probs and rng_state are None or empty when not asked for.

    Traced code (torch.compile, export, tensor subclasses, FakeTensor) goes through the registered
    operator; plain eager tensors take the fast path with the same semantics."""
    sink = options[_SINK_INPUT - 3]
    if (type(q) is Tensor and type(k) is Tensor and type(v) is Tensor and (sink is None or type(sink) is Tensor)
            and not torch.compiler.is_compiling()):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or
                                        (sink is not None and sink.requires_grad)):
            return _EagerAttention.apply(q, k, v, *options)
        return forward_impl(q, k, v, *options)
    return fwd(q, k, v, *options)


# ----------------------------------------------------------------------------------------------
# Inference: attention over a KV cache (fa_kvcache_forward) and paged K/V in the varlen forward.
# Forward only (as in flash_attn). The caches are updated in place, so the operator declares them
# mutated; arguments arrive checked by flash_attn_interface.py.

def _paged_fields(block_table: Optional[Tensor], k: Tensor):
    if block_table is None:
        return {}
    return dict(block_table=block_table.data_ptr(), block_table_batch_stride=block_table.stride(0),
                max_blocks_per_seq=block_table.shape[1], page_size=k.shape[1], num_blocks=k.shape[0])


def kvcache_forward_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                         cache_leftpad, block_table, alibi_slopes, learnable_sink, softmax_scale, causal, window_left,
                         window_right, softcap, rotary_interleaved, num_splits):
    cuda = q.is_cuda
    batch, seqlen_q, heads, dim = q.shape
    out, lse = _forward_outputs(q, v_cache, None)
    paged = block_table is not None
    fwd = C.FwdParams(
        struct_size=lib.fwd_struct_size, dtype=_DTYPE_CODES[q.dtype],
        batch=batch, seqlen_q=seqlen_q,
        seqlen_k=block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1],
        num_heads=heads, num_heads_k=k_cache.shape[2], head_dim=dim,
        head_dim_v=v_cache.shape[-1], learnable_sink=_ptr(learnable_sink),
        q=_view(q), k=_view(k_cache), v=_view(v_cache), out=_view(out), softmax_lse=lse.data_ptr(),
        softmax_scale=softmax_scale, causal=causal, window_left=window_left, window_right=window_right,
        softcap=softcap, alibi_slopes=_ptr(alibi_slopes),
        alibi_batch_stride=alibi_slopes.stride(0) if alibi_slopes is not None and alibi_slopes.dim() == 2 else 0,
        num_splits=num_splits, backend=C.BACKEND_CUDA if cuda else C.BACKEND_CPU,
        stream=torch.cuda.current_stream(q.device).cuda_stream if cuda else None,
        **_paged_fields(block_table, k_cache),
    )
    params = C.KvCacheParams(struct_size=lib.kv_struct_size, fwd=fwd, batch_cache=1 if paged else k_cache.shape[0],
                             cache_seqlens=cache_seqlens.data_ptr(), cache_batch_idx=_ptr(cache_batch_idx),
                             cache_leftpad=_ptr(cache_leftpad))
    if k is not None:
        params.k_new, params.v_new, params.seqlen_new = _view(k), _view(v), k.shape[1]
    if rotary_cos is not None:
        params.rotary_cos, params.rotary_sin = rotary_cos.data_ptr(), rotary_sin.data_ptr()
        params.rotary_dim, params.seqlen_rotary = 2 * rotary_cos.shape[1], rotary_cos.shape[0]
        params.rotary_interleaved = rotary_interleaved
    workspace = None
    if cuda:
        # Scratch (split-KV's partials, the rotated q) from torch's allocator, as for the backward:
        # a decode step then allocates nothing in the library (~1 us of GPU time per step saved).
        size = lib.kvcache_workspace_size(params)
        if size:
            workspace = torch.empty(size, dtype=torch.uint8, device=q.device)
            params.workspace, params.workspace_size = workspace.data_ptr(), size
    lib.check(lib.kvcache_forward(params))
    return out, lse


@torch.library.custom_op("flashattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"))
def fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
                rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], cache_seqlens: Tensor,
                cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor], block_table: Optional[Tensor],
                alibi_slopes: Optional[Tensor], learnable_sink: Optional[Tensor], softmax_scale: float, causal: bool,
                window_left: int, window_right: int, softcap: float, rotary_interleaved: bool,
                num_splits: int) -> tuple[Tensor, Tensor]:
    """Returns (out, softmax_lse); k/v (when given) are written into k_cache/v_cache first."""
    return kvcache_forward_impl(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, alibi_slopes, learnable_sink, softmax_scale, causal,
                                window_left, window_right, softcap, rotary_interleaved, num_splits)


@fwd_kvcache.register_fake
def _(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad, block_table,
      alibi_slopes, learnable_sink, softmax_scale, causal, window_left, window_right, softcap, rotary_interleaved,
      num_splits):
    return _forward_outputs(q, v_cache, None)


def kvcache_attention(q, k_cache, v_cache, *options):
    """(out, softmax_lse); plain eager tensors skip the operator dispatch, traced code goes through it."""
    if type(q) is Tensor and type(k_cache) is Tensor and not torch.compiler.is_compiling():
        return kvcache_forward_impl(q, k_cache, v_cache, *options)
    return fwd_kvcache(q, k_cache, v_cache, *options)


def paged_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, alibi_slopes, learnable_sink,
                         max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap):
    """fa_varlen_forward with a block table (forward only): (out, softmax_lse)."""
    out, lse = _forward_outputs(q, v, cu_seqlens_q)
    params = _fwd_params(q, k, v, out, lse, None, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes,
                         learnable_sink, max_seqlen_q, max_seqlen_k, 0.0, softmax_scale, causal, window_left,
                         window_right, softcap, None)
    for name, value in _paged_fields(block_table, k).items():
        setattr(params, name, value)
    params.k, params.v = _view(k), _view(v)  # (num_blocks, page_size, heads_k, dim): 4-D strides
    _run_forward(params, q, varlen=True)
    return out, lse
