"""flash_attn 2.x's public functions on top of the flashattn::fwd / flashattn::bwd operators.

Same names, argument names, defaults, shapes and return values as flash_attn 2.x, so
`import flashattn as flash_attn` (or `from flashattn.flash_attn_interface import ...`) works in
existing code. Everything a caller can get wrong is checked here, before any kernel runs, and
reported as TypeError (wrong type or dtype) or ValueError (wrong shape, device or value) naming the
argument. Differences from flash_attn are listed in docs/python.md.
"""

import math
import operator
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _ops

_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 256


# ----------------------------------------------------------------------------------------------
# Argument checks. Shapes are read from tensor metadata only: no device memory is touched, so they
# cost no synchronisation and trace cleanly under torch.compile.

def _check_tensor(name: str, t, ref: Optional[Tensor], ndim: int, layout: str):
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ref is None:  # t is q: it fixes dtype and device for the rest
        if t.dtype not in _INPUT_DTYPES:
            raise TypeError(f"{name} must be float16 or bfloat16 (or float32 on the CPU), got {t.dtype}")
        if t.is_cuda:
            if t.dtype is torch.float32:
                raise TypeError(f"{name} is float32 on {t.device}: the CUDA backend takes float16 or bfloat16 "
                                "(float32 is supported by the CPU backend only)")
        elif not t.is_cpu:
            raise ValueError(f"{name} is on {t.device}: flashattn runs on CPU and CUDA tensors only")
    else:
        if t.dtype is not ref.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {ref.dtype}: q, k and v must share a dtype")
        if t.device != ref.device:
            raise ValueError(f"{name} is on {t.device} but q is on {ref.device}: all tensors must be on one device")
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D {layout}, got shape {tuple(t.shape)}")
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got strides {t.stride()}")


def _check_value_head_dim(name, t, k):
    """v (or v_cache) may be narrower or wider than q and k (head_dim_v), nothing else may differ."""
    if t.shape[:-1] != k.shape[:-1]:
        key = "k" if name == "v" else "k_cache"
        raise ValueError(f"{key} and {name} must have the same shape except the last dimension ({name}'s head dim "
                         f"may differ), got {key} {tuple(k.shape)} and {name} {tuple(t.shape)}")
    if not 1 <= t.shape[-1] <= _MAX_HEAD_DIM:
        raise ValueError(f"{name} has head_dim_v {t.shape[-1]}: flashattn supports head dims 1 to {_MAX_HEAD_DIM}")


def _check_qkv(q, k, v, varlen: bool):
    ndim = 3 if varlen else 4
    q_layout = "(total_q, nheads, headdim)" if varlen else "(batch, seqlen_q, nheads, headdim)"
    kv_layout = "(total_k, nheads_k, headdim)" if varlen else "(batch, seqlen_k, nheads_k, headdim)"
    _check_tensor("q", q, None, ndim, q_layout)
    _check_tensor("k", k, q, ndim, kv_layout)
    _check_tensor("v", v, q, ndim, kv_layout.replace("headdim)", "headdim_v)"))
    q_shape, k_shape = q.shape, k.shape
    head_dim = q_shape[-1]
    if not 1 <= head_dim <= _MAX_HEAD_DIM:
        raise ValueError(f"q has head_dim {head_dim}: flashattn supports head_dim 1 to {_MAX_HEAD_DIM}")
    if k_shape[-1] != head_dim:
        raise ValueError(f"k must have q's head_dim {head_dim}, got shape {tuple(k_shape)}")
    _check_value_head_dim("v", v, k)
    if not varlen and k_shape[0] != q_shape[0]:
        raise ValueError(f"k has batch size {k_shape[0]} but q has {q_shape[0]}")
    heads, heads_k = q_shape[-2], k_shape[-2]
    if heads_k < 1 or heads % heads_k != 0:
        raise ValueError(f"q has {heads} heads and k/v have {heads_k}: for MQA/GQA the number of query heads "
                         "must be a multiple of the number of key/value heads")


