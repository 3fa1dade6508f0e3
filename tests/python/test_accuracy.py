"""Forward and backward of flash_attn_func against the float64 reference, with every option.

Tolerance (FlashAttention's rule): error <= 2x the error of a naive implementation in the same
precision (+ a few-ulp floor) for the output, 3x for the gradients.
"""

import pytest
import torch

import flashattn
from helpers import DEVICES, FLOOR, assert_lse_close, assert_within, dtypes_for, randn, skip_if_unsupported
from reference import attention_ref, flash_form_grads

# (id, shape: batch, seqlen_q, seqlen_k, heads, heads_k, head_dim, options)
CASES = [
    ("plain", (2, 64, 64, 4, 4, 64), {}),
    ("causal_q_shorter_gqa_pad", (2, 33, 80, 4, 2, 40), dict(causal=True)),
    ("causal_q_longer_mqa", (2, 80, 33, 4, 1, 32), dict(causal=True)),  # leading rows see no key
    ("window", (1, 70, 70, 2, 2, 64), dict(window_size=(16, 8))),
    ("window_left_gqa", (2, 100, 130, 6, 2, 128), dict(window_size=(32, -1))),
    ("window_right_only", (1, 40, 50, 2, 1, 16), dict(window_size=(-1, 3))),
    ("causal_and_window", (2, 64, 96, 4, 2, 64), dict(causal=True, window_size=(20, 5))),
    ("softcap", (2, 48, 64, 4, 4, 64), dict(softcap=5.0)),
    ("alibi_per_head", (2, 50, 70, 4, 2, 64), dict(alibi=(4,), causal=True)),
    ("alibi_per_batch_softcap", (2, 40, 40, 4, 4, 96), dict(alibi=(2, 4), softcap=20.0)),
    ("scale", (1, 32, 48, 2, 2, 64), dict(softmax_scale=0.3)),
    ("decode_row", (3, 1, 128, 8, 2, 64), dict(causal=True)),
    ("head_dim_1", (1, 17, 19, 2, 1, 1), {}),
    ("head_dim_12", (2, 17, 19, 2, 1, 12), dict(causal=True)),
    ("head_dim_256", (1, 40, 72, 2, 1, 256), dict(causal=True)),
    ("seqused_k", (2, 24, 48, 2, 2, 32), dict(seqused_k=[40, 0])),  # batch 1 has no keys at all
    # Decode shapes (at most 16 query rows, long keys, few sequences): on CUDA split-KV (the
    # library's rule), as flash_attn's forward splits by its heuristic.
    ("decode_gqa_long", (2, 1, 3000, 16, 4, 128), dict(causal=True)),
    ("decode_rows_softcap_window", (1, 4, 2500, 8, 2, 64), dict(causal=True, softcap=20.0, window_size=(700, 0))),
    ("decode_alibi_seqused", (2, 16, 1500, 4, 4, 128), dict(alibi=(4,), seqused_k=[1500, 37])),
    ("decode_mqa_d256", (1, 1, 2000, 8, 1, 256), {}),
]


