"""GPU tests of the CUDA forward, through the C ABI (ctypes) with torch CUDA tensors.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 -m pytest -q tests/gpu

Every output is poisoned with NaN first; every comparison is against the fp64 reference with
FlashAttention's rule: max|ours - ref| <= 2 * max|naive same-precision - ref| + 1e-5.
Inputs are fresh random tensors (never zeros).

FA_TEST_DEVICE=cpu runs the same cases (minus the CUDA-specific and the heavy ones) on CPU tensors,
i.e. against the CPU backend: a quick check of the test code itself on a machine without a GPU.
"""
import re

import pytest
import torch

import abi
from reference import attention_ref

from harness import DEV, ON_CUDA, cu, cuda_only, heavy, kernels_launched, rand, sync


def assert_close(name, ours, ref, naive, atol=1e-5):
    ours64, ref64, naive64 = ours.double(), ref.double(), naive.double()
    assert not torch.isnan(ours64).any(), f"{name}: NaN in output (unwritten or bad arithmetic)"
    err = (ours64 - ref64).abs().max().item() if ours64.numel() else 0.0
    naive_err = (naive64 - ref64).abs().max().item() if ours64.numel() else 0.0
    assert err <= 2 * naive_err + atol, f"{name}: max|ours-ref| {err:.3e} > 2 x naive {naive_err:.3e} + {atol}"
    return err, naive_err


def assert_lse_close(name, ours, ref, naive, atol=1e-4):
    assert not torch.isnan(ours).any(), f"{name}: NaN in lse"
    ours64, ref64, naive64 = ours.double(), ref.double(), naive.double()
    inf_ours, inf_ref = torch.isinf(ours64), torch.isinf(ref64)
    assert torch.equal(inf_ours, inf_ref), f"{name}: -inf pattern differs ({inf_ours.sum()} vs {inf_ref.sum()})"
    if inf_ref.all():
        return
    finite = ~inf_ref
    err = (ours64[finite] - ref64[finite]).abs().max().item()
    naive_err = (naive64[finite] - ref64[finite]).abs().max().item()
    assert err <= 2 * naive_err + atol, f"{name}: lse err {err:.3e} > 2 x naive {naive_err:.3e} + {atol}"


def run_and_check(q, k, v, name="", check_lse=True, **kw):
    """Run ours, the fp64 reference and the naive one on the same inputs; compare out and lse."""
    ref_kw = {key: kw[key] for key in ("softmax_scale", "causal", "window", "softcap", "alibi_slopes", "dropout_p",
                                        "seed", "offset", "cu_seqlens_q", "cu_seqlens_k", "seqused_k") if key in kw}
    out, lse, _ = abi.forward(q, k, v, **kw)
    sync()
    ref_out, ref_lse, _ = attention_ref(q, k, v, precision=torch.float64, **ref_kw)
    naive_out, naive_lse, _ = attention_ref(q, k, v, precision=q.dtype, **ref_kw)
    errs = assert_close(f"{name} out", out, ref_out, naive_out)
    if check_lse:
        assert_lse_close(f"{name} lse", lse, ref_lse, naive_lse)
    return out, lse, errs


# ---------------------------------------------------------------------------------------------
# Priority 1: dense forward, non-causal and causal, hdim 64/128/256, bf16 and fp16.

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


