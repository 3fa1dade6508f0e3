"""The packed (qkv, kv) and variable-length forms agree with the dense function and the reference."""

import pytest
import torch

import flashattn
from helpers import DEVICES, FLOOR, assert_lse_close, assert_within, randn, skip_if_unsupported
from reference import varlen_ref


def _grads(*tensors):
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return grads


@pytest.mark.parametrize("device", DEVICES)
def test_qkvpacked_equals_unpacked(device):
    torch.manual_seed(0)
    qkv = randn(2, 50, 3, 4, 40, dtype=torch.bfloat16, device=device, requires_grad=True)
    dout = randn(2, 50, 4, 40, dtype=torch.bfloat16, device=device)
    out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True, window_size=(10, 0), softcap=3.0)
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_() for i in range(3))
    expected = flashattn.flash_attn_func(q, k, v, causal=True, window_size=(10, 0), softcap=3.0)
    assert torch.equal(out, expected)
    with skip_if_unsupported(f"backward on {device}"):
        out.backward(dout)
        expected.backward(dout)
    assert torch.equal(qkv.grad, torch.stack([q.grad, k.grad, v.grad], dim=2))


@pytest.mark.parametrize("device", DEVICES)
def test_kvpacked_equals_unpacked(device):
    torch.manual_seed(1)
    q = randn(2, 30, 6, 64, dtype=torch.float16, device=device, requires_grad=True)
    kv = randn(2, 45, 2, 2, 64, dtype=torch.float16, device=device, requires_grad=True)
    out, lse, probs = flashattn.flash_attn_kvpacked_func(q, kv, causal=True, return_attn_probs=True)
    assert probs is None  # as in flash_attn: S_dmask only with dropout
    k, v = (kv[:, :, i].detach().clone().requires_grad_() for i in range(2))
    q2 = q.detach().clone().requires_grad_()
    expected, expected_lse, _ = flashattn.flash_attn_func(q2, k, v, causal=True, return_attn_probs=True)
    assert torch.equal(out, expected) and torch.equal(lse, expected_lse)
    with skip_if_unsupported(f"backward on {device}"):
        out.float().sum().backward()
        expected.float().sum().backward()
    assert torch.equal(q.grad, q2.grad)
    assert torch.equal(kv.grad, torch.stack([k.grad, v.grad], dim=2))


def _varlen_inputs(device, dtype, q_lens, k_lens, heads, heads_k, head_dim, spare_rows=0):
    cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=torch.int32)
    total_q, total_k = int(cu_q[-1]) + spare_rows, int(cu_k[-1])
    q = randn(total_q, heads, head_dim, dtype=dtype, device=device, requires_grad=True)
    k = randn(total_k, heads_k, head_dim, dtype=dtype, device=device, requires_grad=True)
    v = randn(total_k, heads_k, head_dim, dtype=dtype, device=device, requires_grad=True)
    return q, k, v, cu_q.to(device), cu_k.to(device)


VARLEN_CASES = [
    ("plain", dict()),
    ("causal", dict(causal=True)),
    ("window_softcap", dict(window_size=(12, 4), softcap=10.0)),
    ("alibi_per_batch", dict(causal=True, alibi=True)),
    ("seqused_k", dict(causal=True, seqused_k=[3, 0, 9, 1])),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", VARLEN_CASES, ids=[c[0] for c in VARLEN_CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_varlen_matches_reference(device, case, dtype):
    if dtype == torch.float32 and device != "cpu":
        pytest.skip("float32 is CPU-only")
    options = dict(case[1])
    torch.manual_seed(3)
    q_lens, k_lens = [5, 0, 33, 17], [9, 4, 40, 1]  # includes an empty query sequence
    q, k, v, cu_q, cu_k = _varlen_inputs(device, dtype, q_lens, k_lens, 4, 2, 48)
    alibi = torch.rand(4, 4) * 0.3 if options.pop("alibi", False) else None
    seqused = torch.tensor(options.pop("seqused_k"), dtype=torch.int32) if "seqused_k" in options else None
    dout = randn(*q.shape, dtype=dtype, device=device)
    out, lse, probs = flashattn.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(q_lens), max(k_lens), alibi_slopes=None if alibi is None else alibi.to(device),
        return_attn_probs=True, seqused_k=None if seqused is None else seqused.to(device), **options)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0]) and probs is None

    refs = {}
    for name, upcast in (("ref", True), ("naive", False)):
        leaves = [t.detach().cpu().requires_grad_() for t in (q, k, v)]
        o, l = varlen_ref(*leaves, cu_q.cpu(), cu_k.cpu(), seqused_k=seqused, alibi_slopes=alibi, upcast=upcast,
                          **{("window" if key == "window_size" else key): val for key, val in options.items()})
        o.backward(dout.cpu().to(o.dtype))
        refs[name] = (o, l, *[t.grad for t in leaves])
    assert_within("out", out, refs["ref"][0], refs["naive"][0], 2, FLOOR[dtype])
    assert_lse_close(lse, refs["ref"][1], 1e-4 if dtype == torch.float32 else 2e-3)
    with skip_if_unsupported(f"varlen backward on {device}"):
        out.backward(dout)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert_within(name, (q, k, v)[i].grad, refs["ref"][2 + i], refs["naive"][2 + i], 3, FLOOR[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_equals_dense_per_sequence(device):
    """A varlen batch of equal lengths is the dense batch; rows past cu_seqlens_q[-1] give 0."""
    torch.manual_seed(4)
    dtype = torch.bfloat16
    q, k, v, cu_q, cu_k = _varlen_inputs(device, dtype, [20, 20], [30, 30], 4, 4, 64, spare_rows=3)
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 20, 30, causal=True)
    dense = flashattn.flash_attn_func(q[:40].view(2, 20, 4, 64), k.view(2, 30, 4, 64), v.view(2, 30, 4, 64),
                                      causal=True)
    assert torch.equal(out[:40], dense.reshape(40, 4, 64))
    assert (out[40:] == 0).all()
    with skip_if_unsupported(f"varlen backward on {device}"):
        out.float().sum().backward()
    assert (q.grad[40:] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_packed_forms(device):
    torch.manual_seed(5)
    dtype = torch.float16
    lens = [7, 19, 1]
    cu = torch.tensor([0, 7, 26, 27], dtype=torch.int32, device=device)
    qkv = randn(27, 3, 4, 32, dtype=dtype, device=device, requires_grad=True)
    out = flashattn.flash_attn_varlen_qkvpacked_func(qkv, cu, max(lens), causal=True)
    q, k, v = (qkv[:, i].detach().clone().requires_grad_() for i in range(3))
    expected = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    assert torch.equal(out, expected)

    kv = torch.stack([k, v], dim=1).detach().requires_grad_()
    out_kv = flashattn.flash_attn_varlen_kvpacked_func(q.detach(), kv, cu, cu, max(lens), max(lens), causal=True)
    assert torch.equal(out_kv, expected)
    with skip_if_unsupported(f"varlen backward on {device}"):
        out.float().sum().backward()
        expected.float().sum().backward()
        out_kv.float().sum().backward()
    assert torch.equal(qkv.grad, torch.stack([q.grad, k.grad, v.grad], dim=1))
    assert torch.equal(kv.grad, torch.stack([k.grad, v.grad], dim=1))
