"""Index arrays holding values out of range (docs/semantics.md, "Indices in device memory").

Every class of bad value (past the end, negative, decreasing cu_seqlens, cu_seqlens past the tensor,
a length past max_seqlen, capacity overflow with and without appended keys), on every backend:
- CPU: the call raises FlashAttnArgumentError naming the array and the element, and writes nothing.
- CUDA: the kernels clamp what they read, so no access leaves the tensors (run this file under
  `compute-sanitizer --tool memcheck` on a GPU: 0 errors); the call returns; the sequence the value
  belongs to has NaN output and lse; the other sequences are exactly what a good call gives; no cache
  row outside the sequence's own valid pages changes; flashattn.check_device_faults() then raises,
  naming the array, once; and the next good call on the same CUDA context gives the right answer.
"""

import pytest
import torch

import flashattn
from helpers import DEVICES, FLOOR, assert_within, randn
from reference import attention_ref

DTYPE = torch.bfloat16
HEADS, HEADS_K, DIM = 4, 2, 64
PAGE, PAGES_PER_SEQ = 16, 4          # capacity 64 rows per sequence
NUM_BLOCKS = 3 * PAGES_PER_SEQ + 2   # two spare blocks in the pool
LENS = [20, 30, 40]


def _kvcache_problem(device, paged, append):
    g = torch.Generator().manual_seed(1)
    q = randn(3, 1, HEADS, DIM, dtype=DTYPE, device=device)
    if paged:
        # Block 0 is sequence 0's first page: a write clamped to block 0 would show in sequence 0.
        order = torch.cat([torch.tensor([0]), 1 + torch.randperm(NUM_BLOCKS - 1, generator=g)])
        table = order[:3 * PAGES_PER_SEQ].view(3, PAGES_PER_SEQ).to(torch.int32).to(device)
        k_cache = randn(NUM_BLOCKS, PAGE, HEADS_K, DIM, dtype=DTYPE, device=device)
        extra = dict(block_table=table)
    else:
        k_cache = randn(4, PAGE * PAGES_PER_SEQ, HEADS_K, DIM, dtype=DTYPE, device=device)
        extra = dict(cache_batch_idx=torch.tensor([2, 0, 3], dtype=torch.int32, device=device),
                     cache_leftpad=torch.tensor([1, 5, 0], dtype=torch.int32, device=device))
    v_cache = randn(*k_cache.shape, dtype=DTYPE, device=device)
    new = dict(k=randn(3, 1, HEADS_K, DIM, dtype=DTYPE, device=device),
               v=randn(3, 1, HEADS_K, DIM, dtype=DTYPE, device=device)) if append else {}
    seqlens = torch.tensor(LENS, dtype=torch.int32, device=device)
    return q, k_cache, v_cache, dict(cache_seqlens=seqlens, causal=True, **new, **extra)


def _set(name, index, value):
    def edit(args):
        args[name] = args[name].clone()
        args[name][index] = value
    return edit


# (id, paged, append, edit of the call's arguments, the sequence it breaks, what the message names)
KVCACHE_CASES = [
    ("block_table_past_the_pool", True, True, _set("block_table", (1, 0), NUM_BLOCKS), 1, r"block_table\[1\]\[0\]"),
    ("block_table_negative", True, True, _set("block_table", (1, 1), -1), 1, r"block_table\[1\]\[1\]"),
    ("block_table_negative_on_the_appended_page", True, True, _set("block_table", (2, 2), -7), 2,
     r"block_table\[2\]\[2\]"),
    ("block_table_huge", True, False, _set("block_table", (0, 1), 2**31 - 1), 0, r"block_table\[0\]\[1\]"),
    ("cache_seqlens_past_the_table", True, False, _set("cache_seqlens", 1, 65), 1, r"cache_seqlens\[1\]"),
    ("cache_seqlens_appended_keys_past_the_table", True, True, _set("cache_seqlens", 1, 64), 1,
     r"cache_seqlens\[1\]"),
    ("cache_seqlens_negative", True, True, _set("cache_seqlens", 2, -3), 2, r"cache_seqlens\[2\]"),
    ("cache_seqlens_past_the_cache", False, True, _set("cache_seqlens", 0, 64), 0, r"cache_seqlens\[0\]"),
    ("cache_batch_idx_past_the_cache", False, True, _set("cache_batch_idx", 1, 4), 1, r"cache_batch_idx\[1\]"),
    ("cache_batch_idx_negative", False, False, _set("cache_batch_idx", 2, -1), 2, r"cache_batch_idx\[2\]"),
    ("cache_leftpad_past_the_length", False, True, _set("cache_leftpad", 1, 31), 1, r"cache_leftpad\[1\]"),
    ("cache_leftpad_negative", False, False, _set("cache_leftpad", 0, -2), 0, r"cache_leftpad\[0\]"),
]