def _window_pair(window_size):
    """(left, right) as Python ints. Like flash_attn, any pair of integers: a tuple or list of ints or
    numpy integers, or a 2-element integer tensor (reading a CUDA tensor's values synchronises)."""
    what = f"window_size must be a pair of integers (left, right), got {window_size!r}"
    if isinstance(window_size, Tensor):
        if window_size.dtype.is_floating_point or window_size.dtype.is_complex or window_size.dtype is torch.bool:
            raise ValueError(f"{what} (a {window_size.dtype} tensor)")
        if window_size.dim() != 1 or window_size.shape[0] != 2:
            raise ValueError(f"{what} (shape {tuple(window_size.shape)}, expected (2,))")
        window_size = window_size.tolist()
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2:
        raise ValueError(what)
    pair = []
    for w in window_size:
        if isinstance(w, bool) or type(w).__name__ == "bool_":
            raise ValueError(what)
        try:
            pair.append(operator.index(w))  # int, numpy integers, 0-d integer tensors
        except TypeError:
            raise ValueError(what) from None
    if pair[0] < -1 or pair[1] < -1:
        raise ValueError(f"window_size entries must be >= -1 (-1 = unbounded), got {tuple(pair)}")
    return pair[0], pair[1]


def _check_options(q, dropout_p, softmax_scale, window_size, softcap, alibi_slopes, batch):
    """Returns (alibi_slopes with a contiguous last dimension or None, window_size as two ints)."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and math.isfinite(softmax_scale)):
        raise ValueError(f"softmax_scale must be None or a finite float, got {softmax_scale!r}")
    window = _window_pair(window_size)
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be a finite float >= 0 (0 = off), got {softcap!r}")
    if alibi_slopes is None:
        return None, window
    _check_float32_beside_q(alibi_slopes, "alibi_slopes", q)
    heads = q.shape[-2]
    if tuple(alibi_slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes must have shape (nheads,) = ({heads},) or (batch_size, nheads) = "
                         f"({batch}, {heads}), got {tuple(alibi_slopes.shape)}")
    if alibi_slopes.stride(-1) != 1:
        alibi_slopes = alibi_slopes.contiguous()
    return alibi_slopes, window


def _check_float32_beside_q(t, name, q, what=""):
    """A per-head fp32 parameter tensor (alibi_slopes, learnable_sink): a float32 torch.Tensor on q's device."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"{name} must be float32{what}, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")


def _check_sink(learnable_sink, q):
    """learnable_sink: None, or a float32 (nheads,) tensor on q's device (made contiguous)."""
    if learnable_sink is None:
        return None
    _check_float32_beside_q(learnable_sink, "learnable_sink", q, " (one sink logit per query head)")
    heads = q.shape[-2]
    if tuple(learnable_sink.shape) != (heads,):
        raise ValueError(f"learnable_sink must have shape (nheads,) = ({heads},), got {tuple(learnable_sink.shape)}")
    return learnable_sink.contiguous()


def _pad_head_dims(q, k, v):
    """Like flash_attn: kernels see head dims in multiples of 8 (q/k's and v's each); zero columns change
    no dot product and add only zero output columns. Returns the tensors and v's original head dim."""
    pad_qk, pad_v = -q.shape[-1] % 8, -v.shape[-1] % 8
    head_dim_v = v.shape[-1]
    if pad_qk:
        q, k = F.pad(q, (0, pad_qk)), F.pad(k, (0, pad_qk))
    if pad_v:
        v = F.pad(v, (0, pad_v))
    return q, k, v, head_dim_v


def _check_int32_vector(name, t, q, length, length_text):
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if t.dim() != 1 or (length is not None and t.shape[0] != length):
        raise ValueError(f"{name} must have shape ({length_text},), got {tuple(t.shape)}")
    if t.stride(0) != 1 and t.shape[0] > 1:
        raise ValueError(f"{name} must be contiguous")


def _check_varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    _check_int32_vector("cu_seqlens_q", cu_seqlens_q, q, None, "batch_size + 1")
    batch = cu_seqlens_q.shape[0] - 1
    if batch < 1:
        raise ValueError(f"cu_seqlens_q must have batch_size + 1 >= 2 entries, got {cu_seqlens_q.shape[0]}")
    _check_int32_vector("cu_seqlens_k", cu_seqlens_k, q, batch + 1, "batch_size + 1")
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        # (a SymInt when torch.compile makes the length dynamic)
        if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    return batch


# ----------------------------------------------------------------------------------------------
# The one path every public function takes.

