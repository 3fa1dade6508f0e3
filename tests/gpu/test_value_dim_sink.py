"""GPU tests of a value head dim unlike the query's (head_dim_v) and of learnable sinks on CUDA, through
the C ABI (ctypes) with torch CUDA tensors, against the fp64 reference (reference.py: the sink is one
more score per row that takes no value).

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 -m pytest -q tests/gpu/test_value_dim_sink.py

Forward: out and lse with FlashAttention's rule (test_forward.py). Backward: dq, dk, dv and dsink
against autograd through the reference, 3 x the naive same-precision error plus a floor
(test_backward.py); dsink's floor grows with the square root of the rows it sums. Every output is
poisoned with NaN first. The sinks are drawn around +1 (they take a visible share of every row),
so a sink counted twice, or not at all, moves out, lse and dsink far past the bounds.

FA_TEST_DEVICE=cpu runs the same cases against the CPU backend (checks the test code without a GPU).
"""
import math

import pytest
import torch

import abi
from reference import attention_ref
from test_backward import assert_grad_close, floor
from test_forward import assert_close, assert_lse_close

from harness import DEV, ON_CUDA, cu, cuda_only, heavy, rand, sync

REF_KEYS = ("softmax_scale", "causal", "window", "softcap", "alibi_slopes", "dropout_p", "seed", "offset",
            "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "learnable_sink")


def sinks(heads, mean=1.0):
    return torch.randn(heads, device=DEV, dtype=torch.float32) + mean


def ref_kw(kw):
    return {key: kw[key] for key in REF_KEYS if key in kw}


def check_forward(q, k, v, name, **kw):
    out, lse, _ = abi.forward(q, k, v, **kw)
    sync()
    assert out.shape == (*q.shape[:-1], v.shape[-1])
    ref, ref_lse, _ = attention_ref(q, k, v, **ref_kw(kw))
    naive, naive_lse, _ = attention_ref(q, k, v, precision=q.dtype, **ref_kw(kw))
    assert_close(f"{name} out", out, ref, naive)
    assert_lse_close(f"{name} lse", lse, ref_lse, naive_lse)
    return out, lse


def reference_grads(q, k, v, dout, precision, sink, **kw):
    """Autograd through attention_ref in `precision`: (dq, dk, dv, dsink or None)."""
    leaves = [t.detach().to(precision).requires_grad_(True) for t in (q, k, v)]
    sink_leaf = None if sink is None else sink.detach().to(precision).requires_grad_(True)
    kw = {key: value for key, value in ref_kw(kw).items() if key != "learnable_sink"}
    out, _, _ = attention_ref(*leaves, precision=precision, learnable_sink=sink_leaf, **kw)
    out.backward(dout.to(precision))
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves]
    dsink = None
    if sink_leaf is not None:
        dsink = sink_leaf.grad if sink_leaf.grad is not None else torch.zeros_like(sink_leaf)
    return grads + [dsink]


