"""CUDA-graph capture and replay: outputs come from torch's allocator, work runs on the current stream,
nothing synchronises with the host. Skipped (with the reason) where there is no GPU."""

import pytest
import torch

import flashattn
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


def test_dropout_inside_capture_is_refused_clearly():
    q, k, v = (randn(1, 16, 2, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    flashattn.flash_attn_func(q, k, v, dropout_p=0.1)  # fine outside capture
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="CUDA graph capture"):
        with torch.cuda.graph(graph):
            flashattn.flash_attn_func(q, k, v, dropout_p=0.1)


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
