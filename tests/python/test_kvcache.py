"""flash_attn_with_kvcache and flash_attn_varlen_func(block_table=...) against a float64 reference.

The reference appends the new keys/values to its own copy of the cache (rotating the keys), rotates
q, and runs `attention_ref` per sequence on the cache rows [leftpad, cache_seqlens + seqlen_new).
The C++ tests compare the caches bit for bit; here the appended rows are compared to 1 ulp (the
float64 rotation here rounds once, the library's fp32 rotation twice) and everything else exactly.
"""

import pytest
import torch

import flashattn
from helpers import FLOOR, assert_lse_close, assert_within, randn
from reference import attention_ref


def rotate(x, cos, sin, positions, interleaved):
    """x: (n, heads, d); positions: (n,). The first 2 * cos.shape[1] features rotate."""
    half = cos.shape[1]
    x = x.double().clone()
    c = cos.double()[positions].unsqueeze(1)
    s = sin.double()[positions].unsqueeze(1)
    if interleaved:
        x1, x2 = x[..., 0:2 * half:2].clone(), x[..., 1:2 * half:2].clone()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = x1 * c - x2 * s, x1 * s + x2 * c
    else:
        x1, x2 = x[..., :half].clone(), x[..., half:2 * half].clone()
        x[..., :half], x[..., half:2 * half] = x1 * c - x2 * s, x1 * s + x2 * c
    return x