def _kvcache_call(q, k_cache, v_cache, args):
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, return_softmax_lse=True, **args)
    return out, lse, k_cache, v_cache


def _expect_fault_reported(pattern):
    with pytest.raises(flashattn.FlashAttnArgumentError, match=pattern):
        flashattn.check_device_faults()
    flashattn.check_device_faults()  # reported once, then cleared


def _rows_of(args, b, paged):
    """The cache entries (paged: blocks) sequence b owns in the good call."""
    if paged:
        return set(args["block_table"][b].tolist())
    return {int(args["cache_batch_idx"][b])}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, paged, append, edit, broken, pattern", KVCACHE_CASES, ids=[c[0] for c in KVCACHE_CASES])
def test_kvcache_index_out_of_range(device, name, paged, append, edit, broken, pattern):
    q, k_cache, v_cache, args = _kvcache_problem(device, paged, append)
    bad = dict(args)
    edit(bad)
    if device == "cpu":
        k_before, v_before = k_cache.clone(), v_cache.clone()
        with pytest.raises(flashattn.FlashAttnArgumentError, match=pattern):
            flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, **bad)
        assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before), "a refused call wrote the cache"
        return
    flashattn.check_device_faults()  # nothing pending from earlier tests
    good_out, good_lse, good_k, good_v = _kvcache_call(q, k_cache, v_cache, args)
    out, lse, k_after, v_after = _kvcache_call(q, k_cache, v_cache, bad)
    torch.cuda.synchronize()
    assert out[broken].isnan().all() and lse[broken].isnan().all(), "the broken sequence's output must be NaN"
    for b in range(3):
        if b != broken:
            assert torch.equal(out[b], good_out[b]) and torch.equal(lse[b], good_lse[b]), f"sequence {b} changed"
    # Outside what the broken sequence owns, the caches are exactly the good call's.
    owned = _rows_of(args, broken, paged) | _rows_of(bad, broken, paged)
    others = [e for e in range(k_cache.shape[0]) if e not in owned]
    assert torch.equal(k_after[others], good_k[others]) and torch.equal(v_after[others], good_v[others])
    assert not k_after.isnan().any() and not v_after.isnan().any()
    _expect_fault_reported(pattern)
    # The context is intact: a good call afterwards is right.
    again_out, again_lse, again_k, _ = _kvcache_call(q, k_cache, v_cache, args)
    assert torch.equal(again_out, good_out) and torch.equal(again_k, good_k)
    _expect_good_kvcache_answer(q, k_cache, v_cache, args, again_out)


def _expect_good_kvcache_answer(q, k_cache, v_cache, args, out):
    """out against attention_ref over each sequence's rows (the cache after the append)."""
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    table, idx = args.get("block_table"), args.get("cache_batch_idx")
    pad = args.get("cache_leftpad")
    for b in range(3):
        rows = torch.arange(int(args["cache_seqlens"][b]) + (1 if "k" in args else 0), device=q.device)
        if table is not None:
            entry, row = table[b, rows // PAGE].long(), rows % PAGE
        else:
            entry, row = torch.full_like(rows, int(idx[b])), rows
        if "k" in args:
            k_cache[entry[-1], row[-1]] = args["k"][b, 0]
            v_cache[entry[-1], row[-1]] = args["v"][b, 0]
        start = 0 if pad is None else int(pad[b])
        kb, vb = k_cache[entry[start:], row[start:]][None], v_cache[entry[start:], row[start:]][None]
        ref, _, _ = attention_ref(q[b:b + 1].cpu(), kb.cpu(), vb.cpu(), causal=True)
        naive, _, _ = attention_ref(q[b:b + 1].cpu(), kb.cpu(), vb.cpu(), causal=True, upcast=False)
        assert_within(f"out[{b}]", out[b:b + 1], ref, naive, 2.0, FLOOR[DTYPE])


# ------------------------------------------------------------------------------------------------
# Varlen and dense batches: cu_seqlens, seqused_k, and a paged varlen forward's block table.

Q_LENS, K_LENS = [6, 9, 5], [11, 7, 14]


def _cu(lens, device):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)


