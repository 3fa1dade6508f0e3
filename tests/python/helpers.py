"""Shared test helpers: devices, inputs, and FlashAttention's tolerance rule."""

import contextlib
import functools

import pytest
import torch

import flashattn

CUDA = torch.cuda.is_available() and flashattn.cuda_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
NO_CUDA_REASON = ("needs a CUDA GPU and a libflashattn built with the CUDA backend "
                  f"(torch.cuda.is_available()={torch.cuda.is_available()}, "
                  f"flashattn.cuda_available()={flashattn.cuda_available()})")
requires_cuda = pytest.mark.skipif(not CUDA, reason=NO_CUDA_REASON)

# Absolute floors added to FlashAttention's "k times the naive error" rule: a few ulps of each dtype,
# so that a case where the naive implementation happens to be exact does not demand exactness.
FLOOR = {torch.float32: 2e-6, torch.bfloat16: 2e-3, torch.float16: 3e-4}


def dtypes_for(device):
    return [torch.float32, torch.bfloat16, torch.float16] if device == "cpu" else [torch.bfloat16, torch.float16]


def randn(*shape, dtype, device, requires_grad=False, scale=1.0):
    t = (torch.randn(*shape, dtype=torch.float32) * scale).to(dtype=dtype, device=device)
    return t.requires_grad_(requires_grad)


def assert_within(name, ours, ref, naive, factor, floor):
    """FlashAttention's rule: |ours - ref| <= factor * |naive - ref| + floor (max norms), ref in fp64.
    naive may be a tuple of naive results (reference.flash_form_grads beside autograd's): the worst sets
    the yardstick."""
    ours, ref = (t.detach().to(device="cpu", dtype=torch.float64) for t in (ours, ref))
    naives = [t.detach().to(device="cpu", dtype=torch.float64)
              for t in (naive if isinstance(naive, tuple) else (naive,))]
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} != reference {tuple(ref.shape)}"
    assert torch.isfinite(ours).all(), f"{name}: has NaN/inf"
    err = (ours - ref).abs().max().item() if ours.numel() else 0.0
    naive_err = max((n - ref).abs().max().item() for n in naives) if ours.numel() else 0.0
    scale = max(1.0, ref.abs().max().item() if ref.numel() else 0.0)
    bound = factor * naive_err + floor * scale
    assert err <= bound, (f"{name}: max error {err:.3g} > {factor} x naive error {naive_err:.3g} + floor "
                          f"{floor * scale:.3g}")


def assert_lse_close(lse, ref_lse, atol):
    lse, ref_lse = lse.detach().cpu().double(), ref_lse.detach().cpu().double()
    assert lse.shape == ref_lse.shape, f"softmax_lse: shape {tuple(lse.shape)} != {tuple(ref_lse.shape)}"
    same_inf = torch.isneginf(lse) == torch.isneginf(ref_lse)
    assert same_inf.all(), "softmax_lse: -inf (rows with no allowed key) differ from the reference"
    finite = ~torch.isneginf(ref_lse)
    if finite.any():
        err = (lse[finite] - ref_lse[finite]).abs().max().item()
        assert err <= atol, f"softmax_lse: max error {err:.3g} > {atol}"


@functools.lru_cache(maxsize=None)
def backward_supported(device):
    """False where this build's backend has no backward yet (FA_ERROR_UNSUPPORTED)."""
    q = torch.zeros(1, 1, 1, 8, dtype=torch.bfloat16, device=device, requires_grad=True)
    try:
        flashattn.flash_attn_func(q, q, q).float().sum().backward()
    except flashattn.FlashAttnError as e:
        if e.status == "FA_ERROR_UNSUPPORTED":
            return False
        raise
    return True


@contextlib.contextmanager
def skip_if_unsupported(what):
    """Skip (not fail) when this build's backend says FA_ERROR_UNSUPPORTED, e.g. no CUDA backward yet."""
    try:
        yield
    except flashattn.FlashAttnError as e:
        if e.status == "FA_ERROR_UNSUPPORTED":
            pytest.skip(f"{what}: {e}")
        raise
