"""Reads the measuring build's per-item stamps (persistent Hopper backward) after one call per shape."""
import ctypes, sys, statistics as st
sys.path.insert(0, "tests/gpu")
import torch, abi
lib = ctypes.CDLL(sys.argv[1])
N, S = 65536, 12
def med(xs): return st.median(xs) if xs else float('nan')
def run(b, s, h, hk, causal, d=128):
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out, lse, _ = abi.forward(q, k, v, causal=causal)
    dout = torch.randn_like(q)
    for _ in range(3): abi.backward(q, k, v, out, lse, dout, causal=causal)
    torch.cuda.synchronize()
    buf = torch.zeros(N * S, dtype=torch.int64)
    assert lib.fa_debug_bwd_stamps(ctypes.c_void_p(buf.data_ptr()), ctypes.c_ulonglong(N * S * 8)) == 0
    items = b * (hk if hk != h else h) * (s // 128)
    a = buf.view(N, S).tolist()[:items]
    print(f"\n{b}x{s} {h}/{hk} causal={causal}: {items} items")
    by_sm = {}
    for i, r in enumerate(a):
        if r[0] and r[4] and r[5] and r[6]: by_sm.setdefault(r[1], []).append(r)
    ph = {k: [] for k in ["cons: item start -> K/V landed", "cons: K/V landed -> first Q landed", "cons: first Q -> loop done",
                          "cons: epilogue", "cons: epilogue end -> next item start (slot)",
                          "prod: item start -> deferred add begins (decode, set-up)", "prod: deferred add",
                          "prod: kv_empty wait", "prod: wait done -> K/V issued",
                          "prev loop done -> prod item start", "prev loop done -> deferred add done",
                          "prev epilogue end -> K/V issued", "prev epilogue end -> K/V landed", "whole item (start -> next start)"]}
    for sm, lst in by_sm.items():
        lst.sort(key=lambda r: r[0])
        for p, r in zip([None] + lst[:-1], lst):
            ph["cons: item start -> K/V landed"].append(r[2] - r[0])
            if r[7] > r[2]: ph["cons: K/V landed -> first Q landed"].append(r[7] - r[2]); ph["cons: first Q -> loop done"].append(r[3] - r[7])
            ph["cons: epilogue"].append(r[4] - r[3])
            ph["prod: item start -> deferred add begins (decode, set-up)"].append(r[8] - r[5])
            ph["prod: deferred add"].append(r[10] - r[8])
            ph["prod: kv_empty wait"].append(r[9] - r[10])
            ph["prod: wait done -> K/V issued"].append(r[6] - r[9])
            if p is not None:
                ph["cons: epilogue end -> next item start (slot)"].append(r[0] - p[4])
                ph["prev loop done -> prod item start"].append(r[5] - p[3])
                ph["prev loop done -> deferred add done"].append(r[10] - p[3])
                ph["prev epilogue end -> K/V issued"].append(r[6] - p[4])
                ph["prev epilogue end -> K/V landed"].append(r[2] - p[4])
                ph["whole item (start -> next start)"].append(r[0] - p[0])
    for k_, xs in ph.items():
        xs = sorted(xs)
        if xs: print(f"  {k_:46s} median {med(xs):9.0f}  p10 {xs[len(xs)//10]:9.0f}  p90 {xs[9*len(xs)//10]:9.0f}")
for cfg in [(16, 1024, 16, 16, False), (16, 1024, 16, 16, True), (1, 16384, 16, 16, False)]:
    run(*cfg)
