"""GPU tests of the inference path (issue 6) through the C ABI: fa_kvcache_forward, paged K/V in
fa_forward / fa_varlen_forward, split-KV, fa_combine.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 -m pytest -q tests/gpu/test_inference.py

Outputs are poisoned with NaN; out and lse are compared with the fp64 reference with
FlashAttention's rule (tests/gpu/test_forward.py). The caches after appending must be bit-identical
to the CPU backend's (itself checked bit for bit against the C++ fp64 reference in
tests/backend/kvcache_test.cpp): the rotary formula is part of the definition. Cache entries and
table rows a sequence must not read hold NaN / invalid block indices, so a stray read shows up as
NaN in the output (and as an error under compute-sanitizer, scripts/gpu.py pytest --sanitize memcheck).
"""

import pytest
import torch

import abi
from reference import attention_ref
from harness import DEV, ON_CUDA, cu, cuda_only, heavy, rand, sync
from test_forward import assert_close, assert_lse_close


def rotary_table(seqlen, rotary_dim, dtype):
    t = torch.arange(rotary_dim // 2, dtype=torch.float64)
    angle = torch.arange(seqlen, dtype=torch.float64)[:, None] * torch.pow(10000.0, -2.0 * t / rotary_dim)[None, :]
    return angle.cos().to(dtype).to(DEV), angle.sin().to(dtype).to(DEV)


def rotate_like_the_library(x, cos, sin, positions, interleaved):
    """x (n, heads, d) rotated as core/problem.h's rotate_features: fp32 products rounded on their own,
    then a fused multiply-add (emulated in fp64, exact up to a rare double rounding), then the dtype."""
    half = cos.shape[1]
    c = cos.double()[positions][:, None, :]
    s = sin.double()[positions][:, None, :]
    y = x.double().clone()
    a = torch.arange(half, device=x.device) * 2 if interleaved else torch.arange(half, device=x.device)
    b = a + 1 if interleaved else a + half
    x1, x2 = y[..., a], y[..., b]
    y[..., a] = (x1 * c - (x2 * s).float().double()).float().double()
    y[..., b] = (x1 * s + (x2 * c).float().double()).float().double()
    return y.to(x.dtype)


class KvProblem:
    """The buffers of one fa_kvcache_forward call, built on the host side of the test."""

    def __init__(self, *, batch, seqlen_q, seqlen_new, capacity, heads, heads_k, d, dtype, page=0, rotary=0.0,
                 interleaved=False, leftpad=False, batch_idx=False, seed=0, cache_seqlens=None):
        g = torch.Generator().manual_seed(seed)
        self.dtype, self.page, self.capacity = dtype, page, capacity
        self.q = rand(batch, seqlen_q, heads, d, dtype=dtype)
        self.k_new = rand(batch, seqlen_new, heads_k, d, dtype=dtype) if seqlen_new else None
        self.v_new = rand(batch, seqlen_new, heads_k, d, dtype=dtype) if seqlen_new else None
        if cache_seqlens is None:
            cache_seqlens = torch.randint(0, capacity - seqlen_new + 1, (batch,), generator=g).tolist()
        self.lens = list(cache_seqlens)
        self.pads = [int(torch.randint(0, n + 1, (1,), generator=g)) if leftpad else 0 for n in self.lens]
        self.cache_seqlens = torch.tensor(self.lens, dtype=torch.int32, device=DEV)
        self.cache_leftpad = torch.tensor(self.pads, dtype=torch.int32, device=DEV) if leftpad else None
        self.block_table, self.cache_batch_idx = None, None
        if page:
            max_blocks = (capacity + page - 1) // page
            num_blocks = batch * max_blocks + 3
            perm = torch.randperm(num_blocks, generator=g)
            table = torch.full((batch, max_blocks + 1), -7, dtype=torch.int32)  # stride above the row length
            for b in range(batch):
                used = (self.lens[b] + seqlen_new + page - 1) // page
                table[b, :used] = perm[b * max_blocks:b * max_blocks + used].to(torch.int32)
            self.block_table = table.to(DEV)[:, :max_blocks]
            shape = (num_blocks, page, heads_k, d)
        else:
            entries = batch + 2 if batch_idx else batch
            if batch_idx:
                self.cache_batch_idx = torch.randperm(entries, generator=g)[:batch].to(torch.int32).to(DEV)
            shape = (entries, capacity, heads_k, d)
        # NaN except the rows [leftpad, cache_seqlens) of every sequence.
        self.k_cache = torch.full(shape, float("nan"), dtype=dtype, device=DEV)
        self.v_cache = torch.full(shape, float("nan"), dtype=dtype, device=DEV)
        for b in range(batch):
            rows = torch.arange(self.pads[b], self.lens[b], device=DEV)
            e, r = self.where(b, rows)
            self.k_cache[e, r] = rand(len(rows), heads_k, d, dtype=dtype)
            self.v_cache[e, r] = rand(len(rows), heads_k, d, dtype=dtype)
        self.cos = self.sin = None
        rotary_dim = int(round(rotary * d / 2)) * 2
        if rotary_dim:
            self.cos, self.sin = rotary_table(capacity + seqlen_q, rotary_dim, dtype)
        self.interleaved = interleaved

    def where(self, b, rows):
        """(entry or block, row inside it) of cache rows `rows` of sequence b."""
        if self.block_table is not None:
            return self.block_table[b, rows // self.page].long(), rows % self.page
        entry = b if self.cache_batch_idx is None else int(self.cache_batch_idx[b])
        return torch.full_like(rows, entry), rows

    def run(self, k_cache, v_cache, backend=abi.BACKEND_AUTO, to=None, **kw):
        move = (lambda t: None if t is None else t.to(to)) if to else (lambda t: t)
        return abi.kvcache_forward(
            move(self.q), k_cache, v_cache, move(self.cache_seqlens), k=move(self.k_new), v=move(self.v_new),
            rotary_cos=move(self.cos), rotary_sin=move(self.sin), rotary_interleaved=self.interleaved,
            cache_batch_idx=move(self.cache_batch_idx), cache_leftpad=move(self.cache_leftpad),
            block_table=move(self.block_table), backend=backend, **kw)


def check_kvcache(kp, *, causal=False, window=(-1, -1), softcap=0.0, alibi=False, num_splits=0, compare_cpu=True):
    heads = kp.q.shape[2]
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], device=DEV) if alibi else None
    k_cache, v_cache = kp.k_cache.clone(), kp.v_cache.clone()
    kw = dict(causal=causal, window=window, softcap=softcap, alibi_slopes=slopes, num_splits=num_splits)
    out, lse = kp.run(k_cache, v_cache, **kw)
    sync()
    if compare_cpu and ON_CUDA:  # the caches after appending, bit for bit
        k_cpu, v_cpu = kp.k_cache.cpu(), kp.v_cache.cpu()
        cpu_kw = dict(kw, alibi_slopes=None if slopes is None else slopes.cpu())
        kp.run(k_cpu, v_cpu, backend=abi.BACKEND_CPU, to="cpu", **cpu_kw)
        assert torch.equal(k_cache.cpu().view(torch.int16), k_cpu.view(torch.int16)), "k_cache differs from the CPU's"
        assert torch.equal(v_cache.cpu().view(torch.int16), v_cpu.view(torch.int16)), "v_cache differs from the CPU's"
    # The reference: each sequence's keys are its cache rows [leftpad, cache_seqlens + seqlen_new).
    n = 0 if kp.k_new is None else kp.k_new.shape[1]
    local = causal or window != (-1, -1)
    for b in range(kp.q.shape[0]):
        rows = torch.arange(kp.pads[b], kp.lens[b] + n, device=DEV)
        e, r = kp.where(b, rows)
        k, v = k_cache[e, r], v_cache[e, r]
        assert not torch.isnan(k).any() and not torch.isnan(v).any(), f"sequence {b}: an appended row is missing"
        q = kp.q[b]
        if kp.cos is not None:
            pos = kp.lens[b] + (torch.arange(q.shape[0], device=DEV) if local else torch.zeros(q.shape[0], dtype=torch.long, device=DEV))
            q = rotate_like_the_library(q, kp.cos, kp.sin, pos, kp.interleaved)
        ref_kw = dict(causal=causal, window=window, softcap=softcap, alibi_slopes=slopes)
        ref, ref_lse, _ = attention_ref(q[None], k[None], v[None], **ref_kw)
        naive, naive_lse, _ = attention_ref(q[None], k[None], v[None], precision=q.dtype, **ref_kw)
        assert_close(f"seq {b} out", out[b:b + 1], ref, naive)
        assert_lse_close(f"seq {b} lse", lse[b:b + 1], ref_lse, naive_lse)


