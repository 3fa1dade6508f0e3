"""Reads the measuring build's per-CTA stamps after one backward call per shape; prints per-CTA phase medians."""
import ctypes, sys, statistics as st
sys.path.insert(0, "tests/gpu")
import torch, abi
lib = ctypes.CDLL(sys.argv[1])
N, S = 65536, 12
def run(b, s, h, hk, causal, d=128):
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out, lse, _ = abi.forward(q, k, v, causal=causal)
    dout = torch.randn_like(q)
    for _ in range(3):
        abi.backward(q, k, v, out, lse, dout, causal=causal)
    torch.cuda.synchronize()
    buf = torch.zeros(N * S, dtype=torch.int64)
    torch.cuda.synchronize()
    # zero the device stamps first: run once more after a clear is not possible; read as is
    rc = lib.fa_debug_bwd_stamps(ctypes.c_void_p(buf.data_ptr()), ctypes.c_ulonglong(N * S * 8))
    assert rc == 0, rc
    grid = b * (hk if hk != h else h) * (s // 128)
    a = buf.view(N, S).tolist()[:grid]
    ctas = [r for r in a if r[0] and r[4] and r[5]]
    ctas = [r for r in ctas if r[4] > r[0]]
    print(f"\n{b}x{s} {h}/{hk} causal={causal}: {len(ctas)} CTAs with stamps")
    def med(xs): return st.median(xs) if xs else float('nan')
    ph = {
        "start -> work decoded (t0)": [r[8] - r[0] for r in ctas],
        "start -> __syncthreads done (t0)": [r[9] - r[0] for r in ctas],
        "start -> producer regs lowered": [r[10] - r[0] for r in ctas],
        "start -> consumer regs raised": [r[11] - r[0] for r in ctas],
        "start -> first K/V issued (prod)": [r[6] - r[0] for r in ctas],
        "start -> K/V landed (cons)": [r[2] - r[0] for r in ctas],
        "start -> first Q landed": [r[7] - r[0] for r in ctas],
        "K/V landed -> main loop done": [r[3] - r[2] for r in ctas],
        "epilogue (store dK/dV)": [r[4] - r[3] for r in ctas],
        "producer exit - cons end": [r[5] - r[4] for r in ctas],
        "whole (start -> max end)": [max(r[4], r[5]) - r[0] for r in ctas],
    }
    for k_, xs in ph.items():
        xs = sorted(xs)
        print(f"  {k_:34s} median {med(xs):9.0f}  p10 {xs[len(xs)//10]:9.0f}  p90 {xs[9*len(xs)//10]:9.0f}")
    # gaps between consecutive CTAs on an SM (clock64 is per SM)
    by_sm = {}
    for i, r in enumerate(a):
        if r[0] and r[4] and r[5] and r[4] > r[0]:
            by_sm.setdefault(r[1], []).append((r[0], max(r[4], r[5])))
    gaps = []
    for sm, lst in by_sm.items():
        lst.sort()
        for (s0, e0), (s1, e1) in zip(lst, lst[1:]):
            if s1 > e0: gaps.append(s1 - e0)
    gaps.sort()
    if gaps: print(f"  gap end -> next start on the SM     median {med(gaps):9.0f}  p10 {gaps[len(gaps)//10]:9.0f}  p90 {gaps[9*len(gaps)//10]:9.0f}  ({len(gaps)} gaps, {len(by_sm)} SMs)")
    tot = sum(max(r[4], r[5]) - r[0] for r in ctas)
    fixed = sum((r[2] - r[0]) + (r[4] - r[3]) for r in ctas)
    print(f"  fixed share (start->K/V landed + epilogue) of CTA time: {fixed / tot:.3f}; gaps / CTA time: {sum(gaps) / tot:.3f}")
for cfg in [(16, 1024, 16, 16, False), (16, 1024, 16, 16, True), (1, 16384, 16, 16, False), (16, 1024, 64, 8, True), (8, 2048, 64, 8, True)]:
    run(*cfg)
