"""Every malformed input raises a clear exception naming the argument, before any kernel runs."""

import re

import pytest
import torch

import flashattn
from flashattn import _ops
from helpers import requires_cuda

B, S, H, D = 2, 8, 4, 16


def qkv(dtype=torch.bfloat16, heads_k=H, seqlen_k=S, head_dim=D, batch_k=B):
    return (torch.randn(B, S, H, head_dim).to(dtype), torch.randn(batch_k, seqlen_k, heads_k, head_dim).to(dtype),
            torch.randn(batch_k, seqlen_k, heads_k, head_dim).to(dtype))


def varlen_qkv():
    q = torch.randn(10, H, D, dtype=torch.bfloat16)
    return q, q.clone(), q.clone(), torch.tensor([0, 4, 10], dtype=torch.int32)


def _noncontiguous_last_dim():
    q, k, v = qkv()
    return torch.randn(B, S, H, 2 * D, dtype=torch.bfloat16)[..., ::2], k, v


DENSE_CASES = [
    # (id, make args, kwargs, exception, message pattern)
    ("q_not_tensor", lambda: ([1.0],) + qkv()[1:], {}, TypeError, r"q must be a torch.Tensor"),
    ("int_dtype", lambda: qkv(torch.int32), {}, TypeError, r"q must be float16 or bfloat16"),
    ("float64", lambda: qkv(torch.float64), {}, TypeError, r"q must be float16 or bfloat16"),
    ("mixed_dtype", lambda: (qkv()[0], qkv(torch.float16)[1], qkv()[2]), {}, TypeError, r"k has dtype"),
    ("q_3d", lambda: (qkv()[0][0],) + qkv()[1:], {}, ValueError, r"q must be 4-D"),
    ("last_dim_stride", _noncontiguous_last_dim, {}, ValueError, r"q must have a contiguous last dimension"),
    ("head_dim_mismatch", lambda: (qkv()[0],) + qkv(head_dim=8)[1:], {}, ValueError, r"head_dim"),
    ("head_dim_too_large", lambda: qkv(head_dim=264), {}, ValueError, r"head_dim 264.*1 to 256"),
    ("k_v_shapes", lambda: qkv()[:2] + (qkv(seqlen_k=5)[2],), {}, ValueError, r"k and v must have the same shape"),
    ("v_head_dim_too_large", lambda: qkv()[:2] + (qkv(head_dim=264)[2],), {}, ValueError, r"head_dim_v 264.*1 to 256"),
    ("learnable_sink_not_tensor", qkv, dict(learnable_sink=[0.0] * H), TypeError, r"learnable_sink must be a torch"),
    ("learnable_sink_dtype", qkv, dict(learnable_sink=torch.zeros(H, dtype=torch.bfloat16)), TypeError,
     r"learnable_sink must be float32"),
    ("learnable_sink_shape", qkv, dict(learnable_sink=torch.zeros(H + 1)), ValueError,
     r"learnable_sink must have shape \(nheads,\)"),
    ("batch_mismatch", lambda: (qkv()[0],) + qkv(batch_k=3)[1:], {}, ValueError, r"k has batch size 3"),
    ("gqa", lambda: qkv(heads_k=3), {}, ValueError, r"4 heads and k/v have 3.*multiple"),
    ("dropout_negative", qkv, dict(dropout_p=-0.1), ValueError, r"dropout_p must be in \[0, 1\)"),
    ("dropout_one", qkv, dict(dropout_p=1.0), ValueError, r"dropout_p must be in \[0, 1\)"),
    ("dropout_type", qkv, dict(dropout_p="0.1"), TypeError, r"dropout_p must be a float"),
    ("window_short", qkv, dict(window_size=(3,)), ValueError, r"window_size must be a pair of integers"),
    ("window_float", qkv, dict(window_size=(3.0, 1)), ValueError, r"window_size must be a pair of integers"),
    ("window_float_tensor", qkv, dict(window_size=torch.tensor([3.0, 1.0])), ValueError,
     r"window_size must be a pair of integers.*float32 tensor"),
    ("window_tensor_of_three", qkv, dict(window_size=torch.tensor([3, 1, 2])), ValueError,
     r"window_size must be a pair of integers.*shape \(3,\)"),
    ("window_bools", qkv, dict(window_size=(True, False)), ValueError, r"window_size must be a pair of integers"),
    ("window_string", qkv, dict(window_size="ab"), ValueError, r"window_size must be a pair of integers"),
    ("window_below_minus_one", qkv, dict(window_size=(-2, 0)), ValueError, r"window_size entries must be >= -1"),
    ("softcap_negative", qkv, dict(softcap=-1.0), ValueError, r"softcap must be"),
    ("scale_nan", qkv, dict(softmax_scale=float("nan")), ValueError, r"softmax_scale must be"),
    ("alibi_dtype", qkv, dict(alibi_slopes=torch.ones(H, dtype=torch.float16)), TypeError,
     r"alibi_slopes must be float32"),
    ("alibi_shape", qkv, dict(alibi_slopes=torch.ones(H + 1)), ValueError, r"alibi_slopes must have shape"),
    ("alibi_batch_shape", qkv, dict(alibi_slopes=torch.ones(B + 1, H)), ValueError, r"alibi_slopes must have shape"),
    ("seqused_dtype", qkv, dict(seqused_k=torch.ones(B, dtype=torch.int64)), TypeError, r"seqused_k must be int32"),
    ("seqused_shape", qkv, dict(seqused_k=torch.ones(B + 1, dtype=torch.int32)), ValueError,
     r"seqused_k must have shape"),
]