def check_backward(q, k, v, name, deterministic=False, **kw):
    """Forward (checked), then the backward on its out and lse; returns (dq, dk, dv, dsink)."""
    out, lse = check_forward(q, k, v, name, **kw)
    sink = kw.get("learnable_sink")
    dout = rand(*out.shape, dtype=q.dtype)
    dsink = None if sink is None else torch.full_like(sink, float("nan"))
    dq, dk, dv = abi.backward(q, k, v, out, lse, dout, deterministic=deterministic, dsink=dsink, **kw)
    sync()
    ref = reference_grads(q, k, v, dout, torch.float64, sink, **kw)
    naive = reference_grads(q, k, v, dout, q.dtype, sink, **kw)
    for what, ours, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert ours.shape == r.shape, f"{name} {what}: shape {tuple(ours.shape)}, expected {tuple(r.shape)}"
        assert_grad_close(f"{name} {what}", ours, r, n)
    if sink is not None:
        assert not torch.isnan(dsink).any(), f"{name} dsink: NaN (unwritten)"
        # dsink = -sum_i p_sink(i) D_i with D_i = rowsum(dO_i * O_i) over the given (16-bit) out, as
        # FlashAttention's D: first that formula, evaluated in fp64 on the call's own out and lse
        # (tight: only the kernels' fp32 sums differ), then the distance to the exact gradient, which
        # also carries out's rounding (a sum over every row of a head: it can exceed a small
        # multiple of the naive implementation's error, whose out rounds differently).
        varlen = kw.get("cu_seqlens_q") is not None
        d_rows = (dout.double() * out.double()).sum(-1)  # (b, s, h) or varlen (total, h)
        lse64 = lse.double()  # (b, h, s) or varlen (h, total)
        p_sink = torch.exp(sink.double()[:, None] - lse64) if varlen else torch.exp(sink.double()[None, :, None] - lse64)
        p_sink = torch.where(torch.isfinite(lse64), p_sink, torch.zeros_like(p_sink))
        formula = -(p_sink * d_rows.t()).sum(1) if varlen else -(p_sink * d_rows.permute(0, 2, 1)).sum((0, 2))
        rows = q.shape[0] if varlen else q.shape[0] * q.shape[1]
        tiny = floor(q.dtype, formula.abs().max().item()) * math.sqrt(max(rows, 1))
        formula_err = (dsink.double() - formula).abs().max().item()
        assert formula_err <= tiny, f"{name} dsink: max|ours - formula on out| {formula_err:.3e} > {tiny:.3e}"
        err = (dsink.double() - ref[3]).abs().max().item()
        naive_err = (naive[3].double() - ref[3]).abs().max().item()
        out_err = (formula - ref[3]).abs().max().item()
        bound = 3 * naive_err + out_err + floor(q.dtype, ref[3].abs().max().item()) * math.sqrt(max(rows, 1))
        assert err <= bound, f"{name} dsink: max|ours-ref| {err:.3e} > 3 x naive {naive_err:.3e} + out's {out_err:.3e} + floor"
    return dq, dk, dv, dsink


# ---------------------------------------------------------------------------------------------
# head_dim_v: the pairs models use and their mirror images, widths that are not multiples of 8.

HEAD_DIM_PAIRS = [(192, 128), (128, 64), (64, 128), (256, 128), (96, 64), (59, 40), (40, 72), (128, 8)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("dims", HEAD_DIM_PAIRS, ids=lambda d: f"d{d[0]}_{d[1]}")
def test_value_head_dim(dims, dtype, causal):
    torch.manual_seed(dims[0] * 7 + dims[1] + causal)
    d, dv = dims
    q, k, v = rand(2, 173, 4, d, dtype=dtype), rand(2, 261, 2, d, dtype=dtype), rand(2, 261, 2, dv, dtype=dtype)
    check_backward(q, k, v, f"d{d}/{dv}", causal=causal)


@pytest.mark.parametrize("kernels", ["forward_kernel=sm80,backward_kernel=sm80", "forward_kernel=sm90,backward_kernel=sm90"],
                         ids=["sm80", "sm90"])
@pytest.mark.parametrize("dims", [(192, 128), (128, 64), (64, 128)], ids=lambda d: f"d{d[0]}_{d[1]}")
def test_value_head_dim_each_kernel(dims, kernels, overrides):
    """Every training kernel at the pairs (a forced kernel runs where it can: the planner says why not)."""
    torch.manual_seed(dims[0] + dims[1])
    overrides(kernels)
    d, dv = dims
    q, k, v = rand(1, 640, 4, d), rand(1, 640, 4, d), rand(1, 640, 4, dv)
    check_backward(q, k, v, f"d{d}/{dv} {kernels}", causal=True)


def test_value_head_dim_large():
    """DeepSeek's prefill shape, long enough for many K/V blocks and the Hopper kernels' pipelines."""
    torch.manual_seed(5)
    q, k, v = rand(1, 2048, 8, 192), rand(1, 2048, 8, 192), rand(1, 2048, 8, 128)
    check_backward(q, k, v, "2k d192/128", causal=True)
    check_forward(q, k, v, "2k d192/128 full")


# ---------------------------------------------------------------------------------------------
# The Hopper forward's value-dim instance (192 / 128): P V, O's registers, its staging and store at
# 128 columns, v and out read and written in place (no zero-padded copies at 192). On sm_90 the
# planner takes it for every training forward of exactly these widths (dense or varlen); the shapes
# below give each CTA of its persistent grid several tiles (9 query blocks x 2 x 16 heads = 288 tiles
# on 132 SMs), GQA, and each feature of the kernel (the extras variant: softcap, ALiBi, dropout).

def on_hopper():
    return ON_CUDA and torch.cuda.get_device_capability() == (9, 0)


def assert_value_dim_kernel(q, k, v, **kw):
    """On an H200: the call stages nothing (fa_forward_workspace_size is at most the tile counter a
    masked call claims its tiles from), i.e. the value-dim instance runs, not v and out at 192."""
    if on_hopper():
        size = abi.forward_workspace_size(q, k, v, None, **kw)
        assert size <= 256, f"192/128: {size} B of workspace, v or out staged (not the value-dim kernel)"


VALUE_DIM_FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(256, 64)),
    "sink": dict(sink=True),
    "sink_causal": dict(causal=True, sink=True),
    "softcap_alibi_sink": dict(softcap=20.0, alibi=True, sink=True, causal=True),
    "dropout": dict(dropout_p=0.15, seed=11, offset=3),
    "seqused_k": dict(seqused=(700, 1201)),
}


