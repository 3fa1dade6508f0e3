"""Clocks and power under sustained load: what bounds the H200's training kernels.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_power.py --out DIR [--seconds S] [--fa3 SO]

The benchmark grid (gpu_forward.py, gpu_backward.py) times short bursts; this one runs each kernel back
to back for --seconds (default 4) while `nvidia-smi` samples the SM clock, the board power, its limit
and the throttle reasons every 50 ms, and reports per kernel: TFLOP/s over the soak, the median SM
clock and power over all but its first second, and the tensor cores' share per cycle (TFLOP/s over
4096 dense bf16 FLOP per clock per SM x SMs x that clock: the work a cycle does, whatever the clock).

Kernels: the bf16 matmul (8192^3, B random, A random, distributed as attention's P (exp(N(0,1) - 4))
or zero: the ceilings at the power cap of the two products an attention forward does, and the share
of the power that the data's switching costs); ours and cuDNN, forward and backward, at d128
over the shapes where the grid's ratios sit closest to 1 (16k x 1 at 64/8 and 16/16 heads, 1k x 16
at 16/16; causal and not); and ours forward on q = 0 (scores all zero, P constant: the same
instructions with little switching), the energy the data itself costs. With --fa3 SO (the shim
bench/fa3/build.sh builds), FlashAttention-3's forward and backward on the same attention shapes too
(kernel fa3): whether a faster kernel does more work a cycle or runs at a higher clock.

Writes DIR/<card>-power.csv (date, commit, gpu, kernel, pass, shape, causal, tflops, sm_clock_mhz,
sm_clock_min_mhz, power_w, power_limit_w, throttle_reasons, tensor_share_per_cycle).
"""
import argparse
import csv
import datetime
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fa3"))
import abi  # noqa: E402
import fa3 as fa3_shim  # noqa: E402
import gpu_backward  # noqa: E402
import gpu_forward  # noqa: E402
from bench_common import SCRATCH, card_file, commit  # noqa: E402

DENSE_BF16_FLOP_PER_CLOCK_PER_SM = 4096  # Hopper: 4 tensor cores x 512 bf16 FMA per clock
QUERY = "clocks.sm,power.draw,power.limit,clocks_throttle_reasons.active"


class Sampler:
    """nvidia-smi's readings every 50 ms, each with the host time it arrived."""

    def __init__(self):
        self.samples = []
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                      "-i", "0", "-lms", "50"], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            fields = [f.strip() for f in line.split(",")]
            if len(fields) == 4:
                self.samples.append((time.time(), fields))

    def window(self, t0, t1):
        return [f for t, f in self.samples if t0 <= t <= t1]

    def close(self):
        self.proc.terminate()


