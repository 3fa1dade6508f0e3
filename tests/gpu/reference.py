"""Attention references for the GPU tests, in torch on the device.

attention_ref(..., precision=torch.float64) is the fp64 reference; precision=q.dtype is the naive
same-precision attention (each op's result rounded to bf16/fp16 like unfused framework code), the
yardstick of FlashAttention's tolerance rule:  max|ours - ref| <= 2 * max|naive - ref| + 1e-5.

Semantics follow src/core/problem.h: s = scale * q.k, softcap, ALiBi, bottom-right aligned
window mask (causal = window (left, 0)), softmax over allowed keys (empty row -> out 0, lse -inf),
dropout from the shared Philox stream (include/flashattn/philox.h), re-implemented here
independently in 64-bit integer tensor arithmetic.
"""
import math

import torch

MASK32 = 0xFFFFFFFF


def _mulhilo(a, b):
    """(hi, lo) 32-bit words of a * b for a constant a < 2^32 and an int64 tensor b < 2^32."""
    b_lo, b_hi = b & 0xFFFF, b >> 16
    t = a * b_lo            # < 2^48
    u = a * b_hi            # < 2^48
    hi = (u + (t >> 16)) >> 16
    lo = (((u & 0xFFFF) << 16) + t) & MASK32
    return hi, lo


