"""Dropout: the pattern is Philox4x32-10 exactly as include/flashattn/philox.h defines it, the kept
fraction is 1 - p, torch.manual_seed reproduces runs, and the backward drops what the forward dropped."""

import pytest
import torch

import flashattn
from flashattn import _ops
from helpers import DEVICES, FLOOR, assert_within, randn, skip_if_unsupported
from reference import allowed_mask, attention_ref, philox_keep_mask


def _forward_with_rng_state(q, k, v, dropout_p, **options):
    """The operator itself, which also returns the (seed, offset) it drew."""
    scale = q.shape[-1] ** -0.5
    window = options.get("window_size", (-1, -1))
    out, lse, probs, rng_state = _ops.fwd(q, k, v, None, None, None, None, 0, 0, dropout_p, scale,
                                          options.get("causal", False), window[0], window[1], 0.0, True, False)
    return out, lse, probs, rng_state


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dropout_p", [0.17, 0.5])
def test_pattern_is_the_specified_philox_stream(device, dropout_p):
    torch.manual_seed(0)
    batch, seqlen_q, seqlen_k, heads = 2, 37, 70, 3
    q = randn(batch, seqlen_q, heads, 32, dtype=torch.bfloat16, device=device)
    k = randn(batch, seqlen_k, 1, 32, dtype=torch.bfloat16, device=device)
    v = randn(batch, seqlen_k, 1, 32, dtype=torch.bfloat16, device=device)
    _, _, probs, rng_state = _forward_with_rng_state(q, k, v, dropout_p, causal=True)
    seed, offset = (x & (2**64 - 1) for x in rng_state.tolist())
    expected_keep = philox_keep_mask(seed, offset, batch, heads, seqlen_q, seqlen_k, dropout_p)
    allowed = allowed_mask(seqlen_q, seqlen_k, [seqlen_k] * batch, True, (-1, -1)).expand_as(expected_keep)
    dropped = torch.signbit(probs.cpu())
    mismatches = (dropped == expected_keep) & allowed
    assert not mismatches.any(), f"{int(mismatches.sum())} of {int(allowed.sum())} allowed elements differ"


@pytest.mark.parametrize("device", DEVICES)
def test_kept_fraction_and_reproducibility(device):
    dropout_p = 0.3
    q, k, v = (randn(2, 128, 4, 32, dtype=torch.bfloat16, device=device) for _ in range(3))
    torch.manual_seed(123)
    out1, _, probs1 = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, return_attn_probs=True)
    torch.manual_seed(123)
    out2, _, probs2 = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, return_attn_probs=True)
    out3, _, probs3 = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, return_attn_probs=True)
    assert torch.equal(out1, out2) and torch.equal(probs1, probs2)
    assert not torch.equal(torch.signbit(probs1), torch.signbit(probs3)), "a new draw must change the mask"
    dropped = torch.signbit(probs1).float().mean().item()
    assert abs(dropped - dropout_p) < 0.01, f"dropped fraction {dropped:.4f}, expected {dropout_p}"
    # magnitudes are the undropped probabilities: rows sum to 1
    assert torch.allclose(probs1.abs().sum(-1), torch.ones(()), atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_forward_and_backward_use_the_same_mask(device, dtype):
    """Forward and gradients equal the reference computed with the mask the forward reports."""
    if dtype == torch.float32 and device != "cpu":
        pytest.skip("float32 is CPU-only")
    dropout_p = 0.25
    torch.manual_seed(7)
    options = dict(causal=True, softcap=8.0)
    q = randn(2, 40, 4, 64, dtype=dtype, device=device, requires_grad=True)
    k = randn(2, 56, 2, 64, dtype=dtype, device=device, requires_grad=True)
    v = randn(2, 56, 2, 64, dtype=dtype, device=device, requires_grad=True)
    alibi = torch.rand(4) * 0.2
    dout = randn(2, 40, 4, 64, dtype=dtype, device=device)
    out, _, probs = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, alibi_slopes=alibi.to(device),
                                              return_attn_probs=True, **options)
    keep = ~torch.signbit(probs.cpu())
    refs = {}
    for name, upcast in (("ref", True), ("naive", False)):
        leaves = [t.detach().cpu().requires_grad_() for t in (q, k, v)]
        o, _, p = attention_ref(*leaves, keep_mask=keep, dropout_p=dropout_p, alibi_slopes=alibi, upcast=upcast,
                                **options)
        o.backward(dout.cpu().to(o.dtype))
        refs[name] = (o, p, *[t.grad for t in leaves])
    assert_within("out", out, refs["ref"][0], refs["naive"][0], 2, FLOOR[dtype])
    assert_within("|attn_probs|", probs.abs(), refs["ref"][1], refs["naive"][1], 2, FLOOR[dtype])
    with skip_if_unsupported(f"backward on {device}"):
        out.backward(dout)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert_within(name, (q, k, v)[i].grad, refs["ref"][2 + i], refs["naive"][2 + i], 3, FLOOR[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_dropout_reproducible(device):
    cu = torch.tensor([0, 30, 31, 64], dtype=torch.int32, device=device)
    q, k, v = (randn(64, 2, 32, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
    outs = []
    for _ in range(2):
        torch.manual_seed(11)
        out = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 33, 33, dropout_p=0.4, causal=True)
        with skip_if_unsupported(f"varlen backward on {device}"):
            out.float().sum().backward()
        outs.append((out.detach().clone(), q.grad.clone()))
        q.grad = k.grad = v.grad = None
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    torch.manual_seed(11)
    no_dropout = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 33, 33, causal=True)
    assert not torch.equal(no_dropout, outs[0][0])
