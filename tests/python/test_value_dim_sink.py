"""A value head dim unlike the query's (v.shape[-1] != q.shape[-1]) and learnable sinks
(learnable_sink=), through every public function that takes them, against a torch reference in
float64: outputs, lse and gradients (dsink included), with causal, windows, GQA, varlen, dropout,
the KV cache and torch.compile. Both backends compute every case (a refusal is a failure)."""

import pytest
import torch

import flashattn
from flashattn import _ops
from helpers import DEVICES, FLOOR, assert_lse_close, assert_within, dtypes_for, randn
from reference import attention_ref, philox_keep_mask


def sink_attention_ref(q, k, v, sink=None, *, causal=False, window=(-1, -1), softcap=0.0, seqused_k=None,
                       keep_mask=None, dropout_p=0.0, upcast=True):
    """reference.attention_ref with a sink logit per query head: (out, lse) in float64 (upcast) or the
    inputs' dtype. q, k: (b, sq|sk, h|hk, d), v: (b, sk, hk, dv)."""
    out, lse, _ = attention_ref(q, k, v, causal=causal, window=window, softcap=softcap, seqused_k=seqused_k,
                                keep_mask=keep_mask, dropout_p=dropout_p, upcast=upcast, learnable_sink=sink)
    return out, lse


def _check_forward_and_backward(q, k, v, sink, dtype, **options):
    """flash_attn_func against the reference (float64) with FlashAttention's rule (the naive error of
    the same computation in the inputs' dtype sets the bound), gradients included."""
    out, lse, _ = flashattn.flash_attn_func(q, k, v, learnable_sink=sink, return_attn_probs=True, **options)
    assert out.shape == (*q.shape[:-1], v.shape[-1])
    ref_options = dict(causal=options.get("causal", False), window=options.get("window_size", (-1, -1)),
                       softcap=options.get("softcap", 0.0))
    leaves = [t for t in (q, k, v, sink) if t is not None]
    ref_out, ref_lse = sink_attention_ref(q, k, v, sink, **ref_options)
    naive_out, _ = sink_attention_ref(q, k, v, sink, upcast=False, **ref_options)
    assert_within("out", out, ref_out, naive_out, 2, FLOOR[dtype])
    assert_lse_close(lse, ref_lse, atol=1e-3 if dtype == torch.float32 else 2e-2)

    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, dout)
    ref_grads = torch.autograd.grad(ref_out, leaves, dout.double())
    naive_grads = torch.autograd.grad(naive_out, leaves, dout)
    for name, got, ref, naive in zip(("dq", "dk", "dv", "dsink"), grads, ref_grads, naive_grads):
        expected_dtype = torch.float32 if name == "dsink" else dtype
        assert got.dtype == expected_dtype, f"{name} has dtype {got.dtype}"
        # dsink sums one rounded term per row of its head: its floor grows with the rows it sums.
        floor = FLOOR[dtype] * (q.shape[0] * q.shape[1] if name == "dsink" else 1)
        assert_within(name, got, ref, naive, 3, floor)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_dims", [(192, 128), (64, 40), (24, 40), (6, 6)], ids=lambda d: f"d{d[0]}_{d[1]}")
@pytest.mark.parametrize("sink", [False, True], ids=["nosink", "sink"])
def test_func_value_head_dim_and_sink(device, head_dims, sink):
    torch.manual_seed(1)
    for dtype in dtypes_for(device):
        d, dv = head_dims
        q = randn(2, 37, 6, d, dtype=dtype, device=device, requires_grad=True)
        k = randn(2, 53, 2, d, dtype=dtype, device=device, requires_grad=True)
        v = randn(2, 53, 2, dv, dtype=dtype, device=device, requires_grad=True)
        s = torch.randn(6, device=device, requires_grad=True) if sink else None
        _check_forward_and_backward(q, k, v, s, dtype, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [dict(window_size=(8, 3)), dict(softcap=4.0), dict(causal=True, window_size=(0, -1))],
                         ids=["window", "softcap", "rows_without_keys"])