# The grid: seqlen_q {1, 3, 128}, pages {0, 16, 64, 256}, rotary {0, 0.5, 1} in both layouts,
# leftpad, batch_idx, GQA 1/4/8, num_splits {1, 0, 7}; the other axes rotate with the case number.
GRID = [(sq, page, rot) for sq in (1, 3, 128) for page in (0, 16, 64, 256)
        for rot in ((0.0, False), (0.5, True), (0.5, False), (1.0, True), (1.0, False))]


@pytest.mark.parametrize("n,case", list(enumerate(GRID)),
                         ids=[f"sq{sq}-page{p}-rot{r[0]}{'i' if r[1] else 'n'}" for sq, p, r in GRID])
def test_kvcache_grid(n, case):
    sq, page, (fraction, interleaved) = case
    torch.manual_seed(n)
    heads_k = 2
    kp = KvProblem(batch=3, seqlen_q=sq, seqlen_new=0 if (sq == 128 and n % 3 == 0 and fraction == 0) else sq,
                   capacity=384 if sq == 128 else (2048 if n % 4 == 0 else 300), heads=heads_k * (1, 4, 8)[n % 3],
                   heads_k=heads_k, d=128 if n % 5 == 4 else 64, dtype=torch.bfloat16 if n % 2 else torch.float16,
                   page=page, rotary=fraction, interleaved=interleaved, leftpad=n % 3 == 1,
                   batch_idx=page == 0 and n % 2 == 1, seed=n)
    check_kvcache(kp, causal=(n % 2 == 0) if sq > 1 else (n % 4 == 1), num_splits=(1, 0, 7)[(n // 3) % 3])


@pytest.mark.parametrize("feature", ["softcap_alibi", "window", "window_leftpad_alibi", "mqa_odd_dim", "empty_cache",
                                     "full_cache"])
def test_kvcache_features(feature):
    torch.manual_seed(len(feature))
    base = dict(batch=2, seqlen_q=3, seqlen_new=3, capacity=256, heads=8, heads_k=2, d=64, dtype=torch.bfloat16,
                seed=len(feature))
    if feature == "softcap_alibi":
        check_kvcache(KvProblem(**base, page=64), softcap=15.0, alibi=True, causal=True)
    elif feature == "window":
        check_kvcache(KvProblem(**dict(base, capacity=500), rotary=1.0), window=(40, 0))
    elif feature == "window_leftpad_alibi":
        check_kvcache(KvProblem(**dict(base, seqlen_q=17, seqlen_new=17), leftpad=True), window=(8, 2), alibi=True)
    elif feature == "mqa_odd_dim":  # head dim 40: the kernel reads 16-byte chunks up to 40 of a 64-wide tile
        check_kvcache(KvProblem(**dict(base, heads=6, heads_k=1, d=40), rotary=0.5, interleaved=True, batch_idx=True))
    elif feature == "empty_cache":
        check_kvcache(KvProblem(**base, cache_seqlens=[0, 0], rotary=0.5), causal=True)
    else:  # the append fills the cache exactly; decode with splits
        check_kvcache(KvProblem(**dict(base, capacity=64, seqlen_q=1, seqlen_new=1), cache_seqlens=[63, 10], page=16),
                      causal=True, num_splits=7)


@heavy
@pytest.mark.parametrize("page", [0, 16, 256])
@pytest.mark.parametrize("num_splits", [0, 1, 7])
def test_kvcache_long_caches(page, num_splits):
    """Decode on caches up to 128k rows: 32 q heads / 8 KV heads, d 128, bf16, rotary."""
    torch.manual_seed(page + num_splits)
    kp = KvProblem(batch=2, seqlen_q=1, seqlen_new=1, capacity=131072, heads=32, heads_k=8, d=128,
                   dtype=torch.bfloat16, page=page, rotary=1.0, cache_seqlens=[131071, 70001], seed=3)
    check_kvcache(kp, causal=True, num_splits=num_splits, compare_cpu=page == 16 and num_splits == 0)


DECODE_VARIANT_CASES = [(v, page, d) for v in ("auto", "tile64", "split_keys") for page in (0, 16, 64)
                        for d in (64, 128, 256)]


@pytest.mark.parametrize("variant,page,d", DECODE_VARIANT_CASES,
                         ids=[f"{v}-page{p}-d{d}" for v, p, d in DECODE_VARIANT_CASES])
def test_kvcache_decode_variants(variant, page, d, overrides):
    """Both inference kernels (overrides inference_kernel=tile64 / split_keys; auto: the planner's
    choice) give the reference's result. Lengths cover a cache shorter than the ring of K/V stages
    (1 and 70 rows), ragged block tails and left padding (pages straddle the 64/128-key blocks). The
    decode kernel (16-key blocks, 4 warps): caches shorter than one block per warp, and d256 (Q read
    from shared memory per block)."""
    overrides(f"inference_kernel={variant}")
    torch.manual_seed(page + d)
    kp = KvProblem(batch=5, seqlen_q=1, seqlen_new=1, capacity=4096, heads=32, heads_k=8, d=d,
                   dtype=torch.bfloat16, page=page, rotary=0.0, leftpad=page != 64, batch_idx=page == 0,
                   cache_seqlens=[1, 70, 1000, 2999, 4095], seed=page + d)
    check_kvcache(kp, causal=True, num_splits=0, compare_cpu=False)
    check_kvcache(kp, causal=True, num_splits=5, compare_cpu=False)


@pytest.mark.parametrize("batch,page", [(16, 0), (11, 0), (16, 16)], ids=["contiguous", "contiguous-b11", "paged16"])
def test_kvcache_decode_fills_the_sms(batch, page):
    """Batch 16 (11) x 8 KV heads: items that fill the SMs once (0.67 x the SMs). A contiguous cache
    runs unsplit, one CTA per item (the planner's rule), a paged one in two splits; each the
    reference's result, with ragged lengths (a last block of 1 row, a cache shorter than a ring)."""
    torch.manual_seed(16 + page)
    lens = [4096, 4095, 1, 70, 2049, 4000, 17, 3333, 4096, 2, 1000, 4001, 256, 255, 3071, 4094][:batch]
    kp = KvProblem(batch=batch, seqlen_q=1, seqlen_new=1, capacity=4096, heads=32, heads_k=8, d=128,
                   dtype=torch.bfloat16, page=page, rotary=0.0, cache_seqlens=[n - 1 for n in lens], seed=16 + page)
    check_kvcache(kp, causal=True, num_splits=0, compare_cpu=False)


WORKSPACE_CASES = {
    # split-KV's partials (batch 1: the split rule fills the SMs)
    "split_decode": dict(kp=dict(batch=1, seqlen_q=1, seqlen_new=1, capacity=8192, heads=32, heads_k=8, d=128,
                                 dtype=torch.bfloat16, cache_seqlens=[8000]), num_splits=0),
    # the rotated q and the partials, paged
    "rotary_paged": dict(kp=dict(batch=3, seqlen_q=1, seqlen_new=1, capacity=2048, heads=8, heads_k=2, d=64,
                                 dtype=torch.float16, page=16, rotary=1.0, cache_seqlens=[2000, 17, 1500]),
                         num_splits=7),
    # packed copies of q, k, v, out (head dim 36: padded to 40), the rotated q, the partials
    "staged_odd_dim": dict(kp=dict(batch=2, seqlen_q=3, seqlen_new=3, capacity=512, heads=4, heads_k=2, d=36,
                                   dtype=torch.bfloat16, rotary=0.5, cache_seqlens=[400, 100]), num_splits=7),
    # nothing to keep: one split, no rotary
    "no_scratch": dict(kp=dict(batch=4, seqlen_q=1, seqlen_new=1, capacity=256, heads=8, heads_k=8, d=64,
                               dtype=torch.bfloat16, cache_seqlens=[10, 200, 0, 255]), num_splits=1),
}


@cuda_only
@pytest.mark.parametrize("case", list(WORKSPACE_CASES))
def test_kvcache_workspace(case):
    """A caller's workspace of exactly fa_kvcache_workspace_size bytes, filled with NaN bytes, gives the
    bytes of the library's own scratch (outputs and caches); one 256-byte piece short, or misaligned,
    is refused with a message that names the size query or the alignment."""
    spec = WORKSPACE_CASES[case]
    kp = KvProblem(seed=31, **spec["kp"])
    kw = dict(causal=True, num_splits=spec["num_splits"])
    size = abi.kvcache_workspace_size(kp.q, kp.k_cache, kp.v_cache, kp.cache_seqlens, k=kp.k_new, v=kp.v_new,
                                      rotary_cos=kp.cos, rotary_sin=kp.sin, block_table=kp.block_table, **kw)
    assert (size == 0) == (case == "no_scratch"), f"workspace size {size}"
    k1, v1 = kp.k_cache.clone(), kp.v_cache.clone()
    out1, lse1 = kp.run(k1, v1, **kw)  # the library's own scratch
    k2, v2 = kp.k_cache.clone(), kp.v_cache.clone()
    workspace = torch.full((max(size, 1),), 255, dtype=torch.uint8, device=DEV)
    out2, lse2 = kp.run(k2, v2, workspace=workspace[:size], **kw)
    sync()
    assert torch.equal(out1.view(torch.int16), out2.view(torch.int16)), "out differs with a workspace"
    assert torch.equal(lse1, lse2), "lse differs with a workspace"
    assert torch.equal(k1.view(torch.int16), k2.view(torch.int16)) and torch.equal(v1.view(torch.int16), v2.view(torch.int16))
    check_kvcache(kp, **kw, compare_cpu=False)  # and both against the reference
    if size:
        with pytest.raises(abi.FlashAttnError) as e:
            kp.run(kp.k_cache.clone(), kp.v_cache.clone(), workspace=workspace[:size - 256], **kw)
        assert e.value.status == "FA_ERROR_INVALID_ARGUMENT" and "fa_kvcache_workspace_size" in e.value.message
        big = torch.empty(size + 64, dtype=torch.uint8, device=DEV)
        with pytest.raises(abi.FlashAttnError) as e:
            kp.run(kp.k_cache.clone(), kp.v_cache.clone(), workspace=big[8:], **kw)
        assert "16-byte aligned" in e.value.message


def test_kvcache_decode_steps():
    """Each call appends after the previous one's rows and sees them."""
    torch.manual_seed(5)
    kp = KvProblem(batch=2, seqlen_q=1, seqlen_new=1, capacity=128, heads=4, heads_k=2, d=64, dtype=torch.bfloat16,
                   page=16, rotary=1.0, cache_seqlens=[20, 33], seed=5)
    for step in range(4):
        check_kvcache(kp, causal=True)
        # Keep what this step appended (the library's own result) and move on by one row.
        kp.run(kp.k_cache, kp.v_cache, causal=True)
        kp.lens = [n + 1 for n in kp.lens]
        kp.cache_seqlens += 1
        kp.q, kp.k_new, kp.v_new = rand(*kp.q.shape), rand(*kp.k_new.shape), rand(*kp.v_new.shape)


# ---------------------------------------------------------------------------------------------
# Paged K/V and split-KV in the ordinary entry points.

def make_pool(lengths, page, heads_k, d, dtype, seed):
    """A shuffled pool holding each sequence's rows; returns (k_pool, v_pool, table, contiguous k/v per sequence)."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(1, max((n + page - 1) // page for n in lengths))
    num_blocks = len(lengths) * max_blocks + 2
    perm = torch.randperm(num_blocks, generator=g)
    table = torch.full((len(lengths), max_blocks), -1, dtype=torch.int32)
    k_pool = torch.full((num_blocks, page, heads_k, d), float("nan"), dtype=dtype, device=DEV)
    v_pool = torch.full_like(k_pool, float("nan"))
    seqs = []
    for b, n in enumerate(lengths):
        used = (n + page - 1) // page
        table[b, :used] = perm[b * max_blocks:b * max_blocks + used].to(torch.int32)
        k, v = rand(n, heads_k, d, dtype=dtype), rand(n, heads_k, d, dtype=dtype)
        rows = torch.arange(n, device=DEV)
        blocks = table[b].to(DEV)[rows // page].long()
        k_pool[blocks, rows % page], v_pool[blocks, rows % page] = k, v
        seqs.append((k, v))
    return k_pool, v_pool, table.to(DEV), seqs


@pytest.mark.parametrize("page", [16, 64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_varlen_forward(page, causal):
    torch.manual_seed(page + causal)
    lq, lk = [1, 37, 0, 128, 5], [300, 37, 19, 600, 0]
    k_pool, v_pool, table, seqs = make_pool(lk, page, 2, 64, torch.float16, page)
    q = rand(sum(lq), 8, 64, dtype=torch.float16)
    out, lse = abi.paged_forward(q, k_pool, v_pool, table, causal=causal, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk),
                                 max_seqlen_q=max(lq), max_seqlen_k=max(lk))
    sync()
    k = torch.cat([s[0] for s in seqs]), torch.cat([s[1] for s in seqs])
    kw = dict(causal=causal, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk))
    ref, ref_lse, _ = attention_ref(q, k[0], k[1], **kw)
    naive, naive_lse, _ = attention_ref(q, k[0], k[1], precision=q.dtype, **kw)
    assert_close("paged varlen out", out, ref, naive)
    assert_lse_close("paged varlen lse", lse, ref_lse, naive_lse)


@pytest.mark.parametrize("num_splits", [1, 0, 7])
@pytest.mark.parametrize("seqlen_q", [1, 3, 128])
def test_paged_dense_forward(num_splits, seqlen_q):
    """Dense q, pool of page 16, lengths through seqused_k; GQA 4 (packed heads when seqlen_q = 1)."""
    torch.manual_seed(seqlen_q + num_splits)
    lk = [5000, 333, 1]
    k_pool, v_pool, table, seqs = make_pool(lk, 16, 2, 128, torch.bfloat16, seqlen_q)
    q = rand(len(lk), seqlen_q, 8, 128)
    used = torch.tensor(lk, dtype=torch.int32, device=DEV)
    out, lse = abi.paged_forward(q, k_pool, v_pool, table, causal=True, seqused_k=used, seqlen_k=max(lk),
                                 num_splits=num_splits)
    sync()
    k = torch.nn.utils.rnn.pad_sequence([s[0] for s in seqs], batch_first=True)
    v = torch.nn.utils.rnn.pad_sequence([s[1] for s in seqs], batch_first=True)
    ref, ref_lse, _ = attention_ref(q, k, v, causal=True, seqused_k=used)
    naive, naive_lse, _ = attention_ref(q, k, v, causal=True, seqused_k=used, precision=q.dtype)
    assert_close("paged dense out", out, ref, naive)
    assert_lse_close("paged dense lse", lse, ref_lse, naive_lse)


@pytest.mark.parametrize("num_splits", [0, 2, 7, 64])
@pytest.mark.parametrize("shape", [(1, 32768, 32, 8), (3, 4096, 8, 8), (128, 2048, 4, 1), (1, 300, 6, 2)],
                         ids=lambda s: f"sq{s[0]}-sk{s[1]}-h{s[2]}q{s[3]}kv")
def test_split_kv_contiguous(num_splits, shape):
    """fa_forward on contiguous K/V with num_splits != 1: the inference kernel, fp32 partials and the
    combine; ALiBi and a local window on some shapes; bitwise reproducible."""
    torch.manual_seed(num_splits + shape[1])
    sq, sk, hq, hk = shape
    q, k, v = rand(2, sq, hq, 128), rand(2, sk, hk, 128), rand(2, sk, hk, 128)
    kw = dict(causal=sq > 1)
    if sk == 300:
        kw.update(window=(100, 0), alibi_slopes=torch.rand(hq, device=DEV) * 0.2)
    out, lse = abi.paged_forward(q, k, v, None, num_splits=num_splits, **kw)
    sync()
    ref, ref_lse, _ = attention_ref(q, k, v, **kw)
    naive, naive_lse, _ = attention_ref(q, k, v, precision=q.dtype, **kw)
    assert_close("split-KV out", out, ref, naive)
    assert_lse_close("split-KV lse", lse, ref_lse, naive_lse)
    out2, lse2 = abi.paged_forward(q, k, v, None, num_splits=num_splits, **kw)
    assert torch.equal(out, out2) and torch.equal(lse, lse2), "split-KV is not reproducible"


# What fa_forward takes scratch for: split-KV's partials (contiguous and paged), the packed copies of
# a head dim that is not a multiple of 8, and none (paged varlen, one split).
FWD_WORKSPACE_CASES = {
    "split_kv": dict(num_splits=5, d=128, page=None, varlen=False),
    "split_kv_paged": dict(num_splits=0, d=128, page=16, varlen=False),
    "padded_head_dim": dict(num_splits=1, d=100, page=None, varlen=False),
    "no_scratch": dict(num_splits=1, d=64, page=16, varlen=True),
}


@cuda_only
@pytest.mark.parametrize("case", list(FWD_WORKSPACE_CASES))
def test_forward_workspace(case):
    """fa_(varlen_)forward_with_workspace: exactly fa_forward_workspace_size bytes, filled with NaN bytes,
    give the bytes of the library's own scratch; one 256-byte piece short, or misaligned, is refused
    naming the size query or the alignment."""
    spec = FWD_WORKSPACE_CASES[case]
    torch.manual_seed(11)
    d, lk = spec["d"], [700, 1500]
    if spec["page"]:
        k, v, table, seqs = make_pool(lk, spec["page"], 2, d, torch.bfloat16, 11)
        k_ref = torch.nn.utils.rnn.pad_sequence([s_[0] for s_ in seqs], batch_first=True)
        v_ref = torch.nn.utils.rnn.pad_sequence([s_[1] for s_ in seqs], batch_first=True)
    else:
        k, v, table = rand(2, max(lk), 2, d), rand(2, max(lk), 2, d), None
        k_ref, v_ref = k, v
    if spec["varlen"]:
        lq = [3, 1]
        q = rand(sum(lq), 8, d)
        kw = dict(causal=True, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk), max_seqlen_q=max(lq), max_seqlen_k=max(lk))
        ref_kw = dict(causal=True, cu_seqlens_q=cu(lq), cu_seqlens_k=cu(lk))
        k_ref, v_ref = torch.cat([s_[0] for s_ in seqs]), torch.cat([s_[1] for s_ in seqs])
    else:
        q = rand(2, 1, 8, d)
        used = torch.tensor(lk, dtype=torch.int32, device=DEV)
        kw = dict(causal=True, seqused_k=used, seqlen_k=max(lk))
        ref_kw = dict(causal=True, seqused_k=used)
    kw["num_splits"] = spec["num_splits"]
    size = abi.forward_workspace_size(q, k, v, table, **kw)
    assert (size == 0) == (case == "no_scratch"), f"workspace size {size}"
    out1, lse1 = abi.paged_forward(q, k, v, table, **kw)  # the library's own scratch
    workspace = torch.full((max(size, 1),), 255, dtype=torch.uint8, device=DEV)
    out2, lse2 = abi.paged_forward(q, k, v, table, workspace=workspace[:size], **kw)
    sync()
    assert torch.equal(out1.view(torch.int16), out2.view(torch.int16)), "out differs with a workspace"
    assert torch.equal(lse1, lse2), "lse differs with a workspace"
    ref, ref_lse, _ = attention_ref(q, k_ref, v_ref, **ref_kw)
    naive, naive_lse, _ = attention_ref(q, k_ref, v_ref, precision=q.dtype, **ref_kw)
    assert_close(f"forward with a workspace ({case}) out", out2, ref, naive)
    assert_lse_close(f"forward with a workspace ({case}) lse", lse2, ref_lse, naive_lse)
    if size:
        with pytest.raises(abi.FlashAttnError) as e:
            abi.paged_forward(q, k, v, table, workspace=workspace[:size - 256], **kw)
        assert e.value.status == "FA_ERROR_INVALID_ARGUMENT" and "fa_forward_workspace_size" in e.value.message
        big = torch.empty(size + 64, dtype=torch.uint8, device=DEV)
        with pytest.raises(abi.FlashAttnError) as e:
            abi.paged_forward(q, k, v, table, workspace=big[8:size + 8], **kw)
        assert "16-byte aligned" in e.value.message


# ---------------------------------------------------------------------------------------------
# fa_combine.

# (splits, d, gap between splits in floats): the device kernel loads float4s when the layout allows
# (d and every stride a multiple of 4) and single floats otherwise; it holds 64 splits' weights at a
# time, so 70 and 100 splits take two chunks; d 256 takes two passes of 128 columns.
COMBINE_LAYOUTS = [(5, 40, 11), (4, 30, 0), (100, 128, 0), (70, 256, 0), (33, 64, 4)]


@pytest.mark.parametrize("splits,d,gap", COMBINE_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_combine_with_empty_splits_and_strides(dtype, splits, d, gap):
    torch.manual_seed(7)
    batch, rows, heads = 2, 9, 3
    # partials stored (split, batch, heads, rows, d) with a gap between splits; lse (split, rows, batch, heads).
    store = torch.full((splits, batch * heads * rows * d + gap), float("nan"), device=DEV)
    partial = store[:, :batch * heads * rows * d].view(splits, batch, heads, rows, d).transpose(2, 3)
    lse_store = torch.randn(splits, rows, batch, heads, device=DEV) * 5
    lse_partial = lse_store.permute(0, 2, 3, 1)  # (split, batch, heads, rows) view
    s_idx, b_idx, h_idx, i_idx = torch.meshgrid(torch.arange(splits), torch.arange(batch), torch.arange(heads),
                                                torch.arange(rows), indexing="ij")
    empty = ((i_idx == 0) | (s_idx == 2) | ((i_idx + s_idx + h_idx) % 4 == 0)).to(DEV)
    lse_partial.masked_fill_(empty, float("-inf"))
    full = torch.randn(splits, batch, rows, heads, d, device=DEV)
    keep = ~empty.permute(0, 1, 3, 2)[..., None].expand_as(full)
    partial.copy_(torch.where(keep, full, torch.full_like(full, float("nan"))))  # empty splits stay NaN
    out = torch.full((batch, rows, heads, d), float("nan"), dtype=dtype, device=DEV)
    lse = torch.full((batch, heads, rows), float("nan"), device=DEV)
    abi.combine(partial, lse_partial, out, lse)
    sync()
    # fp64 formula.
    l64 = lse_partial.double()
    m = l64.max(dim=0).values
    finite = m > float("-inf")
    m_safe = torch.where(finite, m, torch.zeros_like(m))
    w = torch.exp(l64 - m_safe)
    total = w.sum(dim=0)
    ref_lse = torch.where(finite, m_safe + torch.log(total), torch.full_like(m, float("-inf")))
    weights = torch.where(finite, w / total, torch.zeros_like(w))  # (split, batch, heads, rows)
    contrib = torch.where(keep, full.double(), torch.zeros_like(full.double()))
    ref_out = (weights.permute(0, 1, 3, 2)[..., None] * contrib).sum(dim=0)
    rel = {torch.float32: 1e-5, torch.bfloat16: 1 / 256, torch.float16: 1 / 2048}[dtype]
    err = ((out.double() - ref_out).abs() / ref_out.abs().clamp(min=1.0)).max().item()
    assert err <= rel, f"combine out error {err}"
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    assert (lse.double() - ref_lse)[finite].abs().max().item() < 1e-4
    assert torch.equal(out[:, 0].float(), torch.zeros_like(out[:, 0].float())), "rows with no key must be 0"


def test_combine_chunks_equal_full_attention():
    """Attention over key chunks (fp32 partial results written by combine's own caller), merged."""
    torch.manual_seed(8)
    q, k, v = rand(2, 5, 4, 64), rand(2, 700, 4, 64), rand(2, 700, 4, 64)
    cuts = [0, 1, 200, 200, 650, 700]
    parts, lses = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        o, l, _ = attention_ref(q, k[:, a:b], v[:, a:b], precision=torch.float64)
        parts.append(o.float())
        lses.append(l.float())
    partial, lse_partial = torch.stack(parts), torch.stack(lses)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((2, 4, 5), float("nan"), device=DEV)
    abi.combine(partial, lse_partial, out, lse)
    sync()
    ref, ref_lse, _ = attention_ref(q, k, v)
    naive, naive_lse, _ = attention_ref(q, k, v, precision=q.dtype)
    assert_close("combined", out, ref, naive)
    assert_lse_close("combined lse", lse, ref_lse, naive_lse)


# ---------------------------------------------------------------------------------------------
# Errors.

@cuda_only
def test_kvcache_errors_name_the_argument():
    kp = KvProblem(batch=2, seqlen_q=1, seqlen_new=1, capacity=64, heads=4, heads_k=2, d=64, dtype=torch.bfloat16)
    with pytest.raises(abi.FlashAttnError) as e:
        abi.kvcache_forward(kp.q, kp.k_cache, kp.v_cache, kp.cache_seqlens.cpu(), k=kp.k_new, v=kp.v_new)
    assert "cache_seqlens" in e.value.message
    with pytest.raises(abi.FlashAttnError) as e:
        abi.kvcache_forward(kp.q, kp.k_cache.cpu(), kp.v_cache, kp.cache_seqlens, k=kp.k_new, v=kp.v_new)
    assert e.value.status == "FA_ERROR_INVALID_ARGUMENT" and "k.data" in e.value.message
    with pytest.raises(abi.FlashAttnError) as e:  # a block table the device cannot read
        abi.kvcache_forward(kp.q, kp.k_cache, kp.v_cache, kp.cache_seqlens, k=kp.k_new, v=kp.v_new,
                            block_table=torch.zeros(2, 4, dtype=torch.int32))
    assert "block_table" in e.value.message