def inputs_192_128(features, dtype, heads, heads_k):
    """q, k at 192 and v at 128 over odd lengths (1100 queries, 1201 keys: partial query and key
    blocks), batch 2, and the call's keywords from a feature entry: sink, alibi and seqused become
    their tensors, heads_k (if given) overrides the K/V heads, the rest passes through."""
    opts = dict(features)
    heads_k = opts.pop("heads_k", heads_k)
    batch, sq, sk = 2, 1100, 1201
    q = rand(batch, sq, heads, 192, dtype=dtype)
    k, v = rand(batch, sk, heads_k, 192, dtype=dtype), rand(batch, sk, heads_k, 128, dtype=dtype)
    kw = {}
    if opts.pop("sink", False):
        kw["learnable_sink"] = sinks(heads)
    if opts.pop("alibi", False):
        kw["alibi_slopes"] = torch.rand(heads, device=DEV) * 0.3
    if "seqused" in opts:
        kw["seqused_k"] = torch.tensor(opts.pop("seqused"), dtype=torch.int32, device=DEV)
    kw.update(opts)
    return q, k, v, kw


@heavy
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("feature", list(VALUE_DIM_FEATURES))
def test_value_dim_192_128(feature, dtype):
    torch.manual_seed(len(feature) * 13 + (dtype == torch.float16))
    q, k, v, kw = inputs_192_128(VALUE_DIM_FEATURES[feature], dtype, heads=16, heads_k=4)
    assert_value_dim_kernel(q, k, v, **kw)
    check_forward(q, k, v, f"d192/128 {feature}", **kw)


@heavy
def test_value_dim_192_128_layouts():
    """v and out as column slices of wider tensors (strided rows: read and written in place, by TMA
    where aligned; out's other columns untouched), a misaligned v (staged at 128 columns, not 192),
    and varlen (the kernel's cp.async path)."""
    torch.manual_seed(27)
    batch, sq, sk, heads, heads_k = 2, 700, 900, 8, 2
    q, k = rand(batch, sq, heads, 192), rand(batch, sk, heads_k, 192)
    v_wide = rand(batch, sk, heads_k, 192)
    v = v_wide[..., :128]  # row stride 384 elements, head stride 192
    assert_value_dim_kernel(q, k, v, causal=True)
    out_wide = torch.full((batch, sq, heads, 160), float("nan"), device=DEV, dtype=q.dtype)
    out, lse, _ = abi.forward(q, k, v, out=out_wide[..., 16:144], causal=True)
    sync()
    ref, ref_lse, _ = attention_ref(q, k, v, causal=True)
    naive, naive_lse, _ = attention_ref(q, k, v, causal=True, precision=q.dtype)
    assert_close("d192/128 strided v, out", out, ref, naive)
    assert_lse_close("d192/128 strided v, out lse", lse, ref_lse, naive_lse)
    assert torch.isnan(out_wide[..., :16]).all() and torch.isnan(out_wide[..., 144:]).all(), \
        "the store wrote columns outside out's 128"

    flat = torch.empty(v.numel() + 1, device=DEV, dtype=v.dtype)[1:]  # base 2 bytes past 16-byte alignment
    v_odd = flat.view(v.shape).copy_(v)
    if on_hopper():
        # What the misaligned v adds to the aligned one's workspace (which holds, e.g., a tile counter).
        staged = abi.forward_workspace_size(q, k, v_odd, None) - abi.forward_workspace_size(q, k, v, None)
        assert staged == -(-v.numel() * 2 // 256) * 256, f"misaligned v: {staged} B staged, expected v at 128 columns"
    check_forward(q, k, v_odd, "d192/128 misaligned v")

    lq, lk = [1000, 7, 0, 300, 1500], [1100, 1, 50, 300, 1300]
    q, k, v = rand(sum(lq), heads, 192), rand(sum(lk), heads_k, 192), rand(sum(lk), heads_k, 128)
    for causal in (False, True):
        kw = dict(cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk),
                  causal=causal, learnable_sink=sinks(heads))
        check_forward(q, k, v, f"varlen d192/128 causal={causal}", **kw)