def philox4x32_10(c0, c1, c2, c3, key0, key1):
    """Philox4x32-10 on int64 tensors holding uint32 values; keys are Python ints."""
    for _ in range(10):
        hi0, lo0 = _mulhilo(0xD2511F53, c0)
        hi1, lo1 = _mulhilo(0xCD9E8D57, c2)
        c0, c1, c2, c3 = (hi1 ^ c1 ^ key0) & MASK32, lo1, (hi0 ^ c3 ^ key1) & MASK32, lo0
        key0 = (key0 + 0x9E3779B9) & MASK32
        key1 = (key1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def keep_threshold(p):
    keep = 1.0 - float(torch.tensor(p, dtype=torch.float32))  # the C ABI carries p as a float
    scaled = keep * 4294967296.0
    return 0xFFFFFFFF if scaled >= 4294967295.0 else int(scaled)


def dropout_keep(seed, offset, b, num_heads, h, q_len, k_len, p, device):
    """Bool (q_len, k_len): element (i, j) of (sequence b, head h) is kept."""
    if q_len == 0 or k_len == 0:
        return torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    groups = (k_len + 3) // 4
    i = torch.arange(q_len, device=device, dtype=torch.int64)[:, None].expand(q_len, groups)
    g = torch.arange(groups, device=device, dtype=torch.int64)[None, :].expand(q_len, groups)
    key0 = seed & MASK32
    key1 = ((seed >> 32) ^ (offset >> 32)) & MASK32
    c2 = torch.full_like(i, (b * num_heads + h) & MASK32)
    c3 = torch.full_like(i, offset & MASK32)
    words = philox4x32_10(g.contiguous(), i.contiguous(), c2, c3, key0, key1)
    bits = torch.stack(words, dim=-1).reshape(q_len, groups * 4)[:, :k_len]
    return bits < keep_threshold(p)


def keys_for_row(i, q_len, k_len, window_left, window_right):
    """Tensors (begin, end) per query row i, as MaskSpec::keys_for_row."""
    diagonal = i + k_len - q_len
    begin = torch.zeros_like(i)
    end = torch.full_like(i, k_len)
    if window_left >= 0:
        begin = torch.maximum(begin, diagonal - window_left)
    if window_right >= 0:
        end = torch.minimum(end, diagonal + window_right + 1)
    return begin, end


def _one_sequence(q, k, v, *, scale, causal, window, softcap, slopes, keep, dropout_p, precision, sink=None):
    """q (Lq, H, d), k (Lk, Hk, d), v (Lk, Hk, dv); slopes (H,) or None; keep (H, Lq, Lk) or None;
    sink (H,) or None: one more score per row that takes no value. Returns out (Lq, H, dv) in
    `precision`, lse (H, Lq) fp64, probs (H, Lq, Lk) fp64 (normalised)."""
    Lq, H = q.shape[0], q.shape[1]
    d = v.shape[-1]
    Lk, Hk = k.shape[0], k.shape[1]
    dev = q.device
    if Lq == 0:
        return (torch.zeros(0, H, d, device=dev, dtype=precision), torch.zeros(H, 0, device=dev, dtype=torch.float64),
                torch.zeros(H, 0, Lk, device=dev, dtype=torch.float64))
    group = H // Hk
    qp = q.to(precision).transpose(0, 1)                                 # (H, Lq, d)
    kp = k.to(precision).repeat_interleave(group, dim=1).transpose(0, 1)  # (H, Lk, d)
    vp = v.to(precision).repeat_interleave(group, dim=1).transpose(0, 1)
    s = torch.matmul(qp, kp.transpose(1, 2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Lq, device=dev)[:, None]
    j = torch.arange(Lk, device=dev)[None, :]
    if slopes is not None:
        dist = (i + Lk - Lq - j).abs().to(torch.float64)
        s = s - (slopes.to(torch.float64)[:, None, None] * dist[None]).to(s.dtype)
    left, right = window
    if causal:
        right = 0
    begin, end = keys_for_row(torch.arange(Lq, device=dev), Lq, Lk, left, right)
    allowed = (j >= begin[:, None]) & (j < end[:, None])                  # (Lq, Lk)
    s = s.masked_fill(~allowed[None], float("-inf"))
    if sink is not None:  # the sink: one more column of every row's scores, dropped before P V
        s = torch.cat([s, sink.to(s.dtype)[:, None, None].expand(H, Lq, 1)], dim=-1)
    s64 = s.to(torch.float64)
    lse = torch.logsumexp(s64, dim=-1)                                    # -inf for empty rows
    probs = torch.softmax(s, dim=-1)
    probs = torch.nan_to_num(probs, nan=0.0)                              # empty rows
    probs64 = torch.nan_to_num(torch.softmax(s64, dim=-1), nan=0.0)
    if sink is not None:
        probs, probs64 = probs[..., :-1], probs64[..., :-1]
    if keep is not None:
        dropped = probs * keep.to(probs.dtype) * (1.0 / (1.0 - dropout_p))
    else:
        dropped = probs
    out = torch.matmul(dropped.to(precision), vp)                          # (H, Lq, d)
    return out.transpose(0, 1), lse, probs64


def attention_ref(q, k, v, *, precision=torch.float64, softmax_scale=None, causal=False, window=(-1, -1),
                  softcap=0.0, alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, cu_seqlens_q=None,
                  cu_seqlens_k=None, seqused_k=None, want_probs=False, learnable_sink=None):
    """Dense: q (B, Sq, H, d), k/v (B, Sk, Hk, d) (v may have its own head dim). Varlen: packed
    (total, H, d) with cu_seqlens. learnable_sink: (H,) logits, or None. Returns out (like q with v's
    head dim, in `precision`), lse (dense (B, H, Sq); varlen (H, total_q)), probs (dense: (B, H, Sq,
    Sk), negated where dropped) or None."""
    d = q.shape[-1]
    out_shape = (*q.shape[:-1], v.shape[-1])
    scale = softmax_scale if softmax_scale else 1.0 / math.sqrt(d)
    varlen = cu_seqlens_q is not None
    dev = q.device
    H = q.shape[-2]
    if varlen:
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        batch = len(cq) - 1
        out = torch.zeros(out_shape, device=dev, dtype=precision)
        lse = torch.full((H, q.shape[0]), float("-inf"), device=dev, dtype=torch.float64)
    else:
        batch, Sq = q.shape[0], q.shape[1]
        Sk = k.shape[1]
        out = torch.zeros(out_shape, device=dev, dtype=precision)
        lse = torch.full((batch, H, Sq), float("-inf"), device=dev, dtype=torch.float64)
        probs_all = torch.zeros(batch, H, Sq, Sk, device=dev, dtype=torch.float64) if want_probs else None
    used = seqused_k.tolist() if seqused_k is not None else None
    for b in range(batch):
        if varlen:
            qs, ks_, vs = q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]]
        else:
            qs, ks_, vs = q[b], k[b], v[b]
        if used is not None:
            ks_, vs = ks_[:used[b]], vs[:used[b]]
        Lq, Lk = qs.shape[0], ks_.shape[0]
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
        keep = None
        if dropout_p > 0:
            keep = torch.stack([dropout_keep(seed, offset, b, H, h, Lq, Lk, dropout_p, dev) for h in range(H)])
        o, l, pr = _one_sequence(qs, ks_, vs, scale=scale, causal=causal, window=window, softcap=softcap,
                                 slopes=slopes, keep=keep, dropout_p=dropout_p, precision=precision,
                                 sink=learnable_sink)
        if varlen:
            out[cq[b]:cq[b] + Lq] = o
            lse[:, cq[b]:cq[b] + Lq] = l
        else:
            out[b] = o
            lse[b] = l
            if want_probs:
                if keep is not None:
                    pr = torch.where(keep, pr, -pr)
                probs_all[b, :, :, :Lk] = pr
    return out, lse, (probs_all if (want_probs and not varlen) else None)
