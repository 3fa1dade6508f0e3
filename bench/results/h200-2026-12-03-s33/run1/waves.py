"""Probe: does the static schedule's last partial wave cost what its share predicts? d128 non-causal,
bf16, ours (main's library) and cuDNN at head counts whose tile count is a multiple of 132 or not."""
import sys
from functools import partial
from pathlib import Path
sys.path.insert(0, "bench"); sys.path.insert(0, "tests/gpu")
import torch
import gpu_forward as g
import abi
print("sms", torch.cuda.get_device_properties(0).multi_processor_count)
for s, b in ((16384, 1), (4096, 4), (1024, 16)):
    for h in (16, 33, 32, 66):
        d = 128
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        flops = 4 * b * h * s * s * d
        fn = g.ours_fn(q, k, v, out, False)
        run, _ = g.sdpa_fn(q, k, v, False, g.SDPBackend.CUDNN_ATTENTION, False)
        best = g.best_of_rounds([("ours", fn, None), ("cudnn", run, None)], 3, g.bench_ms, flops / 1e9)
        tiles = b * h * s // 128
        print(f"s={s:5d} b={b:2d} h={h:2d} tiles={tiles:5d} waves={tiles/132:6.2f}: ours {best['ours']:6.1f} "
              f"cudnn {best['cudnn']:6.1f} ratio {best['ours']/best['cudnn']:.3f}", flush=True)
        del q, k, v, out
        torch.cuda.empty_cache()