# ---------------------------------------------------------------------------------------------
# The Hopper backward's value-dim instance (192 / 128; the P/dS schedule with V, dO and dV 128 wide,
# v and dout read in place, dv written at 128 columns). On sm_90 the planner takes it for every
# backward of exactly these widths without dropout (and in deterministic mode with the ordered dQ);
# the tests force backward_kernel=sm90 so that a planner change cannot route them elsewhere
# unnoticed, and check that nothing was staged for the widths (the workspace holds no v or dout at
# 192: it is smaller than the mma.sync plan's by at least those copies).

def assert_value_dim_backward(q, k, v, out, lse, dout, spec, deterministic=False, **kw):
    """On an H200, under the overrides `spec`: the plan stages no v or dout at 192 (its workspace is
    smaller than the mma.sync plan's by at least half those copies)."""
    if not on_hopper():
        return
    def size(overrides_spec):
        abi.set_overrides(overrides_spec)
        try:
            params = abi.make_bwd_params(q, k, v, out, lse, dout, q, k, v, deterministic=deterministic, **kw)
            return abi.lib.bwd_workspace_size(params)
        finally:
            abi.set_overrides(spec)
    native, staged = size(spec), size(spec + ",backward_kernel=sm80")
    varlen = kw.get("cu_seqlens_q") is not None
    q_rows = q.shape[0] if varlen else q.shape[0] * q.shape[1]
    k_rows = k.shape[0] if varlen else k.shape[0] * k.shape[1]
    copies = 2 * 192 * (q_rows * q.shape[-2] + k_rows * k.shape[-2])
    assert native + copies // 2 < staged, \
        f"192/128 backward: {native} B of workspace against {staged} B staged (v / dout copied at 192?)"


def check_value_dim_backward(q, k, v, name, spec, deterministic=False, **kw):
    """check_backward, after checking that the value-dim instance takes the call (overrides `spec`)."""
    out, lse, _ = abi.forward(q, k, v, **kw)
    assert_value_dim_backward(q, k, v, out, lse, torch.empty_like(out), spec, deterministic=deterministic, **kw)
    return check_backward(q, k, v, name, deterministic=deterministic, **kw)


VALUE_DIM_BWD_FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "gqa_walk": dict(heads_k=4),                 # short keys, no mask: the group walk (kv_major)
    "gqa_scratch_causal": dict(heads_k=4, causal=True),  # the dK/dV scratch (rows of 192 floats)
    "window": dict(window=(256, 64)),
    "sink": dict(sink=True),
    "sink_causal_gqa": dict(sink=True, causal=True, heads_k=2),
    "softcap_alibi": dict(softcap=20.0, alibi=True, causal=True),  # the extras kernel
    "seqused_k": dict(seqused=(700, 1201)),
    "scale": dict(softmax_scale=0.05),
}


@heavy
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("feature", list(VALUE_DIM_BWD_FEATURES))
def test_value_dim_backward_192_128(feature, dtype, overrides):
    """Odd lengths (1100 queries, 1201 keys: partial query and key blocks), every kernel variant."""
    torch.manual_seed(len(feature) * 17 + (dtype == torch.float16))
    spec = "backward_kernel=sm90"
    overrides(spec)
    q, k, v, kw = inputs_192_128(VALUE_DIM_BWD_FEATURES[feature], dtype, heads=8, heads_k=8)
    check_value_dim_backward(q, k, v, f"bwd d192/128 {feature}", spec, **kw)