def soak(sampler, fn, flops, seconds):
    """Runs fn back to back for `seconds`; returns (TFLOP/s over the soak, the readings of all but its
    first second)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0, calls = time.time(), 0
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    t1 = time.time()
    tflops = flops * calls / start.elapsed_time(end) / 1e9
    time.sleep(0.2)  # the readings of the soak's last 50 ms arrive after it
    return tflops, sampler.window(t0 + 1.0, t1)


def summarize(tflops, readings, sms):
    if not readings:
        raise SystemExit("nvidia-smi returned no readings during the soak")
    clocks = [float(r[0]) for r in readings]
    clock = statistics.median(clocks)
    return {"tflops": round(tflops, 1), "sm_clock_mhz": round(clock), "sm_clock_min_mhz": round(min(clocks)),
            "power_w": round(statistics.median(float(r[1]) for r in readings)),
            "power_limit_w": round(float(readings[-1][2])), "throttle_reasons": readings[-1][3],
            "tensor_share_per_cycle": round(tflops * 1e12 / (DENSE_BF16_FLOP_PER_CLOCK_PER_SM * sms * clock * 1e6), 3)}


def attention(causal, s, b, h, hk, d=128, fa3=None):
    """The attention kernels of one shape, as kernels() lists them (FlashAttention-3's with fa3, the
    shim's library)."""
    shape = f"{b}x{s} {h}/{hk} d{d}"
    flops = 4 * b * h * s * s * d / (2 if causal else 1)

    def inputs(zero_q=False):
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        return (q.zero_() if zero_q else q), k, v

    def forward(ours, zero_q=False):
        q, k, v = inputs(zero_q)
        if ours:  # (the call's parameters hold raw pointers: the closure keeps the tensors alive)
            out = torch.empty_like(q)
            call = gpu_forward.ours_fn(q, k, v, out, causal)
            return lambda keep=(q, k, v, out): call()
        return gpu_forward.sdpa_fn(q, k, v, causal, gpu_forward.SDPBackend.CUDNN_ATTENTION, False)[0]

    def backward(ours):
        q, k, v = inputs()
        dout = torch.randn_like(q)
        if ours:
            out, lse, _ = abi.forward(q, k, v, causal=causal)
            grads = [torch.empty_like(t) for t in (q, k, v)]
            call = gpu_backward.ours_fn(q, k, v, out, lse, dout, grads, causal, False)
            return lambda keep=(q, k, v, out, lse, dout, grads): call()
        return gpu_backward.sdpa_backward_fn(q, k, v, dout, causal, gpu_forward.SDPBackend.CUDNN_ATTENTION, False)[0]

    def fa3_forward():
        q, k, v = inputs()
        out = torch.empty_like(q)
        run, lse = fa3_shim.forward_fn(fa3, q, k, v, out, causal)
        return lambda keep=(q, k, v, out, lse): run()

    def fa3_backward():
        q, k, v = inputs()
        return fa3_shim.own_backward_fns(fa3, q, k, v, torch.randn_like(q), causal)[0][False]

    cases = [("ours", "forward", flops, lambda: forward(True)), ("cudnn", "forward", flops, lambda: forward(False))]
    cases += [("fa3", "forward", flops, fa3_forward)] if fa3 else []
    if not causal and s == 16384 and h == 64:
        cases.append(("ours q=0", "forward", flops, lambda: forward(True, zero_q=True)))
    cases += [("ours", "backward", 2.5 * flops, lambda: backward(True)),
              ("cudnn", "backward", 2.5 * flops, lambda: backward(False))]
    cases += [("fa3", "backward", 2.5 * flops, fa3_backward)] if fa3 else []
    return [(kernel, which, shape, causal, work, make) for kernel, which, work, make in cases]


def kernels(fa3=None):
    """(kernel, pass, shape, causal, flops, make): make() returns the function to soak, built on
    fresh tensors (freed before the next one is made)."""
    n = 8192

    def matmul(a_kind):
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        a = {"random": lambda: torch.randn_like(b), "zeros": lambda: torch.zeros_like(b),
             # P's statistics in the benchmarks' attention (scores ~ N(0, 1), less a row max ~ 4)
             "exp(N(0,1)-4)": lambda: (torch.randn_like(b, dtype=torch.float32) - 4).exp().to(b.dtype)}[a_kind]()
        return lambda: a @ b
    todo = [("cublas", "matmul", f"{n}^3 A {kind}", False, 2 * n ** 3, lambda kind=kind: matmul(kind))
            for kind in ("random", "exp(N(0,1)-4)", "zeros")]
    for causal in (False, True):
        for s, b, h, hk in ((16384, 1, 64, 8), (16384, 1, 16, 16), (1024, 16, 16, 16)):
            todo += attention(causal, s, b, h, hk, fa3=fa3)
    return todo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--seconds", type=float, default=4.0, help="soak per kernel (readings: all but its first second)")
    ap.add_argument("--fa3", metavar="SO", help="also soak FlashAttention-3's kernels through this shim library "
                    "(bench/fa3/build.sh)")
    args = ap.parse_args()
    if not args.seconds > 1.0:
        ap.error(f"--seconds {args.seconds}: expected more than 1 (the readings skip each soak's first second)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    sampler = Sampler()
    time.sleep(1.0)
    rows, date, rev = [], datetime.date.today().isoformat(), commit()
    todo = kernels(fa3_shim.load(args.fa3) if args.fa3 else None)
    for i, (kernel, which, shape, causal, flops, make) in enumerate(todo):
        fn = make()
        row = {"date": date, "commit": rev, "gpu": props.name, "kernel": kernel, "pass": which, "shape": shape,
               "causal": causal, **summarize(*soak(sampler, fn, flops, args.seconds), props.multi_processor_count)}
        rows.append(row)
        print(f"[{i + 1}/{len(todo)}] {kernel:9s} {which:8s} {shape:18s} {'causal' if causal else 'dense ':6s} "
              f"{row['tflops']:6.1f} TFLOP/s  {row['sm_clock_mhz']:5d} MHz (min {row['sm_clock_min_mhz']})  "
              f"{row['power_w']:4d} / {row['power_limit_w']} W  throttle {row['throttle_reasons']}  "
              f"share per cycle {row['tensor_share_per_cycle']:.3f}", flush=True)
        del fn
        torch.cuda.empty_cache()
        time.sleep(1.0)
    sampler.close()
    with open(card_file(out, props.name, "power.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
