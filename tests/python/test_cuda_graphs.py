"""CUDA-graph capture and replay: outputs come from torch's allocator, work runs on the current stream,
nothing synchronises with the host. Skipped (with the reason) where there is no GPU."""

import pytest
import torch

import flashattn
from flashattn import _ops
from helpers import NO_CUDA_REASON, CUDA, randn, skip_if_unsupported

pytestmark = pytest.mark.skipif(not CUDA, reason=NO_CUDA_REASON)


def _warm_up(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_forward_capture_and_replay(varlen):
    torch.manual_seed(0)
    if varlen:
        q, k, v = (randn(96, 8, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        cu = torch.tensor([0, 40, 41, 96], dtype=torch.int32, device="cuda")

        def fn():
            return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 55, 55, causal=True)
    else:
        q = randn(2, 128, 8, 128, dtype=torch.bfloat16, device="cuda")
        k, v = (randn(2, 160, 2, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2))

        def fn():
            return flashattn.flash_attn_func(q, k, v, causal=True, softcap=30.0)

    _warm_up(fn)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn()
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        graph.replay()
        torch.testing.assert_close(static_out, fn(), rtol=0, atol=0)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_decode_capture_and_replay(paged):
    """A decode step (one query token, GQA, split-KV: the decode kernel, then the combine, on sm_90
    a programmatic dependent launch) captured and replayed: the same result as eager."""
    torch.manual_seed(3)
    batch, cache_len, heads, heads_k, d = 2, 4096, 8, 2, 128
    q = randn(batch, 1, heads, d, dtype=torch.bfloat16, device="cuda")
    k_cache, v_cache = (randn(batch, cache_len, heads_k, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    lengths = torch.tensor([cache_len, 1000], dtype=torch.int32, device="cuda")
    block_table = None
    if paged:  # pages of 16 rows in a shuffled pool
        page, per_seq = 16, cache_len // 16
        order = torch.randperm(batch * per_seq, device="cuda")
        block_table = order.view(batch, per_seq).to(torch.int32)
        pool_k, pool_v = (torch.empty(batch * per_seq, page, heads_k, d, dtype=torch.bfloat16, device="cuda")
                          for _ in range(2))
        pool_k[order] = k_cache.view(batch * per_seq, page, heads_k, d)
        pool_v[order] = v_cache.view(batch * per_seq, page, heads_k, d)
        k_cache, v_cache = pool_k, pool_v

    def fn():
        return flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, block_table=block_table,
                                                 causal=True, return_softmax_lse=True)

    _warm_up(fn)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_lse = fn()
    for _ in range(3):
        q.copy_(torch.randn_like(q))
        graph.replay()
        out, lse = fn()
        torch.testing.assert_close(static_out, out, rtol=0, atol=0)
        torch.testing.assert_close(static_lse, lse, rtol=0, atol=0)


def test_forward_backward_graphed_callable():
    torch.manual_seed(1)

    def attention(q, k, v):
        return flashattn.flash_attn_func(q, k, v, causal=True)

    q = randn(2, 64, 4, 64, dtype=torch.float16, device="cuda", requires_grad=True)
    k, v = (randn(2, 64, 4, 64, dtype=torch.float16, device="cuda", requires_grad=True) for _ in range(2))
    with skip_if_unsupported("CUDA backward"):
        graphed = torch.cuda.make_graphed_callables(attention, (q, k, v))
        out = graphed(q, k, v)
        out.float().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    attention(q, k, v).float().sum().backward()
    for got, expected in zip(grads, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _eager_with_rng_state(q, k, v, dout, rng_state, dropout_p, scale, causal):
    """Forward and backward outside any graph, with a given (seed, offset) tensor instead of a draw."""
    out, lse = _ops._forward_outputs(q, v, None)
    params = _ops._fwd_params(q, k, v, out, lse, None, None, None, None, None, None, 0, 0, dropout_p, scale, causal,
                              -1, -1, 0.0, rng_state)
    _ops.lib.check(_ops.lib.forward(params))
    dq, dk, dv, _ = _ops.backward_impl(dout, q, k, v, out, lse, None, None, None, None, None, rng_state, 0, 0,
                                       dropout_p, scale, causal, -1, -1, 0.0, True)
    return out, dq, dk, dv


def test_dropout_capture_each_replay_draws_a_new_mask():
    """Forward and backward with dropout captured in one graph: the (seed, offset) draw is a torch random
    op in the graph, so every replay draws a new pair, and the kernels read it from device memory. Each
    replay equals an eager run with the pair it drew; two replays differ."""
    torch.manual_seed(2)
    dropout_p, causal = 0.3, True
    q = randn(2, 128, 4, 64, dtype=torch.bfloat16, device="cuda")
    k, v = (randn(2, 160, 2, 64, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    dout = randn(2, 128, 4, 64, dtype=torch.bfloat16, device="cuda")
    scale = 64 ** -0.5

    def step():
        out, lse, _, rng_state = _ops.fwd(q, k, v, None, None, None, None, None, 0, 0, dropout_p, scale, causal, -1,
                                          -1, 0.0, False, True)
        dq, dk, dv, _ = _ops.bwd(dout, q, k, v, out, lse, None, None, None, None, None, rng_state, 0, 0, dropout_p,
                                 scale, causal, -1, -1, 0.0, True)
        return out, dq, dk, dv, rng_state

    with skip_if_unsupported("CUDA backward"):
        _warm_up(step)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = step()
    replays = []
    for _ in range(2):
        graph.replay()
        replays.append([t.clone() for t in static])
    torch.cuda.synchronize()
    first, second = replays
    assert not torch.equal(first[4], second[4]), "two replays drew the same (seed, offset)"
    assert not torch.equal(first[0], second[0]), "two replays used the same dropout mask"
    for replay in replays:
        expected = _eager_with_rng_state(q, k, v, dout, replay[4], dropout_p, scale, causal)
        for name, got, want in zip(("out", "dq", "dk", "dv"), replay[:4], expected):
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m, name=name: f"{name}: {m}")


def test_dropout_graphed_callable_draws_per_call():
    """The autograd path (rng_state saved for the backward) inside make_graphed_callables."""
    torch.manual_seed(5)

    def attention(q, k, v):
        return flashattn.flash_attn_func(q, k, v, dropout_p=0.2, causal=True)

    q, k, v = (randn(2, 64, 4, 64, dtype=torch.float16, device="cuda", requires_grad=True) for _ in range(3))
    with skip_if_unsupported("CUDA backward"):
        graphed = torch.cuda.make_graphed_callables(attention, (q, k, v))
        outs = []
        for _ in range(2):
            out = graphed(q, k, v)
            out.float().sum().backward()
            outs.append(out.detach().clone())
    assert not torch.equal(outs[0], outs[1]), "two calls of the graph used the same dropout mask"
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_runs_on_the_current_stream():
    """Queued behind a long producer on a side stream: wrong-stream launches would read stale inputs."""
    q, k, v = (randn(4, 256, 8, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    expected = flashattn.flash_attn_func(q, k, v)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keep the stream busy so a wrong stream would overtake
        q2 = q * 1  # produced on the side stream
        out = flashattn.flash_attn_func(q2, k, v)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