def _run_case(device, dtype, shape, options):
    batch, seqlen_q, seqlen_k, heads, heads_k, head_dim = shape
    torch.manual_seed(0)
    q = randn(batch, seqlen_q, heads, head_dim, dtype=dtype, device=device, requires_grad=True)
    k = randn(batch, seqlen_k, heads_k, head_dim, dtype=dtype, device=device, requires_grad=True)
    v = randn(batch, seqlen_k, heads_k, head_dim, dtype=dtype, device=device, requires_grad=True)
    dout = randn(batch, seqlen_q, heads, head_dim, dtype=dtype, device=device)
    alibi = torch.rand(*options["alibi"], dtype=torch.float32) * 0.5 if "alibi" in options else None
    seqused = torch.tensor(options["seqused_k"], dtype=torch.int32) if "seqused_k" in options else None
    common = dict(softmax_scale=options.get("softmax_scale"), causal=options.get("causal", False),
                  softcap=options.get("softcap", 0.0))
    window = options.get("window_size", (-1, -1))

    out, lse, _ = flashattn.flash_attn_func(
        q, k, v, window_size=window, alibi_slopes=None if alibi is None else alibi.to(device),
        return_attn_probs=True, seqused_k=None if seqused is None else seqused.to(device), **common)
    assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
    assert lse.shape == (batch, heads, seqlen_q) and lse.dtype == torch.float32

    results = {}
    for name, upcast in (("ref", True), ("naive", False)):
        leaves = [t.detach().cpu().requires_grad_() for t in (q, k, v)]
        o, l, _ = attention_ref(*leaves, window=window, alibi_slopes=alibi, seqused_k=seqused, upcast=upcast,
                                **common)
        o.backward(dout.cpu().to(o.dtype))
        results[name] = (o, l, *[t.grad for t in leaves])

    ref, naive = results["ref"], results["naive"]
    assert_within("out", out, ref[0], naive[0], 2, FLOOR[dtype])
    assert_lse_close(lse, ref[1], 1e-4 if dtype == torch.float32 else 2e-3)

    with skip_if_unsupported(f"backward on {device}"):
        out.backward(dout)
    flash = flash_form_grads(*(t.detach().cpu() for t in (q, k, v, dout)), window=window, alibi_slopes=alibi,
                             seqused_k=seqused, **common)
    for i, name in enumerate(("dq", "dk", "dv")):
        grad = (q, k, v)[i].grad
        assert grad.shape == (q, k, v)[i].shape and grad.dtype == dtype
        assert_within(name, grad, ref[2 + i], (naive[2 + i], flash[i]), 3, FLOOR[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_matches_reference(device, case, dtype):
    if dtype not in dtypes_for(device):
        pytest.skip(f"{dtype} is not supported on {device}")
    _, shape, options = case
    _run_case(device, dtype, shape, options)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_keys_give_zero_and_minus_inf(device):
    """seqlen_k = 0: every row attends to nothing -> out 0, lse -inf, gradients 0, never NaN."""
    dtype = torch.bfloat16
    q = randn(2, 5, 2, 64, dtype=dtype, device=device, requires_grad=True)
    k = randn(2, 0, 2, 64, dtype=dtype, device=device, requires_grad=True)
    v = randn(2, 0, 2, 64, dtype=dtype, device=device, requires_grad=True)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert (out == 0).all() and torch.isneginf(lse).all()
    with skip_if_unsupported(f"backward on {device}"):
        out.float().sum().backward()
    assert (q.grad == 0).all() and k.grad.shape == k.shape


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs(device):
    """Any layout with a contiguous head_dim works without copies: (b, h, s, d) transposed views."""
    dtype = torch.bfloat16
    torch.manual_seed(1)
    q_bhsd = randn(2, 4, 37, 64, dtype=dtype, device=device)
    k_bhsd = randn(2, 2, 45, 64, dtype=dtype, device=device)
    v_bhsd = randn(2, 2, 45, 64, dtype=dtype, device=device)
    q, k, v = (t.transpose(1, 2) for t in (q_bhsd, k_bhsd, v_bhsd))
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    expected = flashattn.flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_backward_is_reproducible(device):
    dtype = torch.bfloat16
    torch.manual_seed(2)
    q, k, v = (randn(2, 64, 4, 64, dtype=dtype, device=device, requires_grad=True) for _ in range(3))
    grads = []
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        with skip_if_unsupported(f"backward on {device}"):
            flashattn.flash_attn_func(q, k, v, causal=True, deterministic=True).float().square().sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v)])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


@pytest.mark.parametrize("device", DEVICES)
def test_window_size_as_any_pair_of_integers(device):
    """flash_attn takes window_size as a tuple, a list, a tensor (as its tests pass it) or numpy integers."""
    np = pytest.importorskip("numpy")
    torch.manual_seed(4)
    q, k, v = (randn(1, 50, 2, 32, dtype=torch.bfloat16, device=device) for _ in range(3))
    cu = torch.tensor([0, 50], dtype=torch.int32, device=device)
    expected = flashattn.flash_attn_func(q, k, v, window_size=(17, 4))
    expected_varlen = flashattn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 50, 50, window_size=(17, 4))
    for window in ([17, 4], torch.tensor([17, 4]), torch.tensor([17, 4], device=device, dtype=torch.int32),
                   (np.int64(17), np.int32(4)), np.array([17, 4])):
        assert torch.equal(flashattn.flash_attn_func(q, k, v, window_size=window), expected), repr(window)
        out = flashattn.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 50, 50, window_size=window)
        assert torch.equal(out, expected_varlen), repr(window)
    assert not torch.equal(flashattn.flash_attn_func(q, k, v, window_size=(4, 17)), expected)