def cache_rows(k_cache, b, rows, block_table, batch_idx):
    """Indices (entry, row) of cache rows `rows` of sequence b."""
    if block_table is not None:
        page = k_cache.shape[1]
        return block_table[b, rows // page].long(), rows % page
    entry = b if batch_idx is None else int(batch_idx[b])
    return torch.full_like(rows, entry), rows


def kvcache_reference(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens, batch_idx, leftpad, block_table, causal,
                      window, softcap, alibi, interleaved):
    """(out64, lse64, out_naive, k_cache_after, v_cache_after)."""
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    batch, seqlen_q = q.shape[:2]
    local = causal or window != (-1, -1)
    q_used = q
    if cos is not None:
        q_rows = []
        for b in range(batch):
            pos = int(cache_seqlens[b]) + (torch.arange(seqlen_q) if local else torch.zeros(seqlen_q, dtype=torch.long))
            q_rows.append(rotate(q[b], cos, sin, pos, interleaved).to(q.dtype))
        q_used = torch.stack(q_rows)
    if k is not None:
        for b in range(batch):
            rows = int(cache_seqlens[b]) + torch.arange(k.shape[1])
            entry, row = cache_rows(k_cache, b, rows, block_table, batch_idx)
            new_k = k[b] if cos is None else rotate(k[b], cos, sin, rows, interleaved).to(k.dtype)
            k_cache[entry, row] = new_k
            v_cache[entry, row] = v[b]
    outs, lses, naives = [], [], []
    for b in range(batch):
        start = 0 if leftpad is None else int(leftpad[b])
        end = int(cache_seqlens[b]) + (0 if k is None else k.shape[1])
        entry, row = cache_rows(k_cache, b, torch.arange(start, end), block_table, batch_idx)
        kb, vb = k_cache[entry, row].unsqueeze(0), v_cache[entry, row].unsqueeze(0)
        slopes = None if alibi is None else (alibi if alibi.dim() == 1 else alibi[b])
        args = dict(causal=causal, window=window, softcap=softcap, alibi_slopes=slopes)
        out, lse, _ = attention_ref(q_used[b:b + 1], kb, vb, upcast=True, **args)
        naive, _, _ = attention_ref(q_used[b:b + 1], kb, vb, upcast=False, **args)
        outs.append(out)
        lses.append(lse)
        naives.append(naive)
    return torch.cat(outs), torch.cat(lses), torch.cat(naives), k_cache, v_cache


def make_problem(dtype, batch, seqlen_q, seqlen_new, capacity, heads, heads_k, d, page, rotary_fraction, leftpad,
                 batch_idx, seed):
    g = torch.Generator().manual_seed(seed)
    q = randn(batch, seqlen_q, heads, d, dtype=dtype, device="cpu")
    k = randn(batch, seqlen_new, heads_k, d, dtype=dtype, device="cpu") if seqlen_new else None
    v = randn(batch, seqlen_new, heads_k, d, dtype=dtype, device="cpu") if seqlen_new else None
    lens = torch.randint(0, capacity - seqlen_new + 1, (batch,), generator=g, dtype=torch.int32)
    pad = (torch.rand(batch, generator=g) * (lens + 1).float()).floor().to(torch.int32) if leftpad else None
    block_table = idx = None
    if page:
        max_blocks = (capacity + page - 1) // page
        num_blocks = batch * max_blocks + 2
        block_table = torch.randperm(num_blocks, generator=g)[:batch * max_blocks].view(batch, max_blocks)
        block_table = block_table.to(torch.int32)
        k_cache = randn(num_blocks, page, heads_k, d, dtype=dtype, device="cpu")
    else:
        entries = batch + 2 if batch_idx else batch
        k_cache = randn(entries, capacity, heads_k, d, dtype=dtype, device="cpu")
        if batch_idx:
            idx = torch.randperm(entries, generator=g)[:batch].to(torch.int32)
    v_cache = torch.randn_like(k_cache, dtype=torch.float32).to(dtype)
    cos = sin = None
    if rotary_fraction:
        rotary_dim = int(round(rotary_fraction * d / 2)) * 2
        positions = torch.arange(capacity + seqlen_q, dtype=torch.float64).unsqueeze(1)
        angles = positions * 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    return q, k, v, k_cache, v_cache, cos, sin, lens, idx, pad, block_table


CASES = [
    # dtype, seqlen_q, seqlen_new, capacity, heads, heads_k, d, page, rotary, interleaved, leftpad, batch_idx, causal
    (torch.float16, 1, 1, 300, 8, 2, 64, None, 0.0, False, False, False, False),
    (torch.bfloat16, 1, 1, 300, 8, 1, 64, 16, 1.0, False, False, False, True),
    (torch.bfloat16, 3, 3, 200, 4, 4, 128, 64, 0.5, True, True, False, True),
    (torch.float16, 3, 3, 200, 8, 2, 64, None, 0.5, False, True, True, True),
    (torch.float32, 5, 2, 100, 6, 3, 40, None, 1.0, True, False, True, False),
    (torch.float32, 4, 4, 512, 4, 1, 64, 256, 0.0, False, True, False, True),
    (torch.bfloat16, 2, 0, 150, 4, 2, 64, 16, 0.0, False, True, False, True),   # no new keys
    (torch.float16, 16, 16, 400, 8, 8, 96, 16, 1.0, True, False, False, True),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_kvcache_matches_reference(case):
    dtype, sq, new, capacity, heads, heads_k, d, page, rotary, interleaved, leftpad, batch_idx, causal = case
    q, k, v, k_cache, v_cache, cos, sin, lens, idx, pad, table = make_problem(
        dtype, 3, sq, new, capacity, heads, heads_k, d, page, rotary, leftpad, batch_idx, seed=len(str(case)))
    expected = kvcache_reference(q, k_cache, v_cache, k, v, cos, sin, lens, idx, pad, table, causal, (-1, -1), 0.0,
                                 None, interleaved)
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin,
                                                 cache_seqlens=lens, cache_batch_idx=idx, cache_leftpad=pad,
                                                 block_table=table, causal=causal, rotary_interleaved=interleaved,
                                                 return_softmax_lse=True)
    out64, lse64, naive, k_after, v_after = expected
    assert_within("out", out, out64, naive, 2.0, FLOOR[dtype])
    assert_lse_close(lse, lse64, 1e-3)
    assert torch.equal(v_cache, v_after), "v_cache after appending"
    if cos is None:
        assert torch.equal(k_cache, k_after), "k_cache after appending"
    else:  # one ulp of the dtype for rotated keys
        ulp = torch.finfo(dtype).eps * k_after.double().abs().clamp(min=1.0)
        assert ((k_cache.double() - k_after.double()).abs() <= ulp).all(), "rotated keys in k_cache"


def test_kvcache_features_and_int_seqlens():
    """softcap, ALiBi, a local window, an int cache_seqlens, num_splits; the output alone (no lse)."""
    dtype = torch.bfloat16
    q, k, v, k_cache, v_cache, cos, sin, _, _, _, _ = make_problem(dtype, 2, 2, 2, 256, 8, 2, 64, None, 0.5, False,
                                                                    False, seed=5)
    slopes = torch.rand(8, dtype=torch.float32)
    expected = kvcache_reference(q, k_cache, v_cache, k, v, cos, sin, torch.tensor([100, 100]), None, None, None,
                                 False, (30, 0), 20.0, slopes, False)
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin,
                                            cache_seqlens=100, window_size=(30, 0), softcap=20.0,
                                            alibi_slopes=slopes, rotary_interleaved=False, num_splits=7)
    assert_within("out", out, expected[0], expected[2], 2.0, FLOOR[dtype])
    assert torch.equal(v_cache, expected[4])


