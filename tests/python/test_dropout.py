"""Dropout: the pattern is Philox4x32-10 exactly as include/flashattn/philox.h defines it, the kept
fraction is 1 - p, torch.manual_seed reproduces runs, and the backward drops what the forward dropped."""

import pytest
import torch

import flashattn
from flashattn import _ops
from helpers import DEVICES, FLOOR, assert_within, dtypes_for, randn, skip_if_unsupported
from reference import allowed_mask, attention_ref, flash_form_grads, philox_keep_mask


def _forward_with_rng_state(q, k, v, dropout_p, **options):
    """The operator itself, which also returns the (seed, offset) it drew."""
    scale = q.shape[-1] ** -0.5
    window = options.get("window_size", (-1, -1))
    out, lse, probs, rng_state = _ops.fwd(q, k, v, None, None, None, None, None, 0, 0, dropout_p, scale,
                                          options.get("causal", False), window[0], window[1], 0.0, True, False)
    return out, lse, probs, rng_state


def _references(q, k, v, dout, **options):
    """{"ref": in float64, "naive": in the inputs' dtype}: attention_ref's (out, probs, dq, dk, dv)."""
    refs = {}
    for name, upcast in (("ref", True), ("naive", False)):
        leaves = [t.detach().cpu().requires_grad_() for t in (q, k, v)]
        o, _, p = attention_ref(*leaves, upcast=upcast, **options)
        o.backward(dout.cpu().to(o.dtype))
        refs[name] = (o, p, *[t.grad for t in leaves])
    return refs


def _assert_gradients_within(q, k, v, dout, refs, dtype, **options):
    """q, k, v's gradients within 3x the worse naive error: autograd's or FlashAttention's formulas'
    (reference.flash_form_grads)."""
    flash = flash_form_grads(*(t.detach().cpu() for t in (q, k, v, dout)), **options)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert_within(name, (q, k, v)[i].grad, refs["ref"][2 + i], (refs["naive"][2 + i], flash[i]), 3,
                      FLOOR[dtype])


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
    ref_options = dict(keep_mask=~torch.signbit(probs.cpu()), dropout_p=dropout_p, alibi_slopes=alibi, **options)
    refs = _references(q, k, v, dout, **ref_options)
    assert_within("out", out, refs["ref"][0], refs["naive"][0], 2, FLOOR[dtype])
    assert_within("|attn_probs|", probs.abs(), refs["ref"][1], refs["naive"][1], 2, FLOOR[dtype])
    with skip_if_unsupported(f"backward on {device}"):
        out.backward(dout)
    _assert_gradients_within(q, k, v, dout, refs, dtype, **ref_options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", [(40, 1, {}), (48, 16, dict(causal=True))], ids=["one_key", "causal_q_longer"])
def test_rows_that_see_one_key(device, dtype, shape):
    """A row that sees one key has P = 1: a framework's dS = P (dP - rowsum(P dP)) is exactly 0, while
    FlashAttention's D = rowsum(dO O) carries O's rounding (with dropout, O = v / (1 - p) rounded). The
    gradients must stay within 3x the worse of the two naive forms (reference.flash_form_grads), not of
    autograd's alone, which is exact there."""
    if dtype not in dtypes_for(device):
        pytest.skip(f"{dtype} is not supported on {device}")
    seqlen_q, seqlen_k, options = shape
    dropout_p = 0.3
    torch.manual_seed(3)
    q = randn(2, seqlen_q, 4, 64, dtype=dtype, device=device, requires_grad=True)
    k = randn(2, seqlen_k, 2, 64, dtype=dtype, device=device, requires_grad=True)
    v = randn(2, seqlen_k, 2, 64, dtype=dtype, device=device, requires_grad=True)
    dout = randn(2, seqlen_q, 4, 64, dtype=dtype, device=device)
    out, _, probs = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, return_attn_probs=True, **options)
    ref_options = dict(keep_mask=~torch.signbit(probs.cpu()), dropout_p=dropout_p, **options)
    refs = _references(q, k, v, dout, **ref_options)
    assert_within("out", out, refs["ref"][0], refs["naive"][0], 2, FLOOR[dtype])
    with skip_if_unsupported(f"backward on {device}"):
        out.backward(dout)
    _assert_gradients_within(q, k, v, dout, refs, dtype, **ref_options)


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


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_attn_probs_are_the_padded_s_dmask(device):
    """flash_attn's varlen S_dmask: (batch, heads, max_seqlen_q, max_seqlen_k), sequence b's query i and key j
    at [b, :, i, j], dropped entries negated (the Philox pattern of that (b, i, j)), 0 past the lengths."""
    torch.manual_seed(5)
    dropout_p = 0.3
    q_lens, k_lens = [7, 0, 12], [9, 4, 15]
    cu_q = torch.tensor([0, 7, 7, 19], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 9, 13, 28], dtype=torch.int32, device=device)
    q = randn(19, 4, 32, dtype=torch.bfloat16, device=device)
    k, v = (randn(28, 2, 32, dtype=torch.bfloat16, device=device) for _ in range(2))
    out, lse, probs = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 12, 15, dropout_p=dropout_p, causal=True,
                                                       return_attn_probs=True)
    assert probs.shape == (3, 4, 12, 15) and probs.dtype == torch.float32
    probs = probs.cpu()
    for b in range(3):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        inside = probs[b, :, :q_lens[b], :k_lens[b]]
        _, _, ref = attention_ref(q[qs].cpu()[None], k[ks].cpu()[None], v[ks].cpu()[None], causal=True)
        torch.testing.assert_close(inside.abs(), ref[0].float(), atol=2e-3, rtol=0)
        outside = probs[b].clone()
        outside[:, :q_lens[b], :k_lens[b]] = 0
        assert not outside.abs().any(), f"sequence {b}: entries past its lengths must be 0"
        if q_lens[b]:
            row_sums = inside.abs().sum(-1)
            assert torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-4)
    dropped = torch.signbit(probs).float()[probs != 0].mean().item()
    assert abs(dropped - dropout_p) < 0.06, f"dropped fraction {dropped:.3f}, expected {dropout_p}"


