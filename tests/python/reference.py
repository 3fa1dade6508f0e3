"""Attention written the slow, obvious way, for checking flashattn from Python.

`attention_ref` materialises the score matrix with every option of docs/semantics.md (causal and
windows bottom-right aligned, softcap then ALiBi, GQA, seqused_k, dropout from a given keep mask).
With `upcast=True` it runs in float64 (the truth); with `upcast=False` in the inputs' own dtype, the
"naive same-precision implementation" whose error sets the tolerance (FlashAttention's test rule).

`philox_keep_mask` re-implements include/flashattn/philox.h in numpy, so the dropout pattern that any
backend returns can be checked bit for bit against the specification.
"""

import numpy as np
import torch


def allowed_mask(seqlen_q, seqlen_k, k_lens, causal, window, device="cpu"):
    """(batch, 1, seqlen_q, seqlen_k) bool: key j allowed for query i. k_lens: per-batch key lengths."""
    k_lens = torch.as_tensor(k_lens, device=device).view(-1, 1, 1, 1)
    i = torch.arange(seqlen_q, device=device).view(1, 1, -1, 1)
    j = torch.arange(seqlen_k, device=device).view(1, 1, 1, -1)
    diagonal = i + k_lens - seqlen_q
    left, right = window
    if causal:
        right = 0
    allowed = j < k_lens
    if left >= 0:
        allowed = allowed & (j >= diagonal - left)
    if right >= 0:
        allowed = allowed & (j <= diagonal + right)
    return allowed