def test_decode_loop_appends_step_by_step():
    """A serving loop: one token per step, cache_seqlens advancing; each step sees all earlier keys."""
    dtype = torch.float16
    q, _, _, k_cache, v_cache, _, _, _, _, _, _ = make_problem(dtype, 2, 1, 0, 64, 4, 2, 32, 16, 0.0, False, False, 9)
    reference_k, reference_v = k_cache.clone(), v_cache.clone()
    lens = torch.tensor([3, 10], dtype=torch.int32)
    table = torch.arange(2 * 4, dtype=torch.int32).flip(0).view(2, 4)
    for _ in range(5):
        k = randn(2, 1, 2, 32, dtype=dtype, device="cpu")
        v = randn(2, 1, 2, 32, dtype=dtype, device="cpu")
        out64, _, naive, reference_k, reference_v = kvcache_reference(q, reference_k, reference_v, k, v, None, None,
                                                                      lens, None, None, table, True, (-1, -1), 0.0,
                                                                      None, False)
        out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table,
                                                causal=True)
        assert_within("out", out, out64, naive, 2.0, FLOOR[dtype])
        assert torch.equal(k_cache, reference_k) and torch.equal(v_cache, reference_v)
        lens += 1


@pytest.mark.parametrize("page", [16, 64])
def test_paged_varlen_equals_contiguous_varlen(page):
    dtype = torch.bfloat16
    q_lens, k_lens = [3, 0, 17, 1], [40, 5, 100, 0]
    cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=torch.int32)
    q = randn(int(cu_q[-1]), 6, 64, dtype=dtype, device="cpu")
    k = randn(int(cu_k[-1]), 2, 64, dtype=dtype, device="cpu")
    v = randn(int(cu_k[-1]), 2, 64, dtype=dtype, device="cpu")
    max_blocks = (max(k_lens) + page - 1) // page
    num_blocks = len(k_lens) * max_blocks
    table = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(page)).view(len(k_lens), max_blocks)
    table = table.to(torch.int32)
    k_pool = torch.zeros(num_blocks, page, 2, 64, dtype=dtype)
    v_pool = torch.zeros_like(k_pool)
    for b, length in enumerate(k_lens):
        rows = torch.arange(length)
        k_pool[table[b, rows // page].long(), rows % page] = k[int(cu_k[b]):int(cu_k[b]) + length]
        v_pool[table[b, rows // page].long(), rows % page] = v[int(cu_k[b]):int(cu_k[b]) + length]
    args = dict(max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens), causal=True, return_attn_probs=True)
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, **args)
    out_paged, lse_paged, probs = flashattn.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, cu_k, block_table=table,
                                                                   **args)
    assert probs is None
    torch.testing.assert_close(out_paged, out, rtol=0, atol=1e-2)
    assert_lse_close(lse_paged, lse, 1e-4)


def kv_inputs():
    q = torch.zeros(2, 1, 4, 16, dtype=torch.float16)
    cache = torch.zeros(2, 32, 2, 16, dtype=torch.float16)
    new = torch.zeros(2, 1, 2, 16, dtype=torch.float16)
    return q, cache, cache.clone(), new, new.clone()


BAD = [
    ("v_without_k", lambda q, kc, vc, k, v: dict(v=v), ValueError, r"k and v must be given together"),
    ("k_cache_3d", lambda q, kc, vc, k, v: dict(k_cache=kc[0]), ValueError, r"k_cache must be 4-D"),
    ("cache_dtype", lambda q, kc, vc, k, v: dict(k_cache=kc.float(), v_cache=vc.float()), TypeError, r"k_cache has dtype"),
    ("rotary_without_k", lambda q, kc, vc, k, v: dict(rotary_cos=torch.ones(40, 4, dtype=torch.float16),
                                                       rotary_sin=torch.ones(40, 4, dtype=torch.float16)),
     ValueError, r"rotary_cos/rotary_sin need k and v"),
    ("rotary_dtype", lambda q, kc, vc, k, v: dict(k=k, v=v, rotary_cos=torch.ones(40, 4), rotary_sin=torch.ones(40, 4)),
     TypeError, r"rotary_cos has dtype"),
    ("seqlens_int64", lambda q, kc, vc, k, v: dict(cache_seqlens=torch.tensor([1, 2])), TypeError,
     r"cache_seqlens must be int32"),
    ("seqlens_too_long", lambda q, kc, vc, k, v: dict(k=k, v=v, cache_seqlens=32), ValueError,
     r"cache_seqlens = 32 must be in \[0, 31\]: k_cache's capacity"),
    ("seqlens_tensor_too_long", lambda q, kc, vc, k, v: dict(k=k, v=v, cache_seqlens=torch.tensor([3, 32], dtype=torch.int32)),
     ValueError, r"cache_seqlens\[1\] must be in \[0, 31\]"),
    ("seqlens_past_the_table", lambda q, kc, vc, k, v: dict(k_cache=torch.zeros(4, 16, 2, 16, dtype=torch.float16),
                                                            v_cache=torch.zeros(4, 16, 2, 16, dtype=torch.float16),
                                                            cache_seqlens=33,
                                                            block_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)),
     ValueError, r"cache_seqlens = 33 must be in \[0, 32\]: the block_table's capacity"),
    ("batch_idx_duplicate", lambda q, kc, vc, k, v: dict(k=k, v=v, cache_seqlens=3,
                                                         cache_batch_idx=torch.tensor([1, 1], dtype=torch.int32)),
     ValueError, r"cache_batch_idx"),
    ("page_not_multiple_of_16", lambda q, kc, vc, k, v: dict(k_cache=torch.zeros(4, 8, 2, 16, dtype=torch.float16),
                                                             v_cache=torch.zeros(4, 8, 2, 16, dtype=torch.float16),
                                                             block_table=torch.zeros(2, 2, dtype=torch.int32)),
     ValueError, r"page_block_size 8"),
    ("block_index_out_of_range", lambda q, kc, vc, k, v: dict(k_cache=torch.zeros(2, 16, 2, 16, dtype=torch.float16),
                                                              v_cache=torch.zeros(2, 16, 2, 16, dtype=torch.float16),
                                                              cache_seqlens=4,
                                                              block_table=torch.tensor([[0], [2]], dtype=torch.int32)),
     ValueError, r"block_table\[1\]\[0\] = 2"),
    ("num_splits_negative", lambda q, kc, vc, k, v: dict(num_splits=-1), ValueError, r"num_splits"),
]