@heavy
def test_long_sequences():
    """A sequence long enough to run many K/V blocks through the pipeline (and to expose races)."""
    torch.manual_seed(1)
    for causal in (False, True):
        for hdim in (64, 128, 256):
            q, k, v = (rand(1, 4096, 2, hdim) for _ in range(3))
            run_and_check(q, k, v, name=f"4k d{hdim} causal={causal}", causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("hdims", [(64, 64), (128, 128), (192, 192), (192, 128), (256, 256)],
                         ids=lambda d: f"{d[0]}_{d[1]}")
def test_q_by_tma_past_8k_keys(hdims, causal):
    """From 8k keys the Hopper forward loads Q by TMA where the tile form allows it (kv_tensor_maps.cuh,
    q_tma: d128's two Q buffers, d192 / d256's one tile a CTA), by cp.async in the others (d <= 64's
    three consumers, 192 / 128): a short query block count whose last tile ends past seqlen_q and,
    causal, whose first starts before row 0, GQA."""
    if not ON_CUDA:
        pytest.skip("a CUDA kernel's load path")
    d, dv = hdims
    torch.manual_seed(d + dv + causal)
    q, k, v = rand(2, 300, 4, d), rand(2, 8200, 2, d), rand(2, 8200, 2, dv)
    run_and_check(q, k, v, name=f"q by TMA d{d}/{dv} causal={causal}", causal=causal)


def test_deterministic():
    torch.manual_seed(2)
    q, k, v = (rand(2, 777, 4, 128) for _ in range(3))
    a, la, _ = abi.forward(q, k, v, causal=True)
    b, lb, _ = abi.forward(q, k, v, causal=True)
    assert torch.equal(a, b) and torch.equal(la, lb)


@pytest.mark.parametrize("early_scale", [2.0, 6.0], ids=["within_slack", "past_slack"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_running_max_moves_late(hdim, dtype, causal, early_scale):
    """Keys are visited from the last block down, and here the first keys score highest: with
    early_scale 2 a row's max grows by a few log2 units late in the row (within the Hopper
    forward's slack, where the running max stays and P exceeds 1), with 6 by tens (past it: O is
    rescaled after blocks that skipped the rescale)."""
    torch.manual_seed(hdim + int(early_scale) * 10 + causal)
    q, k, v = rand(1, 300, 2, hdim, dtype=dtype), rand(1, 1500, 2, hdim, dtype=dtype), rand(1, 1500, 2, hdim, dtype=dtype)
    k[:, :100] = (k[:, :100].float() * early_scale).to(dtype)
    run_and_check(q, k, v, name=f"d{hdim} early keys x{early_scale}", causal=causal)


# ---------------------------------------------------------------------------------------------
# Short masked problems on the Hopper forward's 192-row tile up to d64 (three consumers, each
# computing only the key blocks its 64 rows see: on the diagonal, and past the sequence's end where a
# tile holds its last rows). Each shape below gives the persistent CTAs several tiles each (24 heads:
# 144-264 tiles on 132 SMs). On Hopper the kernel's name (through torch.profiler) shows which tile
# ran: Sm90FwdTraits' last template argument is its rows.

SM90_TRAITS_ROWS = (re.compile(r"Sm90FwdTraits<\s*\d+,\s*\d+,\s*[\w:]+,\s*\d+,\s*(\d+)\s*>"),  # demangled
                    re.compile(r"Sm90FwdTraitsILi\d+ELi\d+EN\d+cutlass\d+\w+?_tELi\d+ELi(\d+)E"))  # mangled


def sm90_forward_rows(fn):
    """fn() under torch.profiler on CUDA: (its result, the rows of every Hopper forward kernel it
    launched). The set is empty where none ran (another kernel planned or forced, a build without
    sm_90a, no CUPTI)."""
    result, names = kernels_launched(fn)
    rows = set()
    for name in names:
        if "fwd_kernel_sm90" in name:
            match = SM90_TRAITS_ROWS[0].search(name) or SM90_TRAITS_ROWS[1].search(name)
            assert match, f"no tile rows in the kernel name {name!r}"
            rows.add(int(match.group(1)))
    return result, rows


SHORT_TILE_CASES = {  # name: (seqlen, keyword arguments, the planner's rows on Hopper)
    "causal_1k": (1024, dict(causal=True), 192),
    "causal_2k": (2048, dict(causal=True), 192),
    "full_1k": (1024, dict(), 192),                            # the last tile's 64 rows alone
    "window_1k": (1024, dict(window=(200, 16)), 192),         # a right edge, not causal
    "causal_softcap_1k": (1024, dict(causal=True, softcap=20.0), 192),  # the extras kernel
    "causal_1000x900": ((1000, 900), dict(causal=True), 192),  # partial blocks, bottom-right diagonal
    "causal_900x1000": ((900, 1000), dict(causal=True), 192),  # keys before the diagonal
    "full_1000x300": ((1000, 300), dict(), 192),               # the last tile's 40 rows alone, three key blocks
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", list(SHORT_TILE_CASES))
def test_d64_short_masked_tiles(case, dtype):
    seqlen, kw, rows = SHORT_TILE_CASES[case]
    if not ON_CUDA and max(seqlen if isinstance(seqlen, tuple) else (seqlen,)) > 1024:
        pytest.skip("too slow for the CPU check mode")
    sq, sk = seqlen if isinstance(seqlen, tuple) else (seqlen, seqlen)
    torch.manual_seed(sq + sk + len(kw))
    q, k, v = rand(2, sq, 12, 64, dtype=dtype), rand(2, sk, 12, 64, dtype=dtype), rand(2, sk, 12, 64, dtype=dtype)
    _, ran = sm90_forward_rows(lambda: run_and_check(q, k, v, name=f"d64 {case}", **kw))
    assert ran in (set(), {rows}), f"d64 {case}: the Hopper forward ran {sorted(ran)}-row tiles, planned {rows}"


def test_d64_lone_tiles_varlen():
    """Sequences whose last rows (at most 64) form a Hopper forward tile alone, over several key
    blocks, beside sequences whose last tiles hold two consumers' rows or see one or two blocks."""
    torch.manual_seed(31)
    lq, lk = [1000, 50, 7, 400, 250], [900, 700, 2, 1100, 129]
    q, k, v = rand(sum(lq), 6, 64), rand(sum(lk), 2, 64), rand(sum(lk), 2, 64)
    for causal in (False, True):
        run_and_check(q, k, v, name=f"varlen lone tiles causal={causal}", causal=causal, cu_seqlens_q=cu(lq),
                      cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk))


@pytest.mark.parametrize("hdim", [32, 96, 128, 192])
@pytest.mark.parametrize("shape", [(300, 300), (300, 520), (50, 700)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_end_aligned_tiles(hdim, shape):
    """Under a right window edge the Hopper forward's tiles end at a sequence's last 64-row block, its
    first tile starting before row 0: row counts whose last tile holds fewer rows than the others, at
    every tile height (128 rows at d96 and up, 192 at d32), causal and a local window."""
    sq, sk = shape
    torch.manual_seed(sq + sk + hdim)
    q, k, v = rand(2, sq, 4, hdim), rand(2, sk, 2, hdim), rand(2, sk, 2, hdim)
    run_and_check(q, k, v, name=f"d{hdim} {sq}x{sk} causal", causal=True)
    run_and_check(q, k, v, name=f"d{hdim} {sq}x{sk} window", window=(90, 20))


@pytest.mark.parametrize("case", [
    (512, 512, (-1, 0)),   # aligned causal: the first consumer of every tile narrows its diagonal block
    (512, 512, (-1, 1)),   # its last row sees key 64 of the block: must not narrow
    (512, 512, (-1, 63)),  # the block's second half seen by every row but the first
    (300, 512, (-1, 0)),   # bottom-right aligned: the diagonal falls mid-block
    (256, 192, None),      # 64 keys in the last block (every row): narrows without a mask edge
    (256, 193, None),      # 65: must not
    (97, 1, None),         # one key
    (512, 512, (40, 0)),   # a local window's left edge
], ids=lambda c: f"{c[0]}x{c[1]}_w{c[2]}")
def test_diagonal_block_half(case):
    """At d128 a consumer whose 64 rows see only the first half of their first key block computes
    that block's S and P V over the half (fwd_kernel_sm90.cuh, kNarrowDiagonal): right window edges
    and key counts on either side of the half, bf16 and fp16."""
    sq, sk, window = case
    torch.manual_seed(sq * 7 + sk)
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = rand(2, sq, 4, 128, dtype=dtype), rand(2, sk, 2, 128, dtype=dtype), rand(2, sk, 2, 128, dtype=dtype)
        kw = {} if window is None else {"window": window}
        run_and_check(q, k, v, name=f"{sq}x{sk} window {window} {dtype}", **kw)


# ---------------------------------------------------------------------------------------------
# Head dims: every compiled tile width and sizes in between (rounded up, predicated loads), and
# sizes that are not multiples of 8 (staged through padded copies).

@pytest.mark.parametrize("hdim", [1, 8, 16, 24, 32, 40, 59, 64, 72, 80, 96, 100, 112, 128, 136, 160, 192, 200, 224,
                                  248, 256])
def test_head_dims(hdim):
    torch.manual_seed(hdim)
    q, k, v = rand(2, 173, 4, hdim), rand(2, 261, 4, hdim), rand(2, 261, 4, hdim)
    run_and_check(q, k, v, name=f"d{hdim}", causal=hdim % 2 == 0)


# ---------------------------------------------------------------------------------------------
# Features, one by one.

@pytest.mark.parametrize("window", [(0, 0), (16, 0), (0, 16), (64, 32), (-1, 8), (8, -1), (300, 5)],
                         ids=lambda w: f"w{w[0]}_{w[1]}")
@pytest.mark.parametrize("seqlens", [(257, 257), (128, 400), (400, 128)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_local_window(window, seqlens):
    torch.manual_seed(sum(window) + seqlens[0])
    sq, sk = seqlens
    q, k, v = rand(2, sq, 2, 128), rand(2, sk, 2, 128), rand(2, sk, 2, 128)
    run_and_check(q, k, v, name=f"window {window}", window=window)


def test_local_window_fp16_causal_combination():
    torch.manual_seed(3)
    q, k, v = (rand(1, 333, 3, 64, dtype=torch.float16) for _ in range(3))
    run_and_check(q, k, v, name="causal+left window", causal=True, window=(40, -1))


@pytest.mark.parametrize("softcap", [5.0, 30.0])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [64, 128])
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


def test_softcap_alibi_window_together():
    torch.manual_seed(5)
    q, k, v = rand(2, 190, 4, 96), rand(2, 230, 4, 96), rand(2, 230, 4, 96)
    slopes = torch.rand(4, device=DEV) * 0.3
    run_and_check(q, k, v, name="all", window=(50, 20), softcap=20.0, alibi_slopes=slopes)


@pytest.mark.parametrize("heads", [(8, 2), (8, 1), (6, 3)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [64, 128])
def test_gqa(heads, causal, hdim):
    torch.manual_seed(heads[0] * 10 + heads[1])
    hq, hk = heads
    q, k, v = rand(2, 129, hq, hdim), rand(2, 257, hk, hdim), rand(2, 257, hk, hdim)
    run_and_check(q, k, v, name=f"gqa {heads}", causal=causal)


def test_softmax_scale():
    torch.manual_seed(6)
    q, k, v = (rand(2, 100, 2, 64) for _ in range(3))
    run_and_check(q, k, v, name="scale 0.3", softmax_scale=0.3)
    with pytest.raises(abi.FlashAttnError) as e:  # refused by validation: the max trick needs scale >= 0
        abi.forward(q, k, v, softmax_scale=-0.2)
    assert e.value.status == "FA_ERROR_INVALID_ARGUMENT" and "softmax_scale" in e.value.message


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


def test_varlen_seqused_k_and_window():
    torch.manual_seed(8)
    lq, lk = [64, 200, 33], [100, 220, 50]
    used = torch.tensor([60, 220, 0], device=DEV, dtype=torch.int32)
    q, k, v = rand(sum(lq), 3, 128), rand(sum(lk), 3, 128), rand(sum(lk), 3, 128)
    run_and_check(q, k, v, name="varlen seqused", window=(30, 10), cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk),
                  max_seqlen_q=max(lq), max_seqlen_k=max(lk), seqused_k=used)


def test_dense_seqused_k():
    torch.manual_seed(9)
    q, k, v = rand(3, 120, 2, 64), rand(3, 180, 2, 64), rand(3, 180, 2, 64)
    used = torch.tensor([180, 5, 77], device=DEV, dtype=torch.int32)
    run_and_check(q, k, v, name="seqused_k", causal=True, seqused_k=used)


def test_seqlen_k_zero():
    q = rand(2, 10, 2, 64)
    k = v = torch.empty(2, 0, 2, 64, device=DEV, dtype=torch.bfloat16)
    out, lse, _ = abi.forward(q, k, v)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.isinf(lse).all() and (lse < 0).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hdim", [64, 128, 256])
def test_dropout(causal, hdim):
    torch.manual_seed(10 + hdim)
    p, seed, offset = 0.17, 0x1234567890ABCDEF, 0x0000000500000003
    q, k, v = rand(2, 203, 3, hdim), rand(2, 317, 3, hdim), rand(2, 317, 3, hdim)
    kw = dict(causal=causal, dropout_p=p, seed=seed, offset=offset)
    out, lse, _ = run_and_check(q, k, v, name="dropout", **kw)
    # Exactly the same elements as the reference's Philox are dropped: the probabilities say so.
    _, _, probs = abi.forward(q, k, v, return_probs=True, **kw)
    _, _, ref_probs = attention_ref(q, k, v, want_probs=True, **kw)
    assert not torch.isnan(probs).any()
    significant = ref_probs.abs() > 1e-6
    assert torch.equal(torch.sign(probs)[significant], torch.sign(ref_probs)[significant].float())
    assert (probs.double() - ref_probs).abs().max().item() < 2e-3
    # Another seed drops other elements.
    out2, _, _ = abi.forward(q, k, v, causal=causal, dropout_p=p, seed=seed + 1, offset=offset)
    assert not torch.equal(out, out2)


def test_attn_probs_without_dropout():
    torch.manual_seed(11)
    q, k, v = rand(2, 130, 2, 64), rand(2, 150, 2, 64), rand(2, 150, 2, 64)
    used = torch.tensor([150, 40], device=DEV, dtype=torch.int32)
    _, _, probs = abi.forward(q, k, v, return_probs=True, causal=True, seqused_k=used)
    _, _, ref = attention_ref(q, k, v, want_probs=True, causal=True, seqused_k=used)
    assert (probs.double() - ref).abs().max().item() < 2e-3
    assert (probs >= 0).all()


# ---------------------------------------------------------------------------------------------
# Layouts: arbitrary strides with a contiguous head dim, packed qkv, head-major memory, outputs
# inside larger buffers (nothing outside the view may be written), misaligned storage.

def test_packed_qkv_and_head_major():
    torch.manual_seed(12)
    qkv = rand(2, 190, 3, 4, 128)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    run_and_check(q, k, v, name="packed qkv", causal=True)
    qh, kh, vh = (rand(2, 4, 190, 64).transpose(1, 2) for _ in range(3))  # (B, H, S, d) memory
    run_and_check(qh, kh, vh, name="head-major")


def test_output_view_in_larger_buffer():
    torch.manual_seed(13)
    q, k, v = (rand(2, 100, 3, 64) for _ in range(3))
    big = torch.full((2, 100, 5, 80), float("nan"), device=DEV, dtype=torch.bfloat16)
    big[:, :, :, 64:] = 7.0
    big[:, :, 3:] = 7.0
    out = big[:, :, :3, :64]
    abi.forward(q, k, v, out=out)
    ref, _, _ = attention_ref(q, k, v)
    naive, _, _ = attention_ref(q, k, v, precision=q.dtype)
    assert_close("view", out, ref, naive)
    assert (big[:, :, :, 64:] == 7.0).all() and (big[:, :, 3:] == 7.0).all(), "wrote outside the output view"


def test_misaligned_and_odd_strides():
    torch.manual_seed(14)
    base = rand(2 * 90 * 3 * 72 + 1)
    q = base[1:].view(2, 90, 3, 72)  # 2-byte offset: not 16-byte aligned -> staged
    k = rand(2, 90, 3, 75)[..., :72]  # row stride 225 elements: not a multiple of 8 -> staged
    v = rand(2, 90, 3, 72)
    run_and_check(q, k, v, name="misaligned", causal=True)


@heavy
def test_large_grid_batch_times_heads():
    """batch * heads > 65535: the grid is one-dimensional."""
    torch.manual_seed(15)
    B, H, S, d = 1100, 64, 3, 64
    q, k, v = (rand(B, S, H, d) for _ in range(3))
    out, lse, _ = abi.forward(q, k, v, causal=True)
    # Fold the batch into heads for a vectorised reference (no per-batch features here).
    fold = lambda t: t.permute(1, 0, 2, 3).reshape(1, S, B * H, d)
    ref, _, _ = attention_ref(fold(q), fold(k), fold(v), causal=True)
    naive, _, _ = attention_ref(fold(q), fold(k), fold(v), causal=True, precision=q.dtype)
    assert_close("large grid", fold(out), ref, naive)


# ---------------------------------------------------------------------------------------------
# Errors: clear status and message, never a crash.

@cuda_only
def test_errors_name_the_argument():
    q, k, v = (rand(1, 16, 2, 64) for _ in range(3))
    with pytest.raises(abi.FlashAttnError) as e:
        abi.forward(q, k.cpu(), v)
    assert e.value.status == "FA_ERROR_INVALID_ARGUMENT" and "k.data" in e.value.message
    with pytest.raises(abi.FlashAttnError) as e:
        out = torch.empty_like(q)
        abi.call_forward(abi.make_fwd_params(q, k, v, out, lse=torch.empty(1, 2, 16)))
    assert "softmax_lse" in e.value.message
    with pytest.raises(abi.FlashAttnError) as e:
        abi.forward(q.float(), k.float(), v.float())
    assert e.value.status == "FA_ERROR_UNSUPPORTED"
    with pytest.raises(abi.FlashAttnError) as e:
        abi.forward(q, k, v, dropout_p=1.0)
    assert e.value.status == "FA_ERROR_INVALID_ARGUMENT" and "dropout_p" in e.value.message


@cuda_only
def test_malformed_cu_seqlens_on_device_do_not_fault():
    """Device-side cu_seqlens cannot be validated on the host: the kernel clamps what it reads (no
    fault, the context stays usable), writes NaN for the sequences whose values are out of range and
    records the first such value for fa_check_device_faults (docs/semantics.md)."""
    q, k, v = rand(50, 2, 64), rand(40, 2, 64), rand(40, 2, 64)
    bad_q = torch.tensor([0, 30, 10, 1000], device=DEV, dtype=torch.int32)   # decreasing, past total_q
    bad_k = torch.tensor([-5, 100000, 20, 40], device=DEV, dtype=torch.int32)
    out = torch.zeros_like(q)
    abi.forward(q, k, v, out=out, cu_seqlens_q=bad_q, cu_seqlens_k=bad_k, max_seqlen_q=64, max_seqlen_k=64)
    sync()  # raises if the kernel faulted
    # Sequence 2 (rows [10, 50): its end is past total_q) is NaN; sequence 0's keys start at -5.
    assert out[10:50].isnan().all() and out[0:30].isnan().all()
    status = abi.lib.check_device_faults(torch.cuda.current_device(), None)
    assert status == abi.C.STATUS_INVALID_ARGUMENT, status
    assert "cu_seqlens" in abi.lib.last_error().decode()
    assert abi.lib.check_device_faults(torch.cuda.current_device(), None) == 0  # reported once
