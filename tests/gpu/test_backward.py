"""GPU tests of the CUDA backward, through the C ABI (ctypes) with torch CUDA tensors.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 -m pytest -q tests/gpu/test_backward.py

Gradients dq, dk, dv (poisoned with NaN first) against torch autograd through the fp64 reference,
with FlashAttention's rule for gradients: max|ours - ref| <= 3 * max|naive same-precision - ref|
+ floor, the naive one being autograd through the same reference computed in bf16/fp16. The
backward runs on the library's own forward out and lse, as a training step would.

FA_TEST_DEVICE=cpu runs the same cases (minus the CUDA-specific and heavy ones) on the CPU backend.
"""
import re

import pytest
import torch

import abi
from reference import attention_ref

from harness import DEV, ON_CUDA, cu, cuda_only, heavy, kernels_launched, rand, sync

REF_KEYS = ("softmax_scale", "causal", "window", "softcap", "alibi_slopes", "dropout_p", "seed", "offset",
            "cu_seqlens_q", "cu_seqlens_k", "seqused_k")


def reference_grads(q, k, v, dout, precision, **kw):
    """Autograd through attention_ref in `precision` (fp64: the reference; q.dtype: naive)."""
    leaves = [t.detach().to(precision).requires_grad_(True) for t in (q, k, v)]
    out, _, _ = attention_ref(*leaves, precision=precision, **{key: kw[key] for key in REF_KEYS if key in kw})
    out.backward(dout.to(precision))
    return [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves]


def floor(dtype, magnitude):
    base = 1e-5 if dtype == torch.float16 else 5e-5
    return base * max(1.0, magnitude)


def assert_grad_close(name, ours, ref, naive, rows_used=None):
    assert not torch.isnan(ours).any(), f"{name}: NaN (unwritten element or bad arithmetic)"
    ours64, ref64, naive64 = ours.double(), ref.double(), naive.double()
    if rows_used is not None:
        ours64, ref64, naive64 = ours64[rows_used], ref64[rows_used], naive64[rows_used]
    if ours64.numel() == 0:
        return
    err = (ours64 - ref64).abs().max().item()
    naive_err = (naive64 - ref64).abs().max().item()
    bound = 3 * naive_err + floor(ours.dtype, ref64.abs().max().item())
    assert err <= bound, f"{name}: max|ours-ref| {err:.3e} > 3 x naive {naive_err:.3e} + floor"


def run_and_check(q, k, v, name="", deterministic=False, use_workspace=False, dout_scale=1.0, **kw):
    out, lse, _ = abi.forward(q, k, v, **kw)
    dout = rand(*out.shape, dtype=q.dtype, scale=dout_scale)
    dq, dk, dv = abi.backward(q, k, v, out, lse, dout, deterministic=deterministic, use_workspace=use_workspace,
                              **kw)
    sync()
    ref = reference_grads(q, k, v, dout, torch.float64, **kw)
    naive = reference_grads(q, k, v, dout, q.dtype, **kw)
    for what, ours, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_grad_close(f"{name} {what}", ours, r, n)
    return (dq, dk, dv), (out, lse, dout)


# ---------------------------------------------------------------------------------------------
# Dense: the forward's shapes, non-causal and causal, hdim 64/128/256, both dtypes.

DENSE_SHAPES = [(1, 1), (1, 300), (97, 97), (128, 128), (113, 211), (211, 113), (512, 512), (1024, 1000)]