def _forward_by_value(q, k, v, dropout_p, seed, offset, causal=False):
    """fa_forward with (seed, offset) in rng_seed/rng_offset (no rng_state pointer)."""
    out, lse = _ops._forward_outputs(q, v, None)
    probs = _ops._probs_output(q, k, None, 0, 0, True)
    params = _ops._fwd_params(q, k, v, out, lse, probs, None, None, None, None, None, 0, 0, dropout_p,
                              q.shape[-1] ** -0.5, causal, -1, -1, 0.0, None)
    params.rng_seed, params.rng_offset = seed, offset
    _ops.lib.check(_ops.lib.forward(params))
    return out, probs


@pytest.mark.parametrize("device", DEVICES)
def test_rng_state_pointer_equals_the_same_pair_by_value(device):
    """The package passes (seed, offset) by address; the library must drop what those values drop."""
    torch.manual_seed(3)
    dropout_p = 0.35
    q = randn(2, 45, 4, 32, dtype=torch.bfloat16, device=device)
    k, v = (randn(2, 66, 2, 32, dtype=torch.bfloat16, device=device) for _ in range(2))
    out, _, probs, rng_state = _forward_with_rng_state(q, k, v, dropout_p, causal=True)
    assert rng_state.device == q.device and rng_state.dtype == torch.int64 and rng_state.shape == (2,)
    seed, offset = rng_state.tolist()  # 62-bit draws: non-negative
    expected_out, expected_probs = _forward_by_value(q, k, v, dropout_p, seed, offset, causal=True)
    assert torch.equal(out, expected_out)
    assert torch.equal(probs, expected_probs)
    other_out, _ = _forward_by_value(q, k, v, dropout_p, seed, offset + 1, causal=True)
    assert not torch.equal(out, other_out), "another offset must change the mask"


@pytest.mark.parametrize("device", DEVICES)
def test_manual_seed_reproduces_the_drawn_rng_state(device):
    q, k, v = (randn(1, 32, 2, 32, dtype=torch.bfloat16, device=device) for _ in range(3))
    torch.manual_seed(21)
    first = _forward_with_rng_state(q, k, v, 0.2)[3].clone()
    second = _forward_with_rng_state(q, k, v, 0.2)[3].clone()
    torch.manual_seed(21)
    again = _forward_with_rng_state(q, k, v, 0.2)[3]
    assert torch.equal(first, again)
    assert not torch.equal(first, second), "every draw must be new"


@pytest.mark.parametrize("device", DEVICES)
def test_backward_reads_the_saved_rng_state(device):
    """The backward gets the forward's rng_state tensor: gradients equal the bwd operator's with that
    tensor, and differ from those with another pair."""
    torch.manual_seed(4)
    dropout_p, scale = 0.3, 32 ** -0.5
    q, k, v = (randn(1, 40, 2, 32, dtype=torch.bfloat16, device=device, requires_grad=True) for _ in range(3))
    dout = randn(1, 40, 2, 32, dtype=torch.bfloat16, device=device)
    out, lse, _, rng_state = _ops.attention(q, k, v, None, None, None, None, None, 0, 0, dropout_p, scale, False, -1, -1,
                                            0.0, False, True)
    with skip_if_unsupported(f"backward on {device}"):
        out.backward(dout)
    options = (0, 0, dropout_p, scale, False, -1, -1, 0.0, True)
    leaves = [t.detach() for t in (q, k, v)]
    same = _ops.bwd(dout, *leaves, out.detach(), lse, None, None, None, None, None, rng_state, *options)
    for got, expected in zip((q.grad, k.grad, v.grad), same):
        assert torch.equal(got, expected)
    shifted = rng_state.clone()
    shifted[1] += 1
    other = _ops.bwd(dout, *leaves, out.detach(), lse, None, None, None, None, None, shifted, *options)
    assert not torch.equal(other[0], q.grad)