def _varlen_problem(device, requires_grad=False):
    q = randn(sum(Q_LENS), HEADS, DIM, dtype=DTYPE, device=device, requires_grad=requires_grad)
    k = randn(sum(K_LENS), HEADS_K, DIM, dtype=DTYPE, device=device, requires_grad=requires_grad)
    v = randn(sum(K_LENS), HEADS_K, DIM, dtype=DTYPE, device=device, requires_grad=requires_grad)
    # Maxima above every length (an upper bound is all they must be): a decreasing entry then breaks one
    # sequence only.
    args = dict(cu_seqlens_q=_cu(Q_LENS, device), cu_seqlens_k=_cu(K_LENS, device), max_seqlen_q=32, max_seqlen_k=32,
                causal=True)
    return q, k, v, args


def _set_max(name, value):
    def edit(args):
        args[name] = value
    return edit


# (id, edit, the output rows that must be NaN (the broken sequence's rows the kernels cover), sequences
# computed as usual, what the message names). Q rows: sequence 0 is [0, 6), 1 is [6, 15), 2 is [15, 20).
VARLEN_CASES = [
    # Sequence 1 has no rows; sequence 2 then starts at row 3, inside sequence 0 (as the array says).
    ("cu_seqlens_q_decreasing", _set("cu_seqlens_q", 2, 3), None, [], r"cu_seqlens_q\[2\] = 3"),
    # Sequence 0 ends before it starts; sequence 1's start is clamped to 0.
    ("cu_seqlens_q_negative", _set("cu_seqlens_q", 1, -4), slice(0, 15), [2], r"cu_seqlens_q\[1\] = -4"),
    ("cu_seqlens_q_past_the_tensor", _set("cu_seqlens_q", 3, 1000), slice(15, 20), [0, 1], r"cu_seqlens_q\[3\] = 1000"),
    ("cu_seqlens_k_past_the_tensor", _set("cu_seqlens_k", 3, 2**31 - 1), slice(15, 20), [0, 1], r"cu_seqlens_k\[3\]"),
    ("cu_seqlens_k_decreasing", _set("cu_seqlens_k", 2, 4), slice(6, 15), [0], r"cu_seqlens_k\[2\] = 4"),
    ("cu_seqlens_k_first_not_zero", _set("cu_seqlens_k", 0, 2), slice(0, 6), [1, 2], r"cu_seqlens_k\[0\] = 2"),
    # Sequence 1 has 9 rows: its first 7 (the grid covers max_seqlen_q rows) are NaN.
    ("length_past_max_seqlen_q", _set_max("max_seqlen_q", 7), slice(6, 13), [0, 2], r"cu_seqlens_q\[2\] = 15"),
]


def _varlen_call(q, k, v, args):
    return flashattn.flash_attn_varlen_func(q, k, v, return_attn_probs=True, **args)[:2]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, edit, nan_rows, kept, pattern", VARLEN_CASES, ids=[c[0] for c in VARLEN_CASES])
def test_varlen_index_out_of_range(device, name, edit, nan_rows, kept, pattern):
    q, k, v, args = _varlen_problem(device)
    bad = dict(args)
    edit(bad)
    if device == "cpu":
        with pytest.raises(flashattn.FlashAttnArgumentError, match=pattern.split(r"\[")[0]):
            _varlen_call(q, k, v, bad)
        return
    flashattn.check_device_faults()
    good_out, good_lse = _varlen_call(q, k, v, args)
    out, lse = _varlen_call(q, k, v, bad)
    torch.cuda.synchronize()
    cu = args["cu_seqlens_q"].tolist()
    if nan_rows is not None:
        assert out[nan_rows].isnan().all() and lse[:, nan_rows].isnan().all(), "the broken sequence's rows must be NaN"
    for b in kept:
        rows = slice(cu[b], cu[b + 1])
        assert torch.equal(out[rows], good_out[rows]) and torch.equal(lse[:, rows], good_lse[:, rows]), f"sequence {b}"
    _expect_fault_reported(pattern)
    _expect_good_varlen_answer(q, k, v, args)


