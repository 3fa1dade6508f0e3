"""EXPERIMENT (branch exp-edge-timeline): where a Hopper forward tile's edge goes, from clock64 stamps
per (CTA, warpgroup, tile): d64 (three consumers, 192-row tiles), bf16, 32 heads: 1k x 16 and 16k x 1, causal and not."""
import ctypes, os, sys
import numpy as np
import torch
sys.path.insert(0, "tests/gpu"); sys.path.insert(0, "bench")
import abi
import gpu_forward as g

lib = ctypes.CDLL(os.environ["FLASHATTN_LIBRARY"])
N = 132 * 4 * 64 * 8
buf = np.zeros(N, dtype=np.uint64)

def run(s, b, h=32, d=64, causal=False):
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(q)
    fn = g.ours_fn(q, k, v, out, causal)
    for _ in range(5): fn()
    torch.cuda.synchronize()
    assert lib.fa_debug_edge_timeline_clear() == 0
    fn()
    torch.cuda.synchronize()
    assert lib.fa_debug_edge_timeline(buf.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(buf.nbytes)) == 0
    t = buf.reshape(132, 4, 64, 8).astype(np.int64)
    return t

def report(name, t, blocks_hint):
    print(f"== {name}")
    # consumers: events 0 top, 1 Q ready, 2 first S issued, 3 first S done, 4 last PV issued, 5 last PV done, 6 epilogue done, 7 blocks
    segs = {"decode+q_full (0-1)": (0, 1), "turn for first S (1-2)": (1, 2), "first S wait (2-3)": (2, 3),
            "steps (3-4)": (3, 4), "last PV wait (4-5)": (4, 5), "epilogue (5-6)": (5, 6)}
    for c in (1, 2, 3):
        x = t[:, c]
        valid = (x[:, :, 0] > 0) & (x[:, :, 6] > 0)
        # interior tiles only: skip each CTA's first and last tile
        inner = valid.copy(); inner[:, 0] = False
        last = valid.sum(1) - 1
        for i in range(132): inner[i, max(last[i], 0)] = False
        out = []
        for label, (a, b) in segs.items():
            dd = (x[:, :, b] - x[:, :, a])[inner]
            out.append(f"{label} {np.median(dd):7.0f}")
        # next top - epilogue done (the loop's back edge, next tile's decode up to stamp 0)
        nxt = (x[:, 1:, 0] - x[:, :-1, 6])[inner[:, :-1] & valid[:, 1:]]
        whole = (x[:, 1:, 0] - x[:, :-1, 0])[inner[:, :-1] & valid[:, 1:]]
        print(f" consumer {c-1}: " + " | ".join(out) + f" | back edge {np.median(nxt):6.0f} | tile {np.median(whole):7.0f}"
              f" | blocks {int(np.median(x[:, :, 7][inner]))}")
    # the consumers against each other: the time all three are outside their steps
    xs = [t[:, c] for c in (1, 2, 3)]
    valid = np.ones(xs[0][:, :, 0].shape, dtype=bool)
    for x in xs: valid &= (x[:, :, 0] > 0) & (x[:, :, 6] > 0)
    all_out = []
    for i in range(132):
        for j in range(1, 63):
            if not (valid[i, j] and valid[i, j + 1]): continue
            lo = max(x[i, j, 4] for x in xs); hi = min(x[i, j + 1, 3] for x in xs)
            all_out.append(max(0, hi - lo))
    print(f" all three outside their steps (last PV issued .. next first S done) median {np.median(all_out) if all_out else float('nan'):.0f} cycles a tile")
    p = t[:, 0]
    pv = (p[:, :, 0] > 0) & (p[:, :, 2] > 0)
    print(f" producer: q_empty wait (0-1) {np.median((p[:, :, 1] - p[:, :, 0])[pv]):.0f}, loads (1-2) "
          f"{np.median((p[:, :, 2] - p[:, :, 1])[pv]):.0f}")
    # per-block rate from steps
    steps = (t[:, 1, :, 4] - t[:, 1, :, 3]); blocks = t[:, 1, :, 7]
    m = (blocks > 1) & (t[:, 1, :, 6] > 0)
    print(f" steps per block (consumer 0): {np.median(steps[m] / (blocks[m] - 1)):.0f} cycles")

for s, b in ((1024, 16), (16384, 1)):
    report(f"d64 non-causal {s // 1024}k x {b}, 32 heads", run(s, b), None)
    report(f"d64 causal {s // 1024}k x {b}, 32 heads", run(s, b, causal=True), None)