def test_func_sink_with_masks(device, options):
    torch.manual_seed(2)
    dtype = dtypes_for(device)[-1]
    q = randn(2, 50, 4, 64, dtype=dtype, device=device, requires_grad=True)
    k = randn(2, 30, 4, 64, dtype=dtype, device=device, requires_grad=True)
    v = randn(2, 30, 4, 32, dtype=dtype, device=device, requires_grad=True)
    sink = (torch.randn(4, device=device) * 2).requires_grad_()
    _check_forward_and_backward(q, k, v, sink, dtype, **options)


@pytest.mark.parametrize("device", DEVICES)
def test_rows_without_keys_give_zero_and_the_sink_as_lse(device):
    q = randn(1, 6, 2, 16, dtype=torch.bfloat16, device=device)
    k = randn(1, 3, 2, 16, dtype=torch.bfloat16, device=device)
    v = randn(1, 3, 2, 8, dtype=torch.bfloat16, device=device)
    sink = torch.tensor([0.5, -1.25], device=device)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink, return_attn_probs=True)
    # causal, 6 queries over 3 keys: rows 0..2 see no key
    assert torch.equal(out[:, :3].float().cpu(), torch.zeros(1, 3, 2, 8))
    # (the CUDA kernels keep the sink in their scores' units: equal up to a rounding or two)
    assert torch.allclose(lse[0, :, :3].cpu(), sink.cpu().view(2, 1).expand(2, 3), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_func_sink_with_dropout(device):
    """Dropout drops key probabilities only; the backward sees the same mask; dsink included."""
    torch.manual_seed(3)
    dtype, dropout_p = dtypes_for(device)[-1], 0.25
    q = randn(1, 40, 4, 32, dtype=dtype, device=device, requires_grad=True)
    k = randn(1, 48, 2, 32, dtype=dtype, device=device, requires_grad=True)
    v = randn(1, 48, 2, 16, dtype=dtype, device=device, requires_grad=True)
    sink = torch.randn(4, device=device, requires_grad=True)
    torch.manual_seed(11)
    out, lse, _, rng_state = _ops.attention(q, k, v, None, None, None, None, sink, 0, 0, dropout_p, 32 ** -0.5,
                                            True, -1, -1, 0.0, False, False)
    seed, offset = rng_state.tolist()
    keep = philox_keep_mask(seed, offset, 1, 4, 40, 48, dropout_p).to(device)
    ref_out, ref_lse = sink_attention_ref(q, k, v, sink, causal=True, keep_mask=keep, dropout_p=dropout_p)
    naive_out, _ = sink_attention_ref(q, k, v, sink, causal=True, keep_mask=keep, dropout_p=dropout_p, upcast=False)
    assert_within("out", out, ref_out, naive_out, 2, FLOOR[dtype])
    assert_lse_close(lse, ref_lse, atol=2e-2)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v, sink), dout)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v, sink), dout.double())
    naive_grads = torch.autograd.grad(naive_out, (q, k, v, sink), dout)
    for name, got, ref, naive in zip(("dq", "dk", "dv", "dsink"), grads, ref_grads, naive_grads):
        assert_within(name, got, ref, naive, 3, FLOOR[dtype] * (40 if name == "dsink" else 1))


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_value_head_dim_and_sink(device):
    torch.manual_seed(4)
    dtype = dtypes_for(device)[-1]
    q_lens, k_lens = [7, 0, 19, 3], [11, 5, 19, 0]
    cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
    q = randn(sum(q_lens), 4, 96, dtype=dtype, device=device, requires_grad=True)
    k = randn(sum(k_lens), 2, 96, dtype=dtype, device=device, requires_grad=True)
    v = randn(sum(k_lens), 2, 64, dtype=dtype, device=device, requires_grad=True)
    sink = torch.randn(4, device=device, requires_grad=True)
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), causal=True,
                                                   learnable_sink=sink, return_attn_probs=True)
    assert out.shape == (sum(q_lens), 4, 64)
    # The reference: sequence by sequence.
    outs, lses, naive_outs = [], [], []
    for b in range(len(q_lens)):
        rows = slice(int(cu_q[b]), int(cu_q[b + 1]))
        keys = slice(int(cu_k[b]), int(cu_k[b + 1]))
        o, l = sink_attention_ref(q[None, rows], k[None, keys], v[None, keys], sink, causal=True)
        n, _ = sink_attention_ref(q[None, rows], k[None, keys], v[None, keys], sink, causal=True, upcast=False)
        outs.append(o[0])
        lses.append(l[0])
        naive_outs.append(n[0])
    ref_out, naive_out = torch.cat(outs), torch.cat(naive_outs)
    assert_within("out", out, ref_out, naive_out, 2, FLOOR[dtype])
    assert_lse_close(lse, torch.cat(lses, dim=-1), atol=2e-2)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v, sink), dout)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v, sink), dout.double())
    naive_grads = torch.autograd.grad(naive_out, (q, k, v, sink), dout)
    for name, got, ref, naive in zip(("dq", "dk", "dv", "dsink"), grads, ref_grads, naive_grads):
        assert_within(name, got, ref, naive, 3, FLOOR[dtype] * (sum(q_lens) if name == "dsink" else 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_kvcache_value_head_dim_and_sink(device, paged):
    """Append (v_new as wide as v_cache), then attend with sinks; the caches as a plain concatenation."""
    torch.manual_seed(5)
    dtype = dtypes_for(device)[-1]
    batch, heads, heads_k, d, dv, cached, new = 2, 8, 2, 64, 32, [13, 30], 3
    capacity = 48
    q = randn(batch, new, heads, d, dtype=dtype, device=device)
    k_new = randn(batch, new, heads_k, d, dtype=dtype, device=device)
    v_new = randn(batch, new, heads_k, dv, dtype=dtype, device=device)
    k_rows = randn(batch, capacity, heads_k, d, dtype=dtype, device=device)
    v_rows = randn(batch, capacity, heads_k, dv, dtype=dtype, device=device)
    sink = torch.randn(heads, device=device)
    cache_seqlens = torch.tensor(cached, dtype=torch.int32, device=device)
    if paged:
        page = 16
        blocks = capacity // page
        table = torch.arange(batch * blocks, dtype=torch.int32, device=device).flip(0).view(batch, blocks).contiguous()
        k_cache = torch.empty(batch * blocks, page, heads_k, d, dtype=dtype, device=device)
        v_cache = torch.empty(batch * blocks, page, heads_k, dv, dtype=dtype, device=device)
        for b in range(batch):
            for blk in range(blocks):
                k_cache[table[b, blk]] = k_rows[b, blk * page:(blk + 1) * page]
                v_cache[table[b, blk]] = v_rows[b, blk * page:(blk + 1) * page]
    else:
        table, k_cache, v_cache = None, k_rows.clone(), v_rows.clone()
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cache_seqlens,
                                                 block_table=table, causal=True, learnable_sink=sink,
                                                 return_softmax_lse=True)
    assert out.shape == (batch, new, heads, dv)
    for b in range(batch):
        n = cached[b]
        keys = torch.cat([k_rows[b, :n], k_new[b]])[None]
        values = torch.cat([v_rows[b, :n], v_new[b]])[None]
        ref_out, ref_lse = sink_attention_ref(q[b:b + 1], keys, values, sink, causal=True)
        naive_out, _ = sink_attention_ref(q[b:b + 1], keys, values, sink, causal=True, upcast=False)
        assert_within(f"out[{b}]", out[b:b + 1], ref_out, naive_out, 2, FLOOR[dtype])
        assert_lse_close(lse[b:b + 1], ref_lse, atol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_packed_forms_keep_one_head_dim(device):
    """qkvpacked/kvpacked stack q, k, v (or k, v) in one tensor: one head dim, as before."""
    qkv = randn(1, 9, 3, 2, 16, dtype=torch.bfloat16, device=device)
    out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
    assert out.shape == (1, 9, 2, 16)


def test_gradcheck_cpu_fp32_sink_and_value_head_dim():
    torch.manual_seed(6)
    q = torch.randn(1, 4, 2, 6, requires_grad=True)
    k = torch.randn(1, 5, 1, 6, requires_grad=True)
    v = torch.randn(1, 5, 1, 3, requires_grad=True)
    sink = torch.randn(2, requires_grad=True)

    def fn(q, k, v, sink):
        return flashattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)

    assert torch.autograd.gradcheck(fn, (q, k, v, sink), eps=1e-3, atol=2e-3, rtol=2e-3, fast_mode=False)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_with_sink_and_value_head_dim(device):
    """torch.compile(fullgraph=True) traces flash_attn_func with learnable_sink and a narrower v; the
    compiled forward and gradients (the sink's included) equal eager ones."""
    torch._dynamo.reset()
    dtype = torch.float32 if device == "cpu" else torch.bfloat16

    def block(x, wq, wk, wv, sink):
        batch, seqlen, _ = x.shape
        q = (x @ wq).view(batch, seqlen, 4, 24)
        k = (x @ wk).view(batch, seqlen, 2, 24)
        v = (x @ wv).view(batch, seqlen, 2, 12)  # head_dim_v 12 (padded to 16 inside, traced too)
        out = flashattn.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)
        return out.reshape(batch, seqlen, -1).sum(-1)

    torch.manual_seed(0)
    x = randn(2, 16, 32, dtype=dtype, device=device)
    weights = [randn(32, n, dtype=dtype, device=device, requires_grad=True, scale=0.2) for n in (96, 48, 24)]
    sink = torch.randn(4, device=device, requires_grad=True)
    leaves = weights + [sink]
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    eager_out = block(x, *leaves)
    eager_grads = torch.autograd.grad(eager_out.square().sum(), leaves)
    out = compiled(x, *leaves)
    grads = torch.autograd.grad(out.square().sum(), leaves)
    torch.testing.assert_close(out, eager_out)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e)