@pytest.mark.parametrize("gqa", [1, 4], ids=["mha", "gqa4"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_value_dim_backward_192_128_short(causal, gqa, overrides):
    """Lengths below one block and a few blocks, each not a multiple of 64 (also the CPU check mode)."""
    torch.manual_seed(gqa * 2 + causal)
    spec = "backward_kernel=sm90"
    overrides(spec)
    for sq, sk in ((1, 1), (37, 5), (5, 37), (130, 193)):
        q = rand(2, sq, 4 * gqa, 192)
        k, v = rand(2, sk, 4, 192), rand(2, sk, 4, 128)
        check_value_dim_backward(q, k, v, f"bwd d192/128 {sq}x{sk} gqa{gqa}", spec, causal=causal,
                                 learnable_sink=sinks(4 * gqa))


@heavy
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_value_dim_backward_192_128_varlen(causal, overrides):
    """Varlen (the cp.async path for Q and dO, sequences of 0, 1 and odd lengths), GQA, sinks."""
    torch.manual_seed(41 + causal)
    spec = "backward_kernel=sm90"
    overrides(spec)
    lq, lk = [1000, 7, 0, 300, 1500, 1], [1100, 1, 50, 300, 1300, 65]
    heads, heads_k = 8, 2
    q, k, v = rand(sum(lq), heads, 192), rand(sum(lk), heads_k, 192), rand(sum(lk), heads_k, 128)
    kw = dict(cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk),
              causal=causal, learnable_sink=sinks(heads))
    check_value_dim_backward(q, k, v, f"varlen bwd d192/128 causal={causal}", spec, **kw)


@heavy
@pytest.mark.parametrize("dq_order", ["ordered", "chunks"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_value_dim_backward_192_128_deterministic(causal, dq_order, overrides):
    """Deterministic mode on the value-dim instance: the ordered dQ (automatic) or the chunks (forced:
    a CTA walks several key blocks, the producer adds each dQ row with a warp, 48 float4 chunks);
    correct, and bitwise equal across runs."""
    torch.manual_seed(3 + causal)
    spec = f"backward_kernel=sm90,deterministic_dq={dq_order}"
    overrides(spec)
    q, k, v = rand(2, 1500, 8, 192), rand(2, 1500, 8, 192), rand(2, 1500, 8, 128)
    kw = dict(causal=causal, learnable_sink=sinks(8))
    check_value_dim_backward(q, k, v, f"deterministic ({dq_order}) bwd d192/128", spec, deterministic=True, **kw)
    out, lse, _ = abi.forward(q, k, v, **kw)
    dout = rand(*out.shape)
    runs = []
    for _ in range(3):
        dsink = torch.full_like(kw["learnable_sink"], float("nan"))
        runs.append((*abi.backward(q, k, v, out, lse, dout, deterministic=True, dsink=dsink, **kw), dsink))
    sync()
    for run in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv", "dsink"), runs[0], run):
            assert torch.equal(a, b), f"deterministic ({dq_order}) 192/128 {name} differs between runs"


@heavy
def test_value_dim_backward_192_128_layouts(overrides):
    """v and dout as column slices of wider tensors (read in place, dO by TMA with strided rows), dv
    into a slice of a wider tensor (its other columns untouched), and a misaligned dout (staged at
    128 columns, not 192)."""
    torch.manual_seed(28)
    spec = "backward_kernel=sm90"
    overrides(spec)
    batch, sq, sk, heads = 2, 700, 900, 8
    q, k = rand(batch, sq, heads, 192), rand(batch, sk, heads, 192)
    v = rand(batch, sk, heads, 192)[..., 32:160]
    out, lse, _ = abi.forward(q, k, v, causal=True)
    dout = rand(batch, sq, heads, 256)[..., 64:192]
    dv_wide = torch.full((batch, sk, heads, 160), float("nan"), device=DEV, dtype=q.dtype)
    assert_value_dim_backward(q, k, v, out, lse, dout, spec, causal=True)
    dq, dk, dv = abi.backward(q, k, v, out, lse, dout, dv=dv_wide[..., 16:144], causal=True)
    sync()
    ref = reference_grads(q, k, v, dout, torch.float64, None, causal=True)
    naive = reference_grads(q, k, v, dout, q.dtype, None, causal=True)
    for what, ours, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_grad_close(f"d192/128 strided {what}", ours, r, n)
    assert torch.isnan(dv_wide[..., :16]).all() and torch.isnan(dv_wide[..., 144:]).all(), \
        "the dv store wrote columns outside dv's 128"

    flat = torch.empty(dout.numel() + 1, device=DEV, dtype=q.dtype)[1:]  # 2 bytes past 16-byte alignment
    dout_odd = flat.view(dout.shape).copy_(dout)
    dq, dk, dv = abi.backward(q, k, v, out, lse, dout_odd, causal=True)
    sync()
    for what, ours, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_grad_close(f"d192/128 misaligned dout {what}", ours, r, n)


# ---------------------------------------------------------------------------------------------
# Learnable sinks with every feature, forward and backward (dsink).

SINK_FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(32, 8)),
    "causal_rows_without_keys": dict(causal=True, window=(0, 0)),
    "softcap": dict(softcap=5.0, causal=True),
    "alibi": dict(alibi=True),
    "dropout": dict(dropout_p=0.17, seed=123, offset=45),
    "softcap_alibi_dropout": dict(softcap=20.0, alibi=True, dropout_p=0.1, seed=7, offset=0, causal=True),
    "scale": dict(softmax_scale=0.3),
    "seqused_k": dict(seqused={0: 0, 1: 150}),
}


@pytest.mark.parametrize("gqa", [1, 3], ids=["mha", "gqa3"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("feature", list(SINK_FEATURES))
def test_sink_features(feature, dtype, gqa):
    torch.manual_seed(len(feature) * 11 + gqa)
    opts = dict(SINK_FEATURES[feature])
    heads_k, heads = 2, 2 * gqa
    sq, sk = (203, 113) if feature == "causal_rows_without_keys" else (113, 203)
    q, k, v = rand(2, sq, heads, 64, dtype=dtype), rand(2, sk, heads_k, 64, dtype=dtype), rand(2, sk, heads_k, 64, dtype=dtype)
    kw = dict(learnable_sink=sinks(heads))
    if opts.pop("alibi", False):
        kw["alibi_slopes"] = torch.rand(heads, device=DEV) * 0.3
    if "seqused" in opts:
        used = opts.pop("seqused")
        kw["seqused_k"] = torch.tensor([used[0], used[1]], dtype=torch.int32, device=DEV)
    kw.update(opts)
    check_backward(q, k, v, f"sink {feature}", **kw)


def test_sink_rows_without_keys_give_zero_and_the_sink():
    """Rows that may attend to no key: out = 0, lse = the sink (not -inf)."""
    torch.manual_seed(3)
    q, k, v = rand(1, 64, 2, 128), rand(1, 16, 2, 128), rand(1, 16, 2, 128)
    sink = sinks(2)
    out, lse, _ = abi.forward(q, k, v, causal=True, learnable_sink=sink)  # rows 0..47 see no key
    sync()
    assert torch.equal(out[0, :48], torch.zeros_like(out[0, :48]))
    assert torch.allclose(lse[0, :, :48], sink[:, None].expand(2, 48), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kernels", ["forward_kernel=sm80", "forward_kernel=sm90"], ids=["sm80", "sm90"])
@pytest.mark.parametrize("dims", [(128, 128), (64, 64), (256, 256), (192, 128)], ids=lambda d: f"d{d[0]}_{d[1]}")
def test_sink_each_forward_kernel(dims, kernels, overrides):
    """The plain and the extras kernels of both training forwards (softcap takes the extras one), at
    lengths that make the Hopper kernel loop over several tiles per CTA."""
    torch.manual_seed(dims[0])
    overrides(kernels)
    d, dv = dims
    q, k, v = rand(2, 1000, 6, d), rand(2, 1100, 2, d), rand(2, 1100, 2, dv)
    for extra in (dict(), dict(softcap=10.0), dict(causal=True)):
        check_forward(q, k, v, f"sink d{d}/{dv} {kernels} {extra}", learnable_sink=sinks(6), **extra)


@pytest.mark.parametrize("dims", [(128, 128), (192, 128), (64, 32)], ids=lambda d: f"d{d[0]}_{d[1]}")
def test_sink_varlen(dims):
    torch.manual_seed(dims[1])
    d, dv = dims
    lq, lk = [37, 0, 1, 128, 77, 9], [53, 11, 0, 97, 201, 9]
    q, k, v = rand(sum(lq), 4, d), rand(sum(lk), 2, d), rand(sum(lk), 2, dv)
    kw = dict(cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk), causal=True,
              learnable_sink=sinks(4))
    check_backward(q, k, v, f"varlen sink d{d}/{dv}", **kw)


@pytest.mark.parametrize("dims", [(128, 128), (64, 128), (128, 64)], ids=lambda d: f"d{d[0]}_{d[1]}")
def test_dsink_deterministic_is_bitwise_reproducible(dims):
    """Deterministic mode: dsink (a fixed-order sum), dq, dk, dv bitwise equal across runs; the
    default mode (atomics) within the bound too."""
    torch.manual_seed(11)
    d, dv = dims
    q, k, v = rand(3, 700, 8, d), rand(3, 700, 2, d), rand(3, 700, 2, dv)
    kw = dict(causal=True, learnable_sink=sinks(8))
    first = check_backward(q, k, v, "deterministic", deterministic=True, **kw)
    out, lse, _ = abi.forward(q, k, v, **kw)
    dout = rand(*out.shape)
    runs = []
    for _ in range(3):
        dsink = torch.full_like(kw["learnable_sink"], float("nan"))
        grads = abi.backward(q, k, v, out, lse, dout, deterministic=True, dsink=dsink, **kw)
        runs.append((*grads, dsink))
    sync()
    for run in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv", "dsink"), runs[0], run):
            assert torch.equal(a, b), f"deterministic {name} differs between runs"
    assert first[3] is not None


# ---------------------------------------------------------------------------------------------
# The inference kernels: split-KV (the sink counts once), decode tiles with packed GQA heads (a sink
# per row), paged K/V and the KV cache (v staged at the kernels' width when it is the narrower).

@pytest.mark.parametrize("num_splits", [0, 3, 16])
@pytest.mark.parametrize("shape", [(1, 4000, 8, 2), (1, 700, 8, 8), (5, 900, 4, 4), (64, 1500, 4, 2)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}-h{s[2]}q{s[3]}kv")
@pytest.mark.parametrize("dims", [(128, 128), (192, 128), (64, 32)], ids=lambda d: f"d{d[0]}_{d[1]}")
def test_sink_split_kv(dims, shape, num_splits):
    torch.manual_seed(num_splits + shape[1] + dims[1])
    d, dv = dims
    sq, sk, hq, hk = shape
    q, k, v = rand(2, sq, hq, d), rand(2, sk, hk, d), rand(2, sk, hk, dv)
    kw = dict(causal=sq > 1, learnable_sink=sinks(hq))
    out, lse = abi.paged_forward(q, k, v, None, num_splits=num_splits, **kw)
    sync()
    ref, ref_lse, _ = attention_ref(q, k, v, **kw)
    naive, naive_lse, _ = attention_ref(q, k, v, precision=q.dtype, **kw)
    assert_close("split-KV sink out", out, ref, naive)
    assert_lse_close("split-KV sink lse", lse, ref_lse, naive_lse)


@pytest.mark.parametrize("kernel", ["inference_kernel=split_keys", "inference_kernel=tile64"])
@pytest.mark.parametrize("page", [16, 256])
def test_sink_paged_decode(page, kernel, overrides):
    """Paged pools, decode shapes (packed GQA: tile rows are 4 query heads, each with its sink), both
    inference kernels, one split and several, with a narrower v."""
    torch.manual_seed(page)
    overrides(kernel)
    lk = [3000, 333, 1]
    g = torch.Generator().manual_seed(page)
    for d, dv in ((128, 128), (128, 64)):
        max_blocks = max((n + page - 1) // page for n in lk)
        num_blocks = len(lk) * max_blocks + 2
        perm = torch.randperm(num_blocks, generator=g)
        table = torch.full((len(lk), max_blocks), -1, dtype=torch.int32)
        k_pool = torch.full((num_blocks, page, 2, d), float("nan"), dtype=torch.bfloat16, device=DEV)
        v_pool = torch.full((num_blocks, page, 2, dv), float("nan"), dtype=torch.bfloat16, device=DEV)
        ks, vs = [], []
        for b, n in enumerate(lk):
            used = (n + page - 1) // page
            table[b, :used] = perm[b * max_blocks:b * max_blocks + used].to(torch.int32)
            kk, vv = rand(n, 2, d), rand(n, 2, dv)
            rows = torch.arange(n, device=DEV)
            blocks = table[b].to(DEV)[rows // page].long()
            k_pool[blocks, rows % page], v_pool[blocks, rows % page] = kk, vv
            ks.append(kk)
            vs.append(vv)
        table = table.to(DEV)
        k = torch.nn.utils.rnn.pad_sequence(ks, batch_first=True)
        v = torch.nn.utils.rnn.pad_sequence(vs, batch_first=True)
        used = torch.tensor(lk, dtype=torch.int32, device=DEV)
        for seqlen_q, num_splits in ((1, 0), (1, 1), (3, 5)):
            q = rand(len(lk), seqlen_q, 8, d)
            kw = dict(causal=True, seqused_k=used, learnable_sink=sinks(8))
            out, lse = abi.paged_forward(q, k_pool, v_pool, table, seqlen_k=max(lk), num_splits=num_splits, **kw)
            sync()
            ref, ref_lse, _ = attention_ref(q, k, v, **kw)
            naive, naive_lse, _ = attention_ref(q, k, v, precision=q.dtype, **kw)
            name = f"paged d{d}/{dv} sq{seqlen_q} splits{num_splits}"
            assert_close(f"{name} out", out, ref, naive)
            assert_lse_close(f"{name} lse", lse, ref_lse, naive_lse)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("dims", [(192, 128), (128, 64), (64, 64)], ids=lambda d: f"d{d[0]}_{d[1]}")
def test_kvcache_value_head_dim_and_sink(dims, paged):
    """fa_kvcache_forward: append k_new / v_new (v_new with head_dim_v columns), GQA, sinks; the
    reference reads each sequence's rows of the caches after the call."""
    torch.manual_seed(dims[0] + paged)
    d, dv = dims
    batch, capacity, heads, heads_k, page = 3, 512, 8, 2, 64
    lens = [100, 0, 400]
    for seqlen_q in (1, 4):
        seqlen_new = seqlen_q
        if paged:
            max_blocks = capacity // page
            num_blocks = batch * max_blocks
            table = torch.randperm(num_blocks, dtype=torch.int32).view(batch, max_blocks).to(DEV)
            k_cache = rand(num_blocks, page, heads_k, d)
            v_cache = rand(num_blocks, page, heads_k, dv)
        else:
            table = None
            k_cache, v_cache = rand(batch, capacity, heads_k, d), rand(batch, capacity, heads_k, dv)
        q = rand(batch, seqlen_q, heads, d)
        k_new, v_new = rand(batch, seqlen_new, heads_k, d), rand(batch, seqlen_new, heads_k, dv)
        sink = sinks(heads)
        cache_seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
        out, lse = abi.kvcache_forward(q, k_cache, v_cache, cache_seqlens, k=k_new, v=v_new, block_table=table,
                                       causal=True, learnable_sink=sink)
        sync()
        for b in range(batch):
            rows = torch.arange(0, lens[b] + seqlen_new, device=DEV)
            if paged:
                blocks, r = table[b, rows // page].long(), rows % page
                k, v = k_cache[blocks, r], v_cache[blocks, r]
            else:
                k, v = k_cache[b, rows], v_cache[b, rows]
            assert torch.equal(v[lens[b]:], v_new[b]), f"seq {b}: v_new not appended"
            ref, ref_lse, _ = attention_ref(q[b:b + 1], k[None], v[None], causal=True, learnable_sink=sink)
            naive, naive_lse, _ = attention_ref(q[b:b + 1], k[None], v[None], causal=True, learnable_sink=sink,
                                                precision=q.dtype)
            assert_close(f"kvcache d{d}/{dv} seq {b} out", out[b:b + 1], ref, naive)
            assert_lse_close(f"kvcache d{d}/{dv} seq {b} lse", lse[b:b + 1], ref_lse, naive_lse)


@cuda_only
def test_sink_and_value_head_dim_with_caller_workspace():
    """fa_forward_workspace_size and fa_bwd_workspace_size cover the staged v / out / dout and the
    deterministic dsink terms."""
    torch.manual_seed(9)
    q, k, v = rand(2, 300, 4, 192), rand(2, 300, 4, 192), rand(2, 300, 4, 128)
    sink = sinks(4)
    out, lse, _ = abi.forward(q, k, v, learnable_sink=sink)
    dout = rand(*out.shape)
    dsink = torch.full_like(sink, float("nan"))
    dq, dk, dv = abi.backward(q, k, v, out, lse, dout, deterministic=True, use_workspace=True, dsink=dsink,
                              learnable_sink=sink)
    sync()
    for name, t in (("dq", dq), ("dk", dk), ("dv", dv), ("dsink", dsink)):
        assert not torch.isnan(t).any(), f"{name}: NaN with the caller's workspace"
    assert ON_CUDA
