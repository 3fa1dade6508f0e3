"""Probe: clocks and power while each kernel runs back to back for a few seconds (ours, cuDNN, the
bf16 matmul), d128 16k. Is the forward power-bound, and at what share of the tensor pipe per actual
cycle does each run?"""
import subprocess, sys, time, statistics, threading
sys.path.insert(0, "bench"); sys.path.insert(0, "tests/gpu")
import torch
import gpu_forward as g

log = []
stop = False
def sampler():
    p = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active",
                          "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        log.append((time.time(), line.strip()))
        if stop:
            break
    p.terminate()
th = threading.Thread(target=sampler, daemon=True); th.start()
time.sleep(1.0)

def soak(name, fn, flops, seconds=4.0):
    fn(); torch.cuda.synchronize()
    # calls per second estimate
    t0 = time.time(); n = 0
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.time() - t0 < seconds:
        for _ in range(20): fn()
        n += 20
        torch.cuda.synchronize()
    e1.record(); torch.cuda.synchronize()
    t1 = time.time()
    ms = e0.elapsed_time(e1) / n
    tf = flops / ms / 1e9
    win = [l for (t, l) in log if t0 + 1.0 < t < t1]
    clk = [float(l.split(",")[0]) for l in win]; pw = [float(l.split(",")[1]) for l in win]
    lim = win[-1].split(",")[2] if win else "?"
    thr = win[-1].split(",")[4] if win else "?"
    mclk = statistics.median(clk) if clk else float("nan")
    share = tf * 1e12 / (4096 * 132 * mclk * 1e6)
    print(f"{name:34s} {tf:6.1f} TFLOP/s  sm clock median {mclk:6.0f} MHz (min {min(clk):.0f} max {max(clk):.0f})  "
          f"power median {statistics.median(pw):5.0f} W (limit {lim})  throttle {thr}  "
          f"tensor share per cycle {share:.3f}", flush=True)
    time.sleep(1.5)

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
soak("matmul bf16 8192^3 randn", lambda: a @ b, 2 * 8192 ** 3)
z = torch.zeros_like(a)
soak("matmul bf16 8192^3 zeros", lambda: z @ z, 2 * 8192 ** 3)
del a, b, z
for causal in (False, True):
    for (s, bt, h, hk) in ((16384, 1, 64, 8), (16384, 1, 16, 16), (1024, 16, 16, 16)):
        d = 128
        q = torch.randn(bt, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(bt, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        flops = 4 * bt * h * s * s * d / (2 if causal else 1)
        ours = g.ours_fn(q, k, v, out, causal)
        cud, _ = g.sdpa_fn(q, k, v, causal, g.SDPBackend.CUDNN_ATTENTION, False)
        tag = f"{s//1024}k x{bt} {h}/{hk} {'causal' if causal else 'dense'}"
        soak("ours  " + tag, ours, flops)
        soak("cudnn " + tag, cud, flops)
        if not causal and h == 64:
            q2 = q * 0; 
            ours0 = g.ours_fn(q2, k, v, out, causal)
            soak("ours  " + tag + " q=0", ours0, flops)
        del q, k, v, out
        torch.cuda.empty_cache()
stop = True