def test_compile_fullgraph_varlen_and_kvcache_with_sink():
    torch._dynamo.reset()
    cu = torch.tensor([0, 5, 16], dtype=torch.int32)
    sink = torch.randn(2, requires_grad=True)

    def varlen(q, k, v, sink):
        return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 11, 11, causal=True, learnable_sink=sink)

    q, k = (torch.randn(16, 2, 16, requires_grad=True) for _ in range(2))
    v = torch.randn(16, 2, 8, requires_grad=True)
    compiled = torch.compile(varlen, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v, sink)
    (dsink,) = torch.autograd.grad(out.sum(), (sink,))
    eager = varlen(q, k, v, sink)
    (eager_dsink,) = torch.autograd.grad(eager.sum(), (sink,))
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(dsink, eager_dsink)

    def decode(q, k_cache, v_cache, sink):
        return flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=7, learnable_sink=sink)

    q1 = torch.randn(2, 1, 4, 16)
    k_cache, v_cache = torch.randn(2, 12, 2, 16), torch.randn(2, 12, 2, 8)
    with torch.no_grad():
        compiled_decode = torch.compile(decode, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled_decode(q1, k_cache, v_cache, sink.detach().repeat(2)),
                                   decode(q1, k_cache, v_cache, sink.detach().repeat(2)))


def test_opcheck_with_sink_and_value_head_dim():
    q = torch.randn(2, 9, 4, 16, requires_grad=True)
    k = torch.randn(2, 11, 2, 16, requires_grad=True)
    v = torch.randn(2, 11, 2, 8, requires_grad=True)
    sink = torch.randn(4, requires_grad=True)
    args = (q, k, v, None, None, None, None, sink, 0, 0, 0.0, 0.25, True, -1, -1, 0.0, False, False)
    torch.library.opcheck(_ops.fwd, args)
    out, lse, _, rng_state = _ops.fwd(*args)
    bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out.detach(), lse, None, None, None, None,
                sink.detach(), rng_state, 0, 0, 0.0, 0.25, True, -1, -1, 0.0, False)
    torch.library.opcheck(_ops.bwd, bwd_args)
