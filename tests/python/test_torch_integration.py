"""flashattn as PyTorch operators: opcheck, gradcheck, torch.compile(fullgraph=True)."""

import pytest
import torch

import flashattn
from flashattn import _ops
from helpers import DEVICES, backward_supported, randn, skip_if_unsupported


def _op_args(q, k, v, cu_q=None, cu_k=None, max_q=0, max_k=0, causal=True, softcap=0.0, alibi=None, sink=None):
    return (q, k, v, cu_q, cu_k, None, alibi, sink, max_q, max_k, 0.0, q.shape[-1] ** -0.5, causal, -1, -1, softcap,
            False, False)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_dense_and_varlen(device):
    """torch.library.opcheck: schema, fake tensors, autograd registration and AOT dispatch agree."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q = randn(2, 9, 4, 16, dtype=dtype, device=device, requires_grad=True)
    k = randn(2, 11, 2, 16, dtype=dtype, device=device, requires_grad=True)
    v = randn(2, 11, 2, 16, dtype=dtype, device=device, requires_grad=True)
    alibi = torch.rand(4, device=device)
    # Without a backward on this device, check everything but the parts that run it.
    checks = {} if backward_supported(device) else dict(
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    torch.library.opcheck(_ops.fwd, _op_args(q, k, v, softcap=2.0, alibi=alibi), **checks)

    cu = torch.tensor([0, 4, 9], dtype=torch.int32, device=device)
    qv, kv, vv = (t.detach()[:, :9].reshape(18, t.shape[2], 16)[:9].requires_grad_() for t in (q, k, v))
    torch.library.opcheck(_ops.fwd, _op_args(qv, kv, vv, cu, cu, 5, 5), **checks)

    if not backward_supported(device):
        pytest.skip(f"no backward on {device} in this build: flashattn::bwd not checked")
    out, lse, _, rng_state = _ops.fwd(*_op_args(q, k, v))
    dout = torch.randn_like(out)
    bwd_args = (dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, None, None, None, None, None, rng_state, 0, 0,
                0.0, 0.25, True, -1, -1, 0.0, False)
    torch.library.opcheck(_ops.bwd, bwd_args)


@pytest.mark.parametrize("options", [dict(causal=True), dict(softcap=2.0, alibi=True), dict(window_size=(2, 1))],
                         ids=["causal", "softcap_alibi", "window"])
def test_gradcheck_cpu_fp32(options):
    """Finite differences through the CPU backend. The library has no float64, so float32 with a
    step and tolerances sized for it: eps 1e-3 leaves ~1e-4 rounding noise in each difference."""
    torch.manual_seed(0)
    options = dict(options)
    alibi = torch.rand(2) if options.pop("alibi", False) else None
    q = torch.randn(1, 4, 2, 6, requires_grad=True)  # head_dim 6 also exercises the padding
    k = torch.randn(1, 5, 1, 6, requires_grad=True)
    v = torch.randn(1, 5, 1, 6, requires_grad=True)

    def fn(q, k, v):
        return flashattn.flash_attn_func(q, k, v, alibi_slopes=alibi, **options)

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-3, nondet_tol=0.0,
                                    fast_mode=False)


def test_gradcheck_cpu_fp32_dropout():
    """Seeding inside the function makes every evaluation draw the same mask."""
    q, k, v = (torch.randn(1, 4, 2, 8, requires_grad=True) for _ in range(3))

    def fn(q, k, v):
        torch.manual_seed(5)
        return flashattn.flash_attn_func(q, k, v, dropout_p=0.3, causal=True)

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_forward_backward(device):
    """No graph break around attention; compiled forward and gradients equal eager ones."""
    torch._dynamo.reset()
    dtype = torch.float32 if device == "cpu" else torch.bfloat16

    def block(x, wq, wk, wv):
        batch, seqlen, _ = x.shape
        q = (x @ wq).view(batch, seqlen, 4, 12)  # head_dim 12: the padding is traced too
        k = (x @ wk).view(batch, seqlen, 2, 12)
        v = (x @ wv).view(batch, seqlen, 2, 12)
        out = flashattn.flash_attn_func(q, k, v, causal=True, softcap=5.0)
        return out.reshape(batch, seqlen, -1).sum(-1)

    torch.manual_seed(0)
    x = randn(2, 16, 32, dtype=dtype, device=device)
    weights = [randn(32, n, dtype=dtype, device=device, requires_grad=True, scale=0.2) for n in (48, 24, 24)]
    compiled = torch.compile(block, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")
    with skip_if_unsupported(f"backward on {device}"):
        eager_out = block(x, *weights)
        eager_out.square().sum().backward()
        eager_grads = [w.grad.clone() for w in weights]
        for w in weights:
            w.grad = None
        out = compiled(x, *weights)
        out.square().sum().backward()
    torch.testing.assert_close(out, eager_out)
    for w, g in zip(weights, eager_grads):
        torch.testing.assert_close(w.grad, g)


def test_compile_inductor_cpu_varlen_and_dropout():
    """Inductor on the CPU; varlen; dropout inside a compiled graph follows torch.manual_seed."""
    torch._dynamo.reset()
    cu = torch.tensor([0, 5, 16], dtype=torch.int32)

    def fn(q, k, v):
        return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 11, 11, dropout_p=0.2, causal=True) * 2

    q, k, v = (torch.randn(16, 2, 16, requires_grad=True) for _ in range(3))
    compiled = torch.compile(fn, fullgraph=True)
    torch.manual_seed(3)
    out = compiled(q, k, v)
    out.sum().backward()
    compiled_grad = q.grad.clone()
    q.grad = None
    torch.manual_seed(3)
    eager = fn(q, k, v)
    eager.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(compiled_grad, q.grad)


def test_lse_is_not_differentiable():
    q, k, v = (torch.randn(1, 3, 1, 8, requires_grad=True) for _ in range(3))
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.requires_grad and not lse.requires_grad


def test_compile_varlen_with_changing_max_seqlen():
    """Recompiling for a new max_seqlen makes it a dynamic (symbolic) int: still one graph."""
    torch._dynamo.reset()

    def fn(q, cu, max_seqlen):
        return flashattn.flash_attn_varlen_func(q, q, q, cu, cu, max_seqlen, max_seqlen, causal=True)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    q = torch.randn(16, 2, 8)
    for lengths in ([5, 11], [9, 7], [3, 13]):
        cu = torch.tensor([0, lengths[0], 16], dtype=torch.int32)
        torch.testing.assert_close(compiled(q, cu, max(lengths)), fn(q, cu, max(lengths)))