def _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, dropout_p,
               softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
               learnable_sink=None):
    varlen = cu_seqlens_q is not None
    _check_qkv(q, k, v, varlen)
    if varlen:
        batch = _check_varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    else:
        batch = q.shape[0]
        max_seqlen_q = max_seqlen_k = 0
    alibi_slopes, window_size = _check_options(q, dropout_p, softmax_scale, window_size, softcap, alibi_slopes, batch)
    if seqused_k is not None:
        _check_int32_vector("seqused_k", seqused_k, q, batch, "batch_size")
    learnable_sink = _check_sink(learnable_sink, q)

    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5  # of the caller's q/k head_dim, not the padded one (nor v's)
    q, k, v, head_dim_v = _pad_head_dims(q, k, v)

    # As in flash_attn, S_dmask is only made with dropout (it is O(seqlen^2)).
    return_probs = bool(return_attn_probs and dropout_p > 0)
    out, lse, probs, _ = _ops.attention(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes, learnable_sink,
                                        max_seqlen_q, max_seqlen_k, float(dropout_p), float(softmax_scale),
                                        bool(causal), window_size[0], window_size[1], float(softcap), return_probs,
                                        bool(deterministic))
    if out.shape[-1] != head_dim_v:
        out = out[..., :head_dim_v]
    if not return_attn_probs:
        return out
    return out, lse, (probs if return_probs else None)


def _check_packed(name, t, ndim, axis, count, layout):
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim or t.shape[axis] != count:
        raise ValueError(f"{name} must have shape {layout}, got {tuple(t.shape)}")


# ----------------------------------------------------------------------------------------------
# Public API (flash_attn 2.x).

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, seqused_k=None,
                    learnable_sink=None):
    """Exact attention softmax(q k^T * softmax_scale) v, FlashAttention-2 style.

    Arguments:
        q: (batch_size, seqlen_q, nheads, headdim); k: (batch_size, seqlen_k, nheads_k, headdim); v:
            (batch_size, seqlen_k, nheads_k, headdim_v), headdim_v may differ from headdim (e.g.
            192/128). float16 or bfloat16 (float32 too on the CPU); head dims <= 256; the last
            dimension must be contiguous. nheads must be a multiple of nheads_k (MQA/GQA: query head
            h reads key/value head h // (nheads // nheads_k)).
        dropout_p: dropout probability on the attention matrix (use 0.0 in evaluation).
        softmax_scale: scale of q k^T before the softmax; default 1 / sqrt(headdim).
        causal: causal mask aligned to the bottom-right corner of the attention matrix.
        window_size: (left, right): query i sees keys [i + seqlen_k - seqlen_q - left,
            i + seqlen_k - seqlen_q + right]; -1 = unbounded.
        softcap: > 0 replaces each score s by softcap * tanh(s / softcap).
        alibi_slopes: float32 (nheads,) or (batch_size, nheads): adds -slope * |i + seqlen_k - seqlen_q - j|.
        deterministic: bitwise reproducible backward.
        return_attn_probs: also return softmax_lse and S_dmask (testing only).
        seqused_k (flashattn extension, keyword only): int32 (batch_size,); sequence b attends only to
            its first seqused_k[b] keys.
        learnable_sink (keyword only): float32 (nheads,): one logit per query head that joins every
            row's softmax denominator and takes no value (gpt-oss); differentiable (its gradient is
            float32). softmax_lse then includes it.
    Returns:
        out: (batch_size, seqlen_q, nheads, headdim_v); with return_attn_probs also
        softmax_lse: float32 (batch_size, nheads, seqlen_q), natural-log logsumexp of each score row;
        S_dmask: float32 (batch_size, nheads, seqlen_q, seqlen_k), the normalised probabilities with
            dropped entries negated; None when dropout_p == 0 (as in flash_attn).
    A query row that may attend to no key gives out = 0 and softmax_lse = -inf (with a sink: the
    sink's logit).
    """
    return _attention(q, k, v, None, None, 0, 0, seqused_k, dropout_p, softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, learnable_sink)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func with qkv: (batch_size, seqlen, 3, nheads, headdim). Returns as flash_attn_func."""
    _check_packed("qkv", qkv, 5, 2, 3, "(batch_size, seqlen, 3, nheads, headdim)")
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], None, None, 0, 0, None, dropout_p, softmax_scale,
                      causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func with kv: (batch_size, seqlen_k, 2, nheads_k, headdim). Returns as flash_attn_func."""
    _check_packed("kv", kv, 5, 2, 2, "(batch_size, seqlen_k, 2, nheads_k, headdim)")
    return _attention(q, kv[:, :, 0], kv[:, :, 1], None, None, 0, 0, None, dropout_p, softmax_scale, causal,
                      window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, seqused_k=None,
                           learnable_sink=None):
    """Attention over a packed batch of variable-length sequences.

    Arguments:
        q: (total_q, nheads, headdim); k: (total_k, nheads_k, headdim); v: (total_k, nheads_k,
            headdim_v); sequences packed along dim 0.
        cu_seqlens_q, cu_seqlens_k: int32 (batch_size + 1,), prefix sums of the sequence lengths;
            sequence b is rows [cu_seqlens[b], cu_seqlens[b + 1]).
        max_seqlen_q, max_seqlen_k: int, the longest sequence of each (an upper bound is fine).
        block_table: optional int32 (batch_size, max_num_blocks_per_seq): paged K/V (forward only). k
            and v are then (num_blocks, page_block_size, nheads_k, headdim) pools, page_block_size a
            multiple of 16; sequence b's key j is row j % page_block_size of block
            block_table[b, j // page_block_size]; cu_seqlens_k gives only the lengths.
        seqused_k (flashattn extension, keyword only): int32 (batch_size,); sequence b attends only to
            its first seqused_k[b] keys.
        The other arguments (learnable_sink too) are those of flash_attn_func; causal and windows are
        bottom-right aligned per sequence.
    Returns:
        out: (total_q, nheads, headdim_v); with return_attn_probs also softmax_lse: float32
        (nheads, total_q) and S_dmask: float32 (batch_size, nheads, max_seqlen_q, max_seqlen_k), element
        (b, h, i, j) the probability of query i and key j of sequence b, dropped entries negated, 0 past
        the sequence's lengths (flash_attn's padded S_dmask); None when dropout_p == 0.
    """
    if block_table is not None:
        return _paged_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, dropout_p,
                             softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table,
                             learnable_sink)
    return _attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, dropout_p,
                      softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs,
                      learnable_sink)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func with qkv: (total, 3, nheads, headdim) and one cu_seqlens / max_seqlen."""
    _check_packed("qkv", qkv, 4, 1, 3, "(total, 3, nheads, headdim)")
    return _attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, None,
                      dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_varlen_func with kv: (total_k, 2, nheads_k, headdim)."""
    _check_packed("kv", kv, 4, 1, 2, "(total_k, 2, nheads_k, headdim)")
    return _attention(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, None,
                      dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs)


