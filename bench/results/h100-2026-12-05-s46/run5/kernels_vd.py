"""Probe: the kernels each implementation launches for one backward (and forward) call at q/k 192, v 128
(torch.profiler / CUPTI): durations, grids, blocks, registers and shared memory, ours against cuDNN.
Run from the repository root with FLASHATTN_LIBRARY set and PYTHONPATH=python:bench."""
import collections, json, os, sys
sys.path.insert(0, "bench")
import torch
from torch.profiler import profile, ProfilerActivity
import gpu_features as gf


def run(label, fn, reps=10):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps): fn()
        torch.cuda.synchronize()
    path = f"/tmp/trace_{os.getpid()}.json"
    prof.export_chrome_trace(path)
    agg = collections.OrderedDict()
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"): continue
        a = e.get("args", {})
        key = (e["name"][:160], str(a.get("grid")), str(a.get("block")), a.get("registers per thread"), a.get("shared memory"))
        agg.setdefault(key, []).append(e["dur"])
    print(f"== {label}: {sum(sum(v) for v in agg.values()) / reps:.1f} us of kernels per call")
    for (name, grid, block, regs, smem), durs in agg.items():
        durs.sort()
        print(f"   {len(durs)/reps:4.1f}x {durs[len(durs)//2]:9.1f} us  grid {grid:>14} block {block:>12} regs {regs} smem {smem}  {name}")
    sys.stdout.flush()


for s, b in ((16384, 1), (4096, 4)):
    for causal in (True, False):
        q = torch.randn(b, s, 16, 192, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, 16, 192, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, 16, 128, device="cuda", dtype=torch.bfloat16)
        dout = torch.randn(b, s, 16, 128, device="cuda", dtype=torch.bfloat16)
        tag = f"{b}x{s} 16/16 192/128 {'causal' if causal else 'dense'}"
        run("ours bwd  " + tag, gf.ours_backward(q, k, v, dout, causal, None)[0])
        run("cudnn bwd " + tag, gf.cudnn_backward(q, k, v, dout, causal)[0])
        if causal and s == 16384:
            run("ours fwd  " + tag, gf.ours_forward(q, k, v, causal, None)[0])
            run("cudnn fwd " + tag, gf.cudnn_forward(q, k, v, causal)[0])
        del q, k, v, dout
        torch.cuda.empty_cache()