@pytest.mark.parametrize("seqlens", DENSE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_dense(hdim, dtype, causal, seqlens):
    torch.manual_seed(hdim * 1000 + seqlens[0] * 7 + seqlens[1] + causal)
    sq, sk = seqlens
    q, k, v = rand(2, sq, 3, hdim, dtype=dtype), rand(2, sk, 3, hdim, dtype=dtype), rand(2, sk, 3, hdim, dtype=dtype)
    run_and_check(q, k, v, name=f"d{hdim} {sq}x{sk}", causal=causal)


@pytest.mark.parametrize("hdim", [32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256])
def test_head_dims(hdim):
    torch.manual_seed(hdim)
    q, k, v = rand(2, 173, 4, hdim), rand(2, 261, 4, hdim), rand(2, 261, 4, hdim)
    run_and_check(q, k, v, name=f"d{hdim}", causal=hdim % 2 == 0)


@heavy
def test_long_sequences():
    torch.manual_seed(1)
    for causal in (False, True):
        for hdim in (64, 128, 256):
            q, k, v = (rand(1, 4096, 2, hdim) for _ in range(3))
            run_and_check(q, k, v, name=f"4k d{hdim} causal={causal}", causal=causal)


# ---------------------------------------------------------------------------------------------
# Features.

@pytest.mark.parametrize("window", [(0, 0), (16, 0), (0, 16), (64, 32), (-1, 8), (8, -1), (300, 5)],
                         ids=lambda w: f"w{w[0]}_{w[1]}")
@pytest.mark.parametrize("seqlens", [(257, 257), (128, 400), (400, 128)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_local_window(window, seqlens):
    torch.manual_seed(sum(window) + seqlens[0])
    sq, sk = seqlens
    q, k, v = rand(2, sq, 2, 128), rand(2, sk, 2, 128), rand(2, sk, 2, 128)
    run_and_check(q, k, v, name=f"window {window}", window=window)


@pytest.mark.parametrize("softcap", [5.0, 30.0])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_softcap(softcap, causal, hdim):
    torch.manual_seed(int(softcap) + hdim)
    q, k, v = rand(2, 200, 3, hdim, scale=2.0), rand(2, 300, 3, hdim, scale=2.0), rand(2, 300, 3, hdim)
    run_and_check(q, k, v, name=f"softcap {softcap}", causal=causal, softcap=softcap)


@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_alibi(per_batch, causal):
    torch.manual_seed(4)
    B, H = 2, 4
    q, k, v = rand(B, 150, H, 128), rand(B, 190, H, 128), rand(B, 190, H, 128)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=DEV)
    if per_batch:
        slopes = torch.stack([slopes, slopes * 0.5]).contiguous()
    run_and_check(q, k, v, name="alibi", causal=causal, alibi_slopes=slopes)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [32, 64, 128, 256])
def test_dropout(causal, hdim):
    torch.manual_seed(10 + hdim)
    q, k, v = rand(2, 203, 3, hdim), rand(2, 317, 3, hdim), rand(2, 317, 3, hdim)
    run_and_check(q, k, v, name="dropout", causal=causal, dropout_p=0.17, seed=0x1234567890ABCDEF,
                  offset=0x0000000500000003)


def test_everything_together():
    torch.manual_seed(5)
    q, k, v = rand(2, 190, 4, 96), rand(2, 230, 2, 96), rand(2, 230, 2, 96)
    slopes = torch.rand(4, device=DEV) * 0.3
    run_and_check(q, k, v, name="all", window=(50, 20), softcap=20.0, alibi_slopes=slopes, dropout_p=0.1, seed=3)


@pytest.mark.parametrize("heads", [(8, 2), (8, 1), (6, 3)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_gqa(heads, causal, hdim):
    torch.manual_seed(heads[0] * 10 + heads[1])
    hq, hk = heads
    q, k, v = rand(2, 129, hq, hdim), rand(2, 257, hk, hdim), rand(2, 257, hk, hdim)
    run_and_check(q, k, v, name=f"gqa {heads}", causal=causal)


# The GQA schemes of the Hopper backward (overrides backward_gqa): a CTA per KV head walking the
# group's query heads, a CTA per pair of query heads adding its sums into fp32 rows per KV head (16 / 2
# heads: four CTAs add into each row), and the fp32 dK/dV scratch (added per KV head outside
# deterministic mode); 600 queries so that d128 runs the Hopper kernel.
@pytest.mark.parametrize("scheme", ["kv_major", "kv_pairs", "scratch"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_gqa_schemes(scheme, causal, hdim, overrides):
    torch.manual_seed(hdim + causal)
    overrides(f"backward_gqa={scheme}")
    hq = 16 if scheme == "kv_pairs" else 6
    q, k, v = rand(2, 600, hq, hdim), rand(2, 700, 2, hdim), rand(2, 700, 2, hdim)
    run_and_check(q, k, v, name=f"gqa {scheme}", causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
@pytest.mark.parametrize("hdim", [64, 128])
def test_varlen(causal, heads, hdim):
    torch.manual_seed(7 + causal)
    lq, lk = [5, 300, 0, 128, 1, 77], [17, 250, 9, 128, 0, 300]
    hq, hk = heads
    q, k, v = rand(sum(lq), hq, hdim), rand(sum(lk), hk, hdim), rand(sum(lk), hk, hdim)
    run_and_check(q, k, v, name="varlen", causal=causal, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk),
                  max_seqlen_q=max(lq), max_seqlen_k=max(lk))


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_varlen_gqa_pairs(hdim, deterministic):
    """Causal GQA with groups of 8 walks pairs of query heads (the planner's choice at any length;
    deterministic: up to 8192 keys at d128, rows per pair; d256: the fp32 dK / dV rows of the
    scratch, key blocks inside a sequence and ones that end past it): ragged and empty sequences on
    either side, 16 / 2 heads."""
    torch.manual_seed(11 + hdim + deterministic)
    lq, lk = [600, 0, 130, 513, 7], [650, 40, 0, 513, 300]
    q, k, v = rand(sum(lq), 16, hdim), rand(sum(lk), 2, hdim), rand(sum(lk), 2, hdim)
    run_and_check(q, k, v, name="varlen gqa pairs", causal=True, deterministic=deterministic, cu_seqlens_q=cu(lq),
                  cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk))


def test_varlen_seqused_k_and_window():
    torch.manual_seed(8)
    lq, lk = [64, 200, 33], [100, 220, 50]
    used = torch.tensor([60, 220, 0], device=DEV, dtype=torch.int32)
    q, k, v = rand(sum(lq), 3, 128), rand(sum(lk), 3, 128), rand(sum(lk), 3, 128)
    (dq, dk, dv), _ = run_and_check(q, k, v, name="varlen seqused", window=(30, 10), cu_seqlens_q=cu(lq),
                                    cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk), seqused_k=used)
    # Keys past seqused_k get zero gradients.
    assert (dk[60:100] == 0).all() and (dv[320:370] == 0).all()


# ---------------------------------------------------------------------------------------------
# Modes and layouts.

def test_deterministic_bitwise_over_50_runs():
    torch.manual_seed(2)
    q, k, v = (rand(2, 777, 4, 128) for _ in range(3))
    kw = dict(causal=True)
    out, lse, _ = abi.forward(q, k, v, **kw)
    dout = rand(*out.shape)
    first = abi.backward(q, k, v, out, lse, dout, deterministic=True, **kw)
    for _ in range(49):
        again = abi.backward(q, k, v, out, lse, dout, deterministic=True, **kw)
        for a, b in zip(first, again):
            assert torch.equal(a, b)
    run_and_check(q, k, v, name="deterministic", deterministic=True, **kw)


# Deterministic mode's ordered dQ (the Hopper kernel: each query block's dQ takes the key blocks'
# additions in a fixed order, counted per query block; docs/cuda-backend.md): bitwise
# identical over runs and the reference's gradients where the counting is delicate, and the chunked
# scheme (deterministic_dq=chunks) as a second opinion. d128 cases have >= 512 queries, so that they
# run the Hopper kernel. (Elsewhere, or on the CPU backend, the same cases check the other schemes.)
ORDERED_CASES = {
    "causal_ragged": dict(shape=(2, 777, 1000, 3, 3), causal=True),
    "causal_more_queries": dict(shape=(2, 1000, 600, 3, 3), causal=True),
    "full_ragged": dict(shape=(2, 700, 650, 3, 3)),
    "window": dict(shape=(1, 900, 900, 2, 2), window=(200, 70)),
    "window_left_only": dict(shape=(1, 700, 900, 2, 2), window=(130, -1)),
    "window_right_only": dict(shape=(1, 650, 900, 2, 2), window=(-1, 40)),
    "gqa_causal": dict(shape=(2, 600, 700, 6, 2), causal=True),
    "many_key_blocks": dict(shape=(1, 2048, 2048, 2, 2), causal=True),
}


def ordered_inputs(hdim, shape):
    b, sq, sk, h, hk = shape
    return rand(b, sq, h, hdim), rand(b, sk, hk, hdim), rand(b, sk, hk, hdim)


def assert_bitwise_over_runs(q, k, v, runs, **kw):
    out, lse, _ = abi.forward(q, k, v, **kw)
    dout = rand(*out.shape, dtype=q.dtype)
    first = abi.backward(q, k, v, out, lse, dout, deterministic=True, **kw)
    for run in range(1, runs):
        again = abi.backward(q, k, v, out, lse, dout, deterministic=True, **kw)
        for what, a, b in zip(("dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), f"{what} differs on run {run}"


@pytest.mark.parametrize("scheme", ["ordered", "chunks"])
@pytest.mark.parametrize("case", list(ORDERED_CASES))
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_deterministic_ordered_dq(hdim, case, scheme, overrides):
    if case == "many_key_blocks" and not ON_CUDA:
        pytest.skip("too slow for the CPU check mode")
    torch.manual_seed(hdim + len(case))
    overrides(f"deterministic_dq={scheme}")
    kw = dict(ORDERED_CASES[case])
    q, k, v = ordered_inputs(hdim, kw.pop("shape"))
    assert_bitwise_over_runs(q, k, v, 10 if ON_CUDA else 2, **kw)
    run_and_check(q, k, v, name=f"deterministic {scheme} {case}", deterministic=True, **kw)


def test_deterministic_chunks_on_the_hopper_kernel_d256(overrides):
    """d256's chunked dQ forced onto the Hopper kernel (automatic runs the mma.sync kernel for it): 8
    (sequence, head) items make 16 chunks of 24 key blocks, so CTAs walk two key blocks and add to
    the same rows once per key block (the staged dQ's reductions of a key block complete before the
    next key block's), and 700 queries end in a partial block (added from the stage by the
    consumers)."""
    if not ON_CUDA:
        pytest.skip("the Hopper kernel's scheme; the CPU backend's chunks are test_deterministic_ordered_dq's")
    torch.manual_seed(77)
    overrides("deterministic_dq=chunks,backward_kernel=sm90")
    q, k, v = ordered_inputs(256, (1, 700, 1500, 8, 8))
    assert_bitwise_over_runs(q, k, v, 10)
    run_and_check(q, k, v, name="deterministic chunks, Hopper kernel, d256", deterministic=True)


SM90_BWD_INSTANCE = (re.compile(r"bwd_kernel_sm90(?:_pds)?<.*>,\s*(false|true),\s*(false|true),\s*(false|true)\s*>"),  # demangled
                     re.compile(r"bwd_kernel_sm90(?:_pds)?I.*?ELb([01])ELb([01])ELb([01])EEEv"))  # mangled


def sm90_backward_instances(fn):
    """fn() under torch.profiler on CUDA: (its result, the (extras, group walk, ordered dQ) flags of
    every Hopper backward kernel it launched, either schedule; empty where none ran or no CUPTI)."""
    result, names = kernels_launched(fn)
    found = set()
    for name in names:
        if "bwd_kernel_sm90" in name:
            match = SM90_BWD_INSTANCE[0].search(name) or SM90_BWD_INSTANCE[1].search(name)
            assert match, f"no instance flags in the kernel name {name!r}"
            found.add(tuple(flag in ("1", "true") for flag in match.groups()))
    return result, found


@pytest.mark.parametrize("gqa", ["kv_major", "kv_pairs", "scratch"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("hdim", [128, 256])
def test_deterministic_ordered_dq_gqa(hdim, causal, gqa, overrides):
    """GQA at d128 and d256: the ordered dQ on the walk over the group (a CTA adds to each of its 4
    query heads in turn, on that head's counters; automatic up to 8192 keys, at d256 not under a
    causal mask), on the walk over pairs of heads (16 / 2 heads: four CTAs per KV head, each storing its
    dK / dV in rows of its own, summed in pair order afterwards), and on the scratch."""
    torch.manual_seed(40 + causal + hdim)
    overrides(f"deterministic_dq=ordered,backward_gqa={gqa}")
    q, k, v = ordered_inputs(hdim, (1, 520, 900, 16 if gqa == "kv_pairs" else 8, 2))  # >= 512 queries: the Hopper kernel
    assert_bitwise_over_runs(q, k, v, 10 if ON_CUDA else 2, causal=causal)
    _, ran = sm90_backward_instances(
        lambda: run_and_check(q, k, v, name=f"deterministic ordered GQA {gqa}", deterministic=True, causal=causal))
    walk = gqa != "scratch"
    assert ran in (set(), {(False, walk, True)}), f"ran the Hopper backward instances {sorted(ran)}"


def test_deterministic_pairs_at_groups_of_four(overrides):
    """Deterministic mode walks pairs of query heads by itself at groups of 4 past 1024 keys under a
    causal mask (8 / 2 heads, 1100 keys: two CTAs per KV head and key block, each storing its dK / dV
    in rows of its own, summed in pair order): bitwise over runs, within the reference's bound, and
    with the pairs' workspace (the whole group's walk needs no dK / dV rows)."""
    torch.manual_seed(46)
    q, k, v = ordered_inputs(128, (1, 1100, 1100, 8, 2))
    assert_bitwise_over_runs(q, k, v, 10 if ON_CUDA else 2, causal=True)
    (grads, (out, lse, dout)), ran = sm90_backward_instances(
        lambda: run_and_check(q, k, v, name="deterministic pairs at groups of 4", deterministic=True, causal=True))
    assert ran in (set(), {(False, True, True)}), f"ran the Hopper backward instances {sorted(ran)}"
    if ran:  # the Hopper backward: its workspace is the pairs' (rows per pair), not the whole walk's
        params = abi.make_bwd_params(q, k, v, out, lse, dout, *grads, deterministic=True, causal=True)
        automatic = abi.lib.bwd_workspace_size(params)
        overrides("backward_gqa=kv_pairs")
        pairs = abi.lib.bwd_workspace_size(params)
        overrides("backward_gqa=kv_major")
        walk = abi.lib.bwd_workspace_size(params)
        assert automatic == pairs > walk, (automatic, pairs, walk)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_deterministic_ordered_dq_varlen(hdim, causal, overrides):
    """Empty sequences on either side, seqused_k shorter than the keys (key blocks that meet no
    query block), ragged lengths with and without a causal mask; GQA (4 / 2 heads), so that d128
    and, without the mask, d256 walk the group, where the blocks that end past a packed sequence
    count on the current head's counters."""
    torch.manual_seed(30 + hdim + causal)
    overrides("deterministic_dq=ordered")  # automatic as well
    lq, lk = [600, 0, 513, 64, 1, 300], [650, 300, 0, 700, 200, 130]
    used = torch.tensor([650, 100, 0, 333, 200, 0], device=DEV, dtype=torch.int32)
    q, k, v = rand(sum(lq), 4, hdim), rand(sum(lk), 2, hdim), rand(sum(lk), 2, hdim)
    kw = dict(causal=causal, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk),
              seqused_k=used)
    assert_bitwise_over_runs(q, k, v, 10 if ON_CUDA else 2, **kw)
    _, ran = sm90_backward_instances(lambda: run_and_check(q, k, v, name="deterministic varlen", deterministic=True, **kw))
    assert all(ordered for _, _, ordered in ran), f"ran the Hopper backward instances {sorted(ran)}"


@cuda_only
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "default"])
def test_reused_workspace(deterministic):
    """The scratch lives in the caller's workspace (the fp32 dQ sums, and in deterministic mode the
    ordered dQ's counters): zeroed by every call, so a workspace left with other values, or with
    the previous call's, gives gradients within the reference's bound, and in deterministic mode
    the same bits."""
    torch.manual_seed(31)
    q, k, v = (rand(2, 700, 4, 128) for _ in range(3))
    out, lse, _ = abi.forward(q, k, v, causal=True)
    dout = rand(*out.shape)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    params = abi.make_bwd_params(q, k, v, out, lse, dout, dq, dk, dv, causal=True, deterministic=deterministic)
    size = abi.lib.bwd_workspace_size(params)
    workspace = torch.empty(size, dtype=torch.uint8, device=q.device)
    params.workspace, params.workspace_size = workspace.data_ptr(), size
    ref = reference_grads(q, k, v, dout, torch.float64, causal=True)
    naive = reference_grads(q, k, v, dout, q.dtype, causal=True)
    results = []
    for fill in (0, 0x01, 0x7f, None):  # None: as the previous call left it
        if fill is not None:
            workspace.fill_(fill)
        abi.lib.check(abi.lib.backward(params))
        sync()
        results.append([t.clone() for t in (dq, dk, dv)])
        for what, ours, r, n in zip(("dq", "dk", "dv"), results[-1], ref, naive):
            assert_grad_close(f"workspace filled with {fill} {what}", ours, r, n)
    if deterministic:
        for other in results[1:]:
            for a, b in zip(results[0], other):
                assert torch.equal(a, b)


@cuda_only
def test_race_batch_60():
    """Many CTAs: dk, dv bitwise stable over repeats (no atomics), dq within tolerance."""
    torch.manual_seed(60)
    q, k, v = (rand(60, 200, 4, 64) for _ in range(3))
    (dq0, dk0, dv0), (out, lse, dout) = run_and_check(q, k, v, name="batch 60", causal=True)
    for _ in range(20):
        dq, dk, dv = abi.backward(q, k, v, out, lse, dout, causal=True)
        assert torch.equal(dk, dk0) and torch.equal(dv, dv0)
        assert (dq.double() - dq0.double()).abs().max().item() < 1e-2 * dq0.double().abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_large_magnitude_inputs(dtype):
    torch.manual_seed(16)
    scale = 6.0 if dtype == torch.float16 else 12.0
    q, k, v = (rand(2, 257, 2, 128, dtype=dtype, scale=scale) for _ in range(3))
    (dq, dk, dv), _ = run_and_check(q, k, v, name="large inputs", causal=True, dout_scale=scale)
    for t in (dq, dk, dv):
        assert torch.isfinite(t).all()


def test_caller_workspace_matches_library_scratch():
    torch.manual_seed(17)
    q, k, v = rand(2, 150, 4, 59, dtype=torch.float16), rand(2, 230, 2, 59, dtype=torch.float16), \
        rand(2, 230, 2, 59, dtype=torch.float16)
    out, lse, _ = abi.forward(q, k, v, causal=True)
    dout = rand(*out.shape, dtype=torch.float16)
    ours = abi.backward(q, k, v, out, lse, dout, causal=True, deterministic=True)
    theirs = abi.backward(q, k, v, out, lse, dout, causal=True, deterministic=True, use_workspace=True)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    run_and_check(q, k, v, name="workspace", causal=True, use_workspace=True)
    if not ON_CUDA:  # the CPU backend takes no workspace (size 0)
        return
    # A workspace that is large enough but not 16-byte aligned is refused by name, before any work.
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    params = abi.make_bwd_params(q, k, v, out, lse, dout, dq, dk, dv, causal=True, deterministic=True)
    size = abi.lib.bwd_workspace_size(params)
    assert size > 0  # deterministic: dQ's fp32 splits live there
    big = torch.empty(size + 64, dtype=torch.uint8, device=q.device)
    params.workspace, params.workspace_size = big.data_ptr() + 8, size
    assert abi.lib.backward(params) == abi.C.STATUS_INVALID_ARGUMENT
    assert "workspace must be 16-byte aligned" in abi.lib.last_error().decode()


def test_strided_and_misaligned_layouts():
    torch.manual_seed(14)
    qkv = rand(2, 190, 3, 4, 128)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    run_and_check(q, k, v, name="packed qkv", causal=True)
    base = rand(2 * 90 * 3 * 72 + 1)
    q = base[1:].view(2, 90, 3, 72)       # not 16-byte aligned -> staged
    k = rand(2, 90, 3, 75)[..., :72]      # row stride 225 -> staged
    v = rand(2, 90, 3, 72)
    run_and_check(q, k, v, name="misaligned", causal=True)


def test_gradients_in_larger_buffers():
    torch.manual_seed(13)
    q, k, v = (rand(2, 100, 3, 64) for _ in range(3))
    out, lse, _ = abi.forward(q, k, v)
    dout = rand(*out.shape)
    bigs = [torch.full((2, 100, 5, 80), 7.0, device=DEV, dtype=torch.bfloat16) for _ in range(3)]
    views = [b[:, :, :3, :64] for b in bigs]
    for t in views:
        t.fill_(float("nan"))
    abi.backward(q, k, v, out, lse, dout, dq=views[0], dk=views[1], dv=views[2])
    ref = reference_grads(q, k, v, dout, torch.float64)
    naive = reference_grads(q, k, v, dout, q.dtype)
    for what, ours, r, n in zip(("dq", "dk", "dv"), views, ref, naive):
        assert_grad_close(f"view {what}", ours, r, n)
    for b in bigs:
        assert (b[:, :, :, 64:] == 7.0).all() and (b[:, :, 3:] == 7.0).all(), "wrote outside the gradient view"


def test_empty_sides():
    q = rand(2, 10, 2, 64)
    k = v = torch.empty(2, 0, 2, 64, device=DEV, dtype=torch.bfloat16)
    out, lse, _ = abi.forward(q, k, v)
    dq, dk, dv = abi.backward(q, k, v, out, lse, rand(2, 10, 2, 64))
    assert torch.equal(dq, torch.zeros_like(dq))
    q0 = torch.empty(2, 0, 2, 64, device=DEV, dtype=torch.bfloat16)
    k, v = rand(2, 10, 2, 64), rand(2, 10, 2, 64)
    out, lse, _ = abi.forward(q0, k, v)
    _, dk, dv = abi.backward(q0, k, v, out, lse, torch.empty_like(q0))
    assert torch.equal(dk, torch.zeros_like(dk)) and torch.equal(dv, torch.zeros_like(dv))


@heavy
def test_large_grid_batch_times_heads():
    """batch * heads > 65535: the grid is one-dimensional."""
    torch.manual_seed(15)
    B, H, S, d = 1100, 64, 3, 64
    q, k, v = (rand(B, S, H, d) for _ in range(3))
    out, lse, _ = abi.forward(q, k, v, causal=True)
    dout = rand(*out.shape)
    dq, dk, dv = abi.backward(q, k, v, out, lse, dout, causal=True)
    fold = lambda t: t.permute(1, 0, 2, 3).reshape(1, S, B * H, d)
    ref = reference_grads(fold(q), fold(k), fold(v), fold(dout), torch.float64, causal=True)
    naive = reference_grads(fold(q), fold(k), fold(v), fold(dout), q.dtype, causal=True)
    for what, ours, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_grad_close(f"large grid {what}", fold(ours), r, n)