@pytest.mark.parametrize("edit, error, pattern", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_kvcache_bad_input(edit, error, pattern):
    q, k_cache, v_cache, k, v = kv_inputs()
    args = dict(q=q, k_cache=k_cache, v_cache=v_cache, cache_seqlens=2)
    args.update(edit(q, k_cache, v_cache, k, v))
    with pytest.raises(error, match=pattern):
        flashattn.flash_attn_with_kvcache(**args)


def test_kvcache_runs_the_forward_of_inputs_that_require_grad_and_refuses_only_a_backward():
    # As flash_attn: the forward runs; only a backward through it is an error.
    q, k_cache, v_cache, k, v = kv_inputs()
    q.normal_()
    expected = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=2)
    out = flashattn.flash_attn_with_kvcache(q.clone().requires_grad_(), k_cache, v_cache, cache_seqlens=2)
    assert torch.equal(out.detach(), expected)
    with torch.no_grad():
        assert not flashattn.flash_attn_with_kvcache(q.requires_grad_(), k_cache, v_cache, cache_seqlens=2).requires_grad
    with pytest.raises(NotImplementedError, match="flash_attn_with_kvcache is forward only"):
        out.float().sum().backward()


def test_kvcache_traces_with_torch_compile():
    q, k_cache, v_cache, k, v = kv_inputs()
    q.normal_()
    k.normal_()
    v.normal_()
    eager_k, eager_v = k_cache.clone(), v_cache.clone()
    lens = torch.tensor([3, 5], dtype=torch.int32)
    expected = flashattn.flash_attn_with_kvcache(q, eager_k, eager_v, k, v, cache_seqlens=lens, causal=True)
    step = torch.compile(lambda *a: flashattn.flash_attn_with_kvcache(*a, cache_seqlens=lens, causal=True),
                         fullgraph=True, backend="eager")
    out = step(q, k_cache, v_cache, k, v)
    assert torch.equal(out, expected)
    assert torch.equal(k_cache, eager_k) and torch.equal(v_cache, eager_v), "the compiled call must update the caches"
