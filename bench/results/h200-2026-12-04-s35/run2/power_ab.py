"""Sustained-power A/B of forward libraries: each soaked 3 s in turn, twice, d128 16k 64/8 and 16/16, 1k x16 causal."""
import sys, time, statistics
from pathlib import Path
sys.path.insert(0, "tests/gpu"); sys.path.insert(0, "bench")
import torch, abi, gpu_forward, gpu_power
libs = [(a.split(":")[0], abi.Library(a.split(":")[1])) for a in sys.argv[1:]]
sampler = gpu_power.Sampler(); time.sleep(1.0)
sms = torch.cuda.get_device_properties(0).multi_processor_count
for causal, s, b, h, hk in ((False, 16384, 1, 64, 8), (False, 16384, 1, 16, 16), (True, 16384, 1, 16, 16), (False, 1024, 16, 16, 16)):
    flops = 4 * b * h * s * s * 128 / (2 if causal else 1)
    q = torch.randn(b, s, h, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, hk, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(q)
    for rnd in range(2):
        for name, lib in libs:
            fn = gpu_forward.ours_fn(q, k, v, out, causal, library=lib)
            r = gpu_power.summarize(*gpu_power.soak(sampler, fn, flops, 3.0), sms)
            print(f"{b}x{s} {h}/{hk} causal={causal} round {rnd} {name:5s} {r['tflops']:6.1f} TFLOP/s {r['sm_clock_mhz']} MHz {r['power_w']} W share {r['tensor_share_per_cycle']}", flush=True)
            time.sleep(0.5)
sampler.close()