# ----------------------------------------------------------------------------------------------
# Inference (forward only): paged K/V in the varlen forward, and attention over a KV cache.

def _check_block_table(block_table, q, batch):
    if not isinstance(block_table, Tensor):
        raise TypeError(f"block_table must be a torch.Tensor, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table must be int32, got {block_table.dtype}")
    if block_table.device != q.device:
        raise ValueError(f"block_table is on {block_table.device} but q is on {q.device}")
    if block_table.dim() != 2 or block_table.shape[0] != batch or block_table.shape[1] < 1:
        raise ValueError(f"block_table must have shape (batch_size, max_num_blocks_per_seq) = ({batch}, >= 1), "
                         f"got {tuple(block_table.shape)}")
    if block_table.stride(1) != 1 and block_table.shape[1] > 1:
        raise ValueError("block_table must have a contiguous last dimension")


def _check_pool(name, t, q, shape_text):
    _check_tensor(name, t, q, 4, shape_text)
    if t.shape[1] % 16 != 0 or t.shape[1] == 0:
        raise ValueError(f"{name} has page_block_size {t.shape[1]} (dim 1): it must be a positive multiple of 16")


class _NoBackward(torch.autograd.Function):
    """out of a forward-only call (paged K/V, a KV cache) whose inputs require grad: as in flash_attn
    the forward runs, and only a backward through it raises."""

    @staticmethod
    def forward(ctx, what, out, *inputs):
        ctx.what = what
        return out.view_as(out)

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(f"flashattn: {ctx.what} is forward only: there is no backward through it "
                                  "(run the forward under torch.no_grad() or detach its inputs)")


def _forward_only(what, out, *inputs):
    """out, attached to inputs that require grad so that a backward through it raises a clear error."""
    needs_grad = [t for t in inputs if t is not None and t.requires_grad]
    if not needs_grad or not torch.is_grad_enabled() or torch.compiler.is_compiling():
        return out
    return _NoBackward.apply(what, out, *needs_grad)


