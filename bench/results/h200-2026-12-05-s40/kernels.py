"""Probe: which kernels each implementation launches per call, with their durations, grids, blocks,
registers and shared memory (torch.profiler / CUPTI), ours against cuDNN, forward and backward, d128."""
import json, sys, os, collections
sys.path.insert(0, "bench"); sys.path.insert(0, "tests/gpu")
import torch
from torch.profiler import profile, ProfilerActivity
import gpu_forward as gf
import gpu_backward as gb
import abi

def run(label, fn, reps=20):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps): fn()
        torch.cuda.synchronize()
    path = f"/tmp/trace_{os.getpid()}.json"
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    agg = collections.OrderedDict()
    for e in ev:
        if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"): continue
        a = e.get("args", {})
        key = (e["name"][:90], str(a.get("grid")), str(a.get("block")), a.get("registers per thread"), a.get("shared memory"))
        agg.setdefault(key, []).append(e["dur"])
    total = sum(sum(v) for v in agg.values()) / reps
    print(f"== {label}: {total:.1f} us of kernels per call")
    for (name, grid, block, regs, smem), durs in agg.items():
        durs.sort()
        print(f"   {len(durs)/reps:4.1f}x {durs[len(durs)//2]:8.1f} us  grid {grid:>14} block {block:>12} regs {regs} smem {smem}  {name}")
    sys.stdout.flush()

d = int(os.environ.get("KP_D", "128"))
only = os.environ.get("KP_ONLY")  # e.g. "ours bwd": only those implementations, 1k shapes only
shapes = ((1024, 16, 16, 16), (1024, 16, 64, 8), (16384, 1, 16, 16)) if only else ((1024, 16, 16, 16), (16384, 1, 16, 16), (1024, 16, 64, 8))
if d == 256: shapes = ((1024, 16, 8, 8), (1024, 16, 32, 4), (16384, 1, 8, 8))
if d == 64: shapes = ((1024, 16, 32, 32), (16384, 1, 32, 32))
if os.environ.get("KP_SHAPES"): shapes = tuple(tuple(int(x) for x in t.split("x")) for t in os.environ["KP_SHAPES"].split(","))  # seqlen x batch x heads x kv heads
_run = run
def run(label, fn, reps=20):
    if only is None or label.startswith(only):
        _run(label, fn, reps)
for (s, b, h, hk) in shapes:
    for causal in (False, True):
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        dout = torch.randn_like(q)
        out = torch.empty_like(q)
        tag = f"{b}x{s} {h}/{hk} {'causal' if causal else 'dense'}"
        run("ours fwd  " + tag, gf.ours_fn(q, k, v, out, causal))
        run("cudnn fwd " + tag, gf.sdpa_fn(q, k, v, causal, gf.SDPBackend.CUDNN_ATTENTION, False)[0])
        o2, lse, _ = abi.forward(q, k, v, causal=causal)
        grads = [torch.empty_like(t) for t in (q, k, v)]
        run("ours bwd  " + tag, gb.ours_fn(q, k, v, o2, lse, dout, grads, causal, False))
        run("ours bwd det " + tag, gb.ours_fn(q, k, v, o2, lse, dout, grads, causal, True))
        run("cudnn bwd " + tag, gb.sdpa_backward_fn(q, k, v, dout, causal, gf.SDPBackend.CUDNN_ATTENTION, False)[0])
        del q, k, v, dout, out, o2, lse, grads
        torch.cuda.empty_cache()