def _scores(q, k, *, softmax_scale, causal, window, softcap, alibi_slopes, seqused_k, upcast):
    """(scores (b, h, sq, sk), -inf where masked; allowed (b, 1, sq, sk)) in q's dtype. The scale goes on q
    before the product in a low precision (as a framework's naive code has it), on the scores in float64."""
    compute = q.dtype
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_k = k.shape[1]
    k = k.repeat_interleave(heads // k.shape[2], dim=2)
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    scores = torch.einsum("bihd,bjhd->bhij", q * scale if not upcast else q, k)
    if upcast:
        scores = scores * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    k_lens = seqused_k.tolist() if seqused_k is not None else [seqlen_k] * batch
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(compute)
        slopes = slopes.view(1, heads, 1, 1) if slopes.dim() == 1 else slopes.view(batch, heads, 1, 1)
        i = torch.arange(seqlen_q).view(1, 1, -1, 1)
        j = torch.arange(seqlen_k).view(1, 1, 1, -1)
        distance = (i + torch.tensor(k_lens).view(-1, 1, 1, 1) - seqlen_q - j).abs()
        scores = scores - slopes * distance.to(compute)
    allowed = allowed_mask(seqlen_q, seqlen_k, k_lens, causal, window).to(scores.device)
    return scores.masked_fill(~allowed, float("-inf")), allowed


def attention_ref(q, k, v, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi_slopes=None,
                  seqused_k=None, keep_mask=None, dropout_p=0.0, upcast=True, learnable_sink=None):
    """Dense attention. q: (b, sq, h, d), k: (b, sk, hk, d), v: (b, sk, hk, dv). Returns (out, lse, probs).

    keep_mask: bool (b, h, sq, sk) or None; kept probabilities are scaled by 1/(1-dropout_p).
    learnable_sink: (h,) or None: one more score per row, in the denominator (and lse) with no value.
    out has the compute dtype (float64 when upcast), lse is float64-or-compute (b, h, sq), probs are
    the undropped normalised probabilities of the keys."""
    compute = torch.float64 if upcast else q.dtype
    q, k, v = (t.to(compute) for t in (q, k, v))
    batch, seqlen_q, heads, _ = q.shape
    v = v.repeat_interleave(heads // v.shape[2], dim=2)
    scores, allowed = _scores(q, k, softmax_scale=softmax_scale, causal=causal, window=window, softcap=softcap,
                              alibi_slopes=alibi_slopes, seqused_k=seqused_k, upcast=upcast)
    if learnable_sink is not None:  # one more column, dropped from the probabilities before P V
        column = learnable_sink.to(compute).view(1, heads, 1, 1).expand(batch, heads, seqlen_q, 1)
        scores = torch.cat([scores, column], dim=-1)
    lse = torch.logsumexp(scores.to(torch.float64 if upcast else torch.float32), dim=-1)
    probs = torch.softmax(scores, dim=-1)
    if learnable_sink is not None:
        probs = probs[..., :-1]
    probs = torch.where(allowed.any(-1, keepdim=True), probs, torch.zeros((), dtype=compute))  # empty rows: 0, not NaN
    weights = probs
    if keep_mask is not None:
        weights = probs * keep_mask.to(compute) / (1.0 - dropout_p)
    out = torch.einsum("bhij,bjhd->bihd", weights, v)
    return out, lse, probs


def flash_form_grads(q, k, v, dout, *, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                     alibi_slopes=None, seqused_k=None, keep_mask=None, dropout_p=0.0, learnable_sink=None):
    """The naive backward in the inputs' dtype by FlashAttention's formulas: P = exp(S - lse) from the
    lse as stored (float32) and D_i = rowsum(dO_i O_i) from the output rounded to the dtype. A
    framework's autograd takes D_i = rowsum(P dP) instead, which cancels exactly where a row sees one
    key (P = 1, so dS = 0), while FlashAttention's D carries O's rounding there. Each form keeps
    roundings the other does not, so the tolerance rule's yardstick is the worse of the two (as
    reference::Formula in the C++ suite). Returns [dq, dk, dv]."""
    options = dict(softmax_scale=softmax_scale, causal=causal, window=window, softcap=softcap,
                   alibi_slopes=alibi_slopes, seqused_k=seqused_k)
    out, lse, _ = attention_ref(q, k, v, keep_mask=keep_mask, dropout_p=dropout_p, upcast=False,
                                learnable_sink=learnable_sink, **options)
    compute = q.dtype
    q, k = (t.detach().to(compute).requires_grad_() for t in (q, k))
    v, dout, out = (t.detach().to(compute) for t in (v, dout, out))
    heads, heads_k = q.shape[2], k.shape[2]
    scores, allowed = _scores(q, k, upcast=False, **options)
    probs = torch.where(allowed, torch.exp(scores.float() - lse[..., None].float()), 0.0).to(compute)
    keep = 1.0 if keep_mask is None else keep_mask.to(compute) / (1.0 - dropout_p)
    v_rep = v.repeat_interleave(heads // heads_k, dim=2)
    dv = torch.einsum("bhij,bihd->bjhd", probs * keep, dout)
    dv = dv.unflatten(2, (heads_k, heads // heads_k)).sum(3)
    dp = torch.einsum("bihd,bjhd->bhij", dout, v_rep) * keep
    d_rows = (dout.float() * out.float()).sum(-1).transpose(1, 2).to(compute)  # (b, h, sq)
    ds = (probs * (dp - d_rows[..., None])).detach()
    # dS through the scores' own graph (the scale, softcap's tanh; ALiBi is a constant), masked entries 0.
    dq, dk = torch.autograd.grad((torch.where(allowed, scores, 0.0) * ds).sum(), (q, k))
    return [dq, dk, dv]


def varlen_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k=None, alibi_slopes=None, **options):
    """Varlen attention as a loop of dense calls. Returns (out (total_q, h, d), lse (h, total_q))."""
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        used = None if seqused_k is None else seqused_k[b:b + 1]
        slopes = alibi_slopes if alibi_slopes is None or alibi_slopes.dim() == 1 else alibi_slopes[b]
        out, lse, _ = attention_ref(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]],
                                    seqused_k=used, alibi_slopes=slopes, **options)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=-1)


# ------------------------------------------------------------------------------------------------
# Philox4x32-10, as include/flashattn/philox.h defines the dropout stream.

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LOW = np.uint64(0xFFFFFFFF)


def _philox4x32_10(c0, c1, c2, c3, k0, k1):
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = _M0 * c0.astype(np.uint64)
            p1 = _M1 * c2.astype(np.uint64)
            hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), (p0 & _LOW).astype(np.uint32)
            hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), (p1 & _LOW).astype(np.uint32)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            k0 = np.uint32(k0 + _W0)
            k1 = np.uint32(k1 + _W1)
    return c0, c1, c2, c3


def keep_threshold(dropout_p):
    scaled = (1.0 - float(np.float32(dropout_p))) * 4294967296.0
    return 0xFFFFFFFF if scaled >= 4294967295.0 else int(scaled)


def philox_keep_mask(seed, offset, batch, heads, seqlen_q, seqlen_k, dropout_p):
    """bool (batch, heads, seqlen_q, seqlen_k): True where element (b, h, i, j) is kept."""
    b, h, i, j = np.meshgrid(np.arange(batch), np.arange(heads), np.arange(seqlen_q), np.arange(seqlen_k),
                             indexing="ij")
    counter = ((j // 4).astype(np.uint32), i.astype(np.uint32), (b * heads + h).astype(np.uint32),
               np.full(j.shape, offset & 0xFFFFFFFF, dtype=np.uint32))
    key0 = np.uint32(seed & 0xFFFFFFFF)
    key1 = np.uint32(((seed >> 32) ^ (offset >> 32)) & 0xFFFFFFFF)
    words = _philox4x32_10(*counter, key0, key1)
    bits = np.choose(j % 4, words)
    return torch.from_numpy(bits < np.uint32(keep_threshold(dropout_p)))