def _expect_good_varlen_answer(q, k, v, args):
    out, _ = _varlen_call(q, k, v, args)
    cq, ck = args["cu_seqlens_q"].tolist(), args["cu_seqlens_k"].tolist()
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        ref, _, _ = attention_ref(q[None, qs].cpu(), k[None, ks].cpu(), v[None, ks].cpu(), causal=True)
        naive, _, _ = attention_ref(q[None, qs].cpu(), k[None, ks].cpu(), v[None, ks].cpu(), causal=True,
                                    upcast=False)
        assert_within(f"out of sequence {b}", out[None, qs], ref, naive, 2.0, FLOOR[DTYPE])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", [-1, 12])
def test_seqused_k_out_of_range(device, value):
    torch.manual_seed(3)
    q = randn(3, 8, HEADS, DIM, dtype=DTYPE, device=device)
    k, v = (randn(3, 11, HEADS_K, DIM, dtype=DTYPE, device=device) for _ in range(2))
    good = torch.tensor([11, 4, 9], dtype=torch.int32, device=device)
    bad = good.clone()
    bad[1] = value
    if device == "cpu":
        with pytest.raises(flashattn.FlashAttnArgumentError, match=r"seqused_k\[1\]"):
            flashattn.flash_attn_func(q, k, v, seqused_k=bad)
        return
    flashattn.check_device_faults()
    expected = flashattn.flash_attn_func(q, k, v, seqused_k=good)
    out = flashattn.flash_attn_func(q, k, v, seqused_k=bad)
    assert out[1].isnan().all()
    assert torch.equal(out[0], expected[0]) and torch.equal(out[2], expected[2])
    _expect_fault_reported(rf"seqused_k\[1\] = {value}")
    assert torch.equal(flashattn.flash_attn_func(q, k, v, seqused_k=good), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_with_cu_seqlens_past_the_tensor(device):
    """The backward's kernels clamp the same arrays: no access outside the tensors, the fault reported."""
    q, k, v, args = _varlen_problem(device, requires_grad=True)
    bad = dict(args)
    _set("cu_seqlens_k", 3, 5000)(bad)
    if device == "cpu":
        with pytest.raises(flashattn.FlashAttnArgumentError, match=r"cu_seqlens_k"):
            flashattn.flash_attn_varlen_func(q, k, v, **bad)
        return
    flashattn.check_device_faults()
    out = flashattn.flash_attn_varlen_func(q, k, v, **bad)
    out.float().sum().backward()
    torch.cuda.synchronize()
    _expect_fault_reported(r"cu_seqlens_k\[3\] = 5000")
    for t in (q, k, v):
        t.grad = None
    flashattn.flash_attn_varlen_func(q, k, v, **args).float().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    flashattn.check_device_faults()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", [-1, NUM_BLOCKS, 2**31 - 1])
def test_paged_varlen_block_table_out_of_range(device, entry):
    torch.manual_seed(6)
    lens = [21, 40, 7]
    q = randn(sum(lens), HEADS, DIM, dtype=DTYPE, device=device)
    k_pool, v_pool = (randn(NUM_BLOCKS, PAGE, HEADS_K, DIM, dtype=DTYPE, device=device) for _ in range(2))
    table = torch.arange(3 * PAGES_PER_SEQ, dtype=torch.int32, device=device).view(3, PAGES_PER_SEQ)
    cu = _cu(lens, device)
    bad = table.clone()
    bad[1, 2] = entry
    call = lambda t: flashattn.flash_attn_varlen_func(q, k_pool, v_pool, cu, cu, 40, 40, causal=True, block_table=t)
    if device == "cpu":
        with pytest.raises(flashattn.FlashAttnArgumentError, match=r"block_table\[1\]\[2\]"):
            call(bad)
        return
    flashattn.check_device_faults()
    expected = call(table)
    out = call(bad)
    assert out[21:61].isnan().all()
    assert torch.equal(out[:21], expected[:21]) and torch.equal(out[61:], expected[61:])
    _expect_fault_reported(rf"block_table\[1\]\[2\] = {entry}")
    assert torch.equal(call(table), expected)
