# Alternating timing of the forward and the backward with and without a learnable sink (d128, bf16, 16 heads): per shape,
# 30 rounds of (A: 3 calls without, B: 3 calls with) in alternating order (ABBA...), CUDA events, median ms.
import math, statistics, sys, torch
sys.path.insert(0, "bench")
import gpu_features as features
for direction, seqlen, batch in [(d, s, b) for d in ("forward", "backward") for s, b in ((16384, 1), (8192, 2), (4096, 4))]:
    for causal in (False, True):
        torch.manual_seed(0)
        q, k, v = (torch.randn(batch, seqlen, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        sink = torch.randn(16, device="cuda") + math.log(seqlen)
        dout = torch.randn_like(q)
        if direction == "forward":
            fa = features.ours_forward(q, k, v, causal, None)[0]
            fb = features.ours_forward(q, k, v, causal, sink)[0]
        else:
            fa = features.ours_backward(q, k, v, dout, causal, None)[0]
            fb = features.ours_backward(q, k, v, dout, causal, sink)[0]
        times = {"nosink": [], "sink": []}
        for r in range(30):
            order = [("nosink", fa), ("sink", fb)] if r % 2 == 0 else [("sink", fb), ("nosink", fa)]
            for name, fn in order:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(3):
                    fn()
                e.record()
                torch.cuda.synchronize()
                times[name].append(s.elapsed_time(e) / 3)
        a, b = statistics.median(times["nosink"]), statistics.median(times["sink"])
        print(f"{direction} {batch}x{seqlen} causal={causal}: nosink {a:.3f} ms  sink {b:.3f} ms  sink/nosink time {b / a:.4f}", flush=True)