def _paged_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, dropout_p,
                  softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table,
                  learnable_sink):
    _check_tensor("q", q, None, 3, "(total_q, nheads, headdim)")
    shape = "(num_blocks, page_block_size, nheads_k, headdim) with a block_table"
    _check_pool("k", k, q, shape)
    _check_pool("v", v, q, shape.replace("headdim)", "headdim_v)"))
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must have q's headdim {q.shape[-1]}, got k {tuple(k.shape)}")
    _check_value_head_dim("v", v, k)
    if q.shape[-2] % k.shape[-2] != 0:
        raise ValueError(f"q has {q.shape[-2]} heads and k/v have {k.shape[-2]}: for MQA/GQA the number of query "
                         "heads must be a multiple of the number of key/value heads")
    batch = _check_varlen(q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    alibi_slopes, window_size = _check_options(q, dropout_p, softmax_scale, window_size, softcap, alibi_slopes, batch)
    if dropout_p > 0:
        raise ValueError("dropout_p must be 0 with a block_table (paged K/V is forward only)")
    _check_block_table(block_table, q, batch)
    if seqused_k is not None:
        _check_int32_vector("seqused_k", seqused_k, q, batch, "batch_size")
    learnable_sink = _check_sink(learnable_sink, q)
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    with torch.no_grad():
        out, lse = _ops.paged_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table,
                                             alibi_slopes, learnable_sink, max_seqlen_q, max_seqlen_k,
                                             float(softmax_scale), bool(causal), window_size[0], window_size[1],
                                             float(softcap))
    out = _forward_only("attention over paged K/V (block_table)", out, q, k, v, learnable_sink)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            learnable_sink=None):
    """Attention of q over a KV cache, after appending new keys/values to it in place (decoding).

    If k and v are given, they are written into k_cache / v_cache at rows cache_seqlens[b],
    cache_seqlens[b] + 1, ... of each sequence (in place), then q attends to the cache rows
    [cache_leftpad[b], cache_seqlens[b] + seqlen_new). With rotary_cos / rotary_sin the new keys are
    rotated at positions cache_seqlens[b] + i, and q at cache_seqlens[b] + i when causal or local
    (window_size != (-1, -1)), else every query at cache_seqlens[b]. Masks, windows and ALiBi count
    keys from cache_leftpad[b] and align the last query with the last key (bottom-right).
    Forward only.

    Arguments:
        q: (batch_size, seqlen, nheads, headdim).
        k_cache, v_cache: (batch_size_cache, seqlen_cache, nheads_k, headdim), or with block_table
            (num_blocks, page_block_size, nheads_k, headdim), page_block_size a multiple of 16;
            v_cache may have its own head dim, headdim_v.
        k, v [optional]: (batch_size, seqlen_new, nheads_k, headdim): new keys/values to append
            (v: headdim_v).
        rotary_cos, rotary_sin [optional]: (seqlen_ro, rotary_dim / 2), q's dtype; need k and v.
        cache_seqlens: int or int32 (batch_size,): rows already in each sequence's cache (default:
            the whole cache).
        cache_batch_idx [optional]: int32 (batch_size,): the cache entry of each sequence (default
            0, 1, ...); entries must be distinct when k and v are given. Not with block_table.
        cache_leftpad [optional]: int32 (batch_size,): the first valid row of each sequence's cache.
        block_table [optional]: int32 (batch_size, max_num_blocks_per_seq): paged cache.
        softmax_scale, causal, window_size, softcap, alibi_slopes: as in flash_attn_func.
        rotary_interleaved: True: rotate feature pairs (0, 1), (2, 3), ... (GPT-J); False: pairs
            (i, i + rotary_dim / 2) (GPT-NeoX).
        num_splits: split-KV (0 = the backend's heuristic, 1 = off); the result does not depend on it.
        return_softmax_lse: also return the logsumexp.
        learnable_sink [optional, keyword only]: float32 (nheads,): as in flash_attn_func.
    Returns:
        out: (batch_size, seqlen, nheads, headdim_v); with return_softmax_lse also
        softmax_lse: float32 (batch_size, nheads, seqlen).
    """
    _check_tensor("q", q, None, 4, "(batch_size, seqlen, nheads, headdim)")
    batch, _, heads, head_dim = q.shape
    paged = block_table is not None
    cache_shape = ("(num_blocks, page_block_size, nheads_k, headdim) with a block_table" if paged
                   else "(batch_size_cache, seqlen_cache, nheads_k, headdim)")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        (_check_pool if paged else lambda n, x, r, sh: _check_tensor(n, x, r, 4, sh))(name, t, q, cache_shape)
    if k_cache.shape[-1] != head_dim:
        raise ValueError(f"k_cache must have q's headdim {head_dim}, got {tuple(k_cache.shape)}")
    _check_value_head_dim("v_cache", v_cache, k_cache)
    head_dim_v = v_cache.shape[-1]
    heads_k = k_cache.shape[2]
    if heads % heads_k != 0:
        raise ValueError(f"q has {heads} heads and k_cache has {heads_k}: for MQA/GQA the number of query heads "
                         "must be a multiple of the number of key/value heads")
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (new keys and values to append), or both be None")
    if k is not None:
        _check_tensor("k", k, q, 4, "(batch_size, seqlen_new, nheads_k, headdim)")
        _check_tensor("v", v, q, 4, "(batch_size, seqlen_new, nheads_k, headdim_v)")
        if (k.shape[:-1] != v.shape[:-1] or k.shape[0] != batch or k.shape[2] != heads_k or k.shape[3] != head_dim
                or v.shape[3] != head_dim_v):
            raise ValueError(f"k and v must have shape (batch_size, seqlen_new, nheads_k, headdim) = ({batch}, "
                             f"seqlen_new, {heads_k}, {head_dim}) and (..., headdim_v = {head_dim_v}), got "
                             f"{tuple(k.shape)} and {tuple(v.shape)}")
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if rotary_cos is not None:
        if k is None:
            raise ValueError("rotary_cos/rotary_sin need k and v: rotary embedding applies to the appended keys and q")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dtype is not q.dtype:
                raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}: they must match")
            if t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
            if t.dim() != 2 or t.shape != rotary_cos.shape or not 1 <= 2 * t.shape[1] <= head_dim:
                raise ValueError(f"{name} must have shape (seqlen_ro, rotary_dim / 2) with rotary_dim <= headdim "
                                 f"({head_dim}), the same for cos and sin; got {tuple(t.shape)}")
        rotary_cos, rotary_sin = rotary_cos.contiguous(), rotary_sin.contiguous()
    if paged:
        _check_block_table(block_table, q, batch)
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx must be None with a block_table (the table maps sequences to pages)")
    capacity = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    if cache_seqlens is None:
        cache_seqlens = capacity
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        # Known here: checked now (a tensor's values are checked by the library: the CPU backend at the
        # call, CUDA kernels through flashattn.check_device_faults()).
        room = capacity - (0 if k is None else k.shape[1])
        if not 0 <= cache_seqlens <= room:
            where = (f"the block_table's capacity, max_num_blocks_per_seq * page_block_size = {block_table.shape[1]} * "
                     f"{k_cache.shape[1]} = {capacity}" if paged else f"k_cache's capacity, seqlen_cache = {capacity}")
            raise ValueError(f"cache_seqlens = {cache_seqlens} must be in [0, {room}]: {where}"
                             + (f", minus the {k.shape[1]} appended rows of k" if k is not None else ""))
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    _check_int32_vector("cache_seqlens", cache_seqlens, q, batch, "batch_size")
    if cache_batch_idx is not None:
        _check_int32_vector("cache_batch_idx", cache_batch_idx, q, batch, "batch_size")
    if cache_leftpad is not None:
        _check_int32_vector("cache_leftpad", cache_leftpad, q, batch, "batch_size")
    alibi_slopes, window_size = _check_options(q, 0.0, softmax_scale, window_size, softcap, alibi_slopes, batch)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits must be an int >= 0 (0 = heuristic, 1 = off), got {num_splits!r}")
    learnable_sink = _check_sink(learnable_sink, q)
    if softmax_scale is None:
        softmax_scale = head_dim ** -0.5
    with torch.no_grad():
        out, lse = _ops.kvcache_attention(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                          cache_batch_idx, cache_leftpad, block_table, alibi_slopes, learnable_sink,
                                          float(softmax_scale), bool(causal), window_size[0], window_size[1],
                                          float(softcap), bool(rotary_interleaved), int(num_splits))
    out = _forward_only("flash_attn_with_kvcache", out, q, k, v, k_cache, v_cache, learnable_sink)
    return (out, lse) if return_softmax_lse else out