@pytest.mark.parametrize("make, kwargs, error, pattern", [c[1:] for c in DENSE_CASES], ids=[c[0] for c in DENSE_CASES])
def test_dense_bad_input(make, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        flashattn.flash_attn_func(*make(), **kwargs)


VARLEN_CASES = [
    ("cu_int64", dict(cu_seqlens_q=torch.tensor([0, 4, 10])), TypeError, r"cu_seqlens_q must be int32"),
    ("cu_list", dict(cu_seqlens_k=[0, 4, 10]), TypeError, r"cu_seqlens_k must be a torch.Tensor"),
    ("cu_2d", dict(cu_seqlens_q=torch.tensor([[0, 4, 10]], dtype=torch.int32)), ValueError,
     r"cu_seqlens_q must have shape"),
    ("cu_too_short", dict(cu_seqlens_q=torch.tensor([0], dtype=torch.int32)), ValueError,
     r"cu_seqlens_q must have batch_size \+ 1 >= 2"),
    ("cu_lengths_differ", dict(cu_seqlens_k=torch.tensor([0, 10], dtype=torch.int32)), ValueError,
     r"cu_seqlens_k must have shape"),
    ("max_seqlen_type", dict(max_seqlen_q=6.0), TypeError, r"max_seqlen_q must be an int"),
    ("max_seqlen_negative", dict(max_seqlen_k=-1), ValueError, r"max_seqlen_k must be >= 0"),
    ("block_table_with_packed_k", dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), ValueError,
     r"k must be 4-D \(num_blocks, page_block_size"),
    # contents, checked by the library before it reads any row (CPU tensors)
    ("cu_not_monotone", dict(cu_seqlens_q=torch.tensor([0, 6, 4], dtype=torch.int32)), ValueError,
     r"cu_seqlens_q must be non-decreasing"),
    ("cu_not_from_zero", dict(cu_seqlens_k=torch.tensor([1, 4, 10], dtype=torch.int32)), ValueError,
     r"cu_seqlens_k\[0\] must be 0"),
    ("cu_past_rows", dict(cu_seqlens_k=torch.tensor([0, 4, 12], dtype=torch.int32), max_seqlen_k=8), ValueError,
     r"cu_seqlens_k\[batch\]=12 exceeds total_k=10"),
    ("max_seqlen_too_small", dict(max_seqlen_q=3), ValueError, r"max_seqlen_q.*must bound every sequence"),
    ("seqused_too_large", dict(seqused_k=torch.tensor([5, 1], dtype=torch.int32)), ValueError,
     r"seqused_k\[0\] must be in \[0, 4\]"),
]


@pytest.mark.parametrize("kwargs, error, pattern", [c[1:] for c in VARLEN_CASES], ids=[c[0] for c in VARLEN_CASES])
def test_varlen_bad_input(kwargs, error, pattern):
    q, k, v, cu = varlen_qkv()
    args = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=6, max_seqlen_k=6)
    args.update(kwargs)
    with pytest.raises(error, match=pattern):
        flashattn.flash_attn_varlen_func(q, k, v, **args)


def test_library_errors_are_runtime_errors_with_the_library_message():
    q, k, v, _ = varlen_qkv()
    cu = torch.tensor([0, 6, 4], dtype=torch.int32)
    with pytest.raises(flashattn.FlashAttnError) as info:
        flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 6, 6)
    assert isinstance(info.value, RuntimeError)
    assert info.value.status == "FA_ERROR_INVALID_ARGUMENT"
    assert re.search(r"cu_seqlens_q must be non-decreasing", str(info.value))


def test_packed_shapes():
    with pytest.raises(ValueError, match=r"qkv must have shape \(batch_size, seqlen, 3, nheads, headdim\)"):
        flashattn.flash_attn_qkvpacked_func(torch.randn(B, S, 2, H, D, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"kv must have shape \(batch_size, seqlen_k, 2, nheads_k, headdim\)"):
        flashattn.flash_attn_kvpacked_func(qkv()[0], torch.randn(B, S, 3, H, D, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"qkv must have shape \(total, 3, nheads, headdim\)"):
        flashattn.flash_attn_varlen_qkvpacked_func(torch.randn(10, 2, H, D), torch.zeros(2, dtype=torch.int32), 4)
    with pytest.raises(TypeError, match=r"kv must be a torch.Tensor"):
        flashattn.flash_attn_varlen_kvpacked_func(varlen_qkv()[0], None, None, None, 1, 1)


def test_checks_run_before_any_output_is_touched():
    """A rejected call leaves no half-written state: the library is never entered."""
    calls = []
    original = _ops.forward_impl
    _ops.forward_impl = lambda *a: calls.append(a) or original(*a)
    try:
        with pytest.raises(ValueError):
            flashattn.flash_attn_func(*qkv(heads_k=3))
    finally:
        _ops.forward_impl = original
    assert calls == []


@requires_cuda
def test_cuda_device_mismatch_and_fp32():
    q, k, v = (t.cuda() for t in qkv())
    with pytest.raises(ValueError, match=r"k is on cpu but q is on cuda"):
        flashattn.flash_attn_func(q, k.cpu(), v)
    with pytest.raises(ValueError, match=r"alibi_slopes is on cpu"):
        flashattn.flash_attn_func(q, k, v, alibi_slopes=torch.ones(H))
    with pytest.raises(TypeError, match=r"float32 .*CPU backend only"):
        flashattn.flash_attn_func(q.float(), k.float(), v.float())
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    qv = torch.randn(10, H, D, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=r"cu_seqlens_q is on cpu"):
        flashattn.flash_attn_varlen_func(qv, qv, qv, cu, cu.cuda(), 6, 6)
