#!/usr/bin/env python3
"""flashattn's CPU backend against PyTorch's CPU scaled_dot_product_attention.

Run (needs torch; after building the library, which `bash scripts/run.sh` or
`cmake --preset dev && cmake --build --preset dev` puts in build/src/):
    python3 bench/cpu_vs_torch.py                      # --lib build/src/libflashattn.so by default
    python3 bench/cpu_vs_torch.py --quick              # small grid
    python3 bench/cpu_vs_torch.py --seqlens 256 --head-dims 64 --dtypes fp32 --causal no   # one shape

The library is loaded with ctypes and fed the data pointers and strides of torch CPU tensors, so
both implementations read the very same memory: (batch, heads, seqlen, head_dim) contiguous, the
layout torch's SDPA prefers, which our C ABI takes through its explicit strides.

For every shape it checks our output (and gradients) against torch's, reports the max abs error,
times both (warm-up, then the median of several runs; fewer runs when a run is long), prints a
table with progress lines, and writes OUT.{csv,md,png}: OUT is --out, by default
bench/out/cpu-vs-torch (a gitignored scratch folder); `--out bench/results/cpu-vs-torch` refreshes the
committed figures. The chart needs matplotlib; without it the CSV and the table are still written.

FLOPs: forward 4*b*h*sq*sk*d (halved when causal), backward 2.5x the forward.
"""
import argparse
import ctypes as C
import csv
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from bench_common import SCRATCH, pyplot  # noqa: E402

# ---- the C ABI (include/flashattn/flashattn.h) ----------------------------------------------

FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32 = 0, 1, 2
FA_BACKEND_CPU = 1


class FaTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("batch_stride", C.c_int64), ("row_stride", C.c_int64),
                ("head_stride", C.c_int64)]


class FaFwdParams(C.Structure):
    _fields_ = [
        ("struct_size", C.c_uint32), ("dtype", C.c_int), ("batch", C.c_int32), ("seqlen_q", C.c_int32),
        ("seqlen_k", C.c_int32), ("num_heads", C.c_int32), ("num_heads_k", C.c_int32), ("head_dim", C.c_int32),
        ("q", FaTensor), ("k", FaTensor), ("v", FaTensor), ("out", FaTensor),
        ("softmax_lse", C.c_void_p),
        ("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p), ("total_q", C.c_int64), ("total_k", C.c_int64),
        ("seqused_k", C.c_void_p),
        ("softmax_scale", C.c_float), ("causal", C.c_int32), ("window_left", C.c_int32),
        ("window_right", C.c_int32), ("softcap", C.c_float),
        ("alibi_slopes", C.c_void_p), ("alibi_batch_stride", C.c_int64),
        ("dropout_p", C.c_float), ("rng_seed", C.c_uint64), ("rng_offset", C.c_uint64),
        ("attn_probs", C.c_void_p),
        ("num_splits", C.c_int32), ("backend", C.c_int), ("stream", C.c_void_p),
    ]


class FaBwdParams(C.Structure):
    _fields_ = [
        ("struct_size", C.c_uint32), ("fwd", FaFwdParams), ("dout", FaTensor), ("dq", FaTensor), ("dk", FaTensor),
        ("dv", FaTensor), ("deterministic", C.c_int32), ("workspace", C.c_void_p), ("workspace_size", C.c_size_t),
    ]


class Library:
    def __init__(self, path):
        self.lib = C.CDLL(str(path))
        for name, args in [("fa_fwd_params_init", [C.POINTER(FaFwdParams)]),
                           ("fa_bwd_params_init", [C.POINTER(FaBwdParams)]),
                           ("fa_set_num_threads", [C.c_int])]:
            getattr(self.lib, name).argtypes = args
            getattr(self.lib, name).restype = None
        for name, arg in [("fa_forward", FaFwdParams), ("fa_backward", FaBwdParams)]:
            getattr(self.lib, name).argtypes = [C.POINTER(arg)]
            getattr(self.lib, name).restype = C.c_int
        self.lib.fa_last_error.restype = C.c_char_p
        self.lib.fa_version_string.restype = C.c_char_p
        self.lib.fa_get_num_threads.restype = C.c_int
        probe = FaFwdParams()
        self.lib.fa_fwd_params_init(C.byref(probe))
        if probe.struct_size != C.sizeof(FaFwdParams):
            sys.exit(f"fa_fwd_params layout mismatch: library {probe.struct_size} bytes, script {C.sizeof(FaFwdParams)}")
        self.version = self.lib.fa_version_string().decode()

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed ({status}): {self.lib.fa_last_error().decode()}")


def view(t):
    """fa_tensor of a (batch, heads, seqlen, head_dim) torch tensor: strides in elements."""
    assert t.stride(3) == 1
    return FaTensor(t.data_ptr(), t.stride(0), t.stride(2), t.stride(1))


DTYPES = {"fp32": (torch.float32, FA_FLOAT32), "bf16": (torch.bfloat16, FA_BFLOAT16), "fp16": (torch.float16, FA_FLOAT16)}


class Ours:
    def __init__(self, lib, q, k, v, causal, fa_dtype):
        b, h, s, d = q.shape
        self.lib = lib
        self.out = torch.empty_like(q)
        self.lse = torch.empty(b, h, s, dtype=torch.float32)
        p = FaFwdParams()
        lib.lib.fa_fwd_params_init(C.byref(p))
        p.dtype, p.batch, p.seqlen_q, p.seqlen_k = fa_dtype, b, s, k.shape[2]
        p.num_heads, p.num_heads_k, p.head_dim = h, k.shape[1], d
        p.q, p.k, p.v, p.out = view(q), view(k), view(v), view(self.out)
        p.softmax_lse = self.lse.data_ptr()
        p.causal = 1 if causal else 0
        p.backend = FA_BACKEND_CPU
        self.fwd = p
        self.tensors = (q, k, v)

    def forward(self):
        self.lib.check(self.lib.lib.fa_forward(C.byref(self.fwd)), "fa_forward")
        return self.out

    def prepare_backward(self, dout):
        q, k, v = self.tensors
        self.dout = dout
        self.dq, self.dk, self.dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        p = FaBwdParams()
        self.lib.lib.fa_bwd_params_init(C.byref(p))
        p.fwd = self.fwd
        p.dout, p.dq, p.dk, p.dv = view(dout), view(self.dq), view(self.dk), view(self.dv)
        p.deterministic = 1
        self.bwd = p

    def backward(self):
        self.lib.check(self.lib.lib.fa_backward(C.byref(self.bwd)), "fa_backward")
        return self.dq, self.dk, self.dv


# ---- timing -----------------------------------------------------------------------------------

# Before each timed run: torch's OpenMP runtime (libgomp) keeps its threads spinning for a few
# milliseconds after every parallel region, which would steal a core from whatever runs next (our
# pool spins 0.1 ms). A pause lets the other library's threads go idle, so each is timed alone.
PAUSE_S = 0.03


def timed_pair(ours, theirs, budget_s):
    """Median times of two functions, run alternately after a warm-up of each.

    Alternating means a load change on the machine (a shared box) hits both columns alike instead
    of skewing their ratio. A run longer than the budget is repeated only once, one longer than five
    budgets not at all.
    """
    def one(fn):
        time.sleep(PAUSE_S)
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    first = [one(ours), one(theirs)]
    longest = max(first)
    if longest > 5 * budget_s:  # tens of seconds (torch's bf16 backward at 4k): the first runs are the data
        return first[0], first[1], 1
    reps = 1 if longest > budget_s else max(3, min(40, int(budget_s / max(longest, 1e-6))))
    samples = ([first[0]], [first[1]]) if longest > budget_s else ([], [])
    for _ in range(reps):
        samples[0].append(one(ours))
        samples[1].append(one(theirs))
    return statistics.median(samples[0]), statistics.median(samples[1]), len(samples[0])


def flops(b, h, s, d, causal, direction):
    f = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return f * (2.5 if direction == "bwd" else 1.0)


def max_err(a, b):
    return (a.float() - b.float()).abs().max().item()


# ---- machine ----------------------------------------------------------------------------------

def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def our_isa(flags):
    """The kernel build backend.cpp picks (same rule), unless the overrides' cpu_isa asks for less."""
    overrides = (item.partition("=") for item in os.environ.get("FLASHATTN_OVERRIDES", "").split(","))
    want = {key: value for key, _, value in overrides}.get("cpu_isa", "")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma"} <= flags and want in ("", "avx512"):
        return "avx512"
    if {"avx2", "fma"} <= flags and want in ("", "avx512", "avx2"):
        return "avx2"
    return "generic"


PEAK_SOURCE = r"""
// Peak FLOP/s: 12 independent FMA chains in registers (enough to cover the FMA latency on every
// FMA pipe), written out by hand so no compiler keeps them in memory.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__AVX512F__)
#define BYTES 64
#elif defined(__AVX__)
#define BYTES 32
#else
#define BYTES 16
#endif
typedef float vec __attribute__((vector_size(BYTES)));
enum { CHAINS = 12, LANES = BYTES / 4 };
static long iterations = 100000000;
static void* spin(void* out) {
    vec a, b, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
    for (int i = 0; i < LANES; ++i) {
        a[i] = 0.999999f; b[i] = 1e-7f;
        c0[i] = 0; c1[i] = 1; c2[i] = 2; c3[i] = 3; c4[i] = 4; c5[i] = 5;
        c6[i] = 6; c7[i] = 7; c8[i] = 8; c9[i] = 9; c10[i] = 10; c11[i] = 11;
    }
    for (long it = 0; it < iterations; ++it) {
        c0 = c0 * a + b; c1 = c1 * a + b; c2 = c2 * a + b; c3 = c3 * a + b;
        c4 = c4 * a + b; c5 = c5 * a + b; c6 = c6 * a + b; c7 = c7 * a + b;
        c8 = c8 * a + b; c9 = c9 * a + b; c10 = c10 * a + b; c11 = c11 * a + b;
    }
    vec s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
    *(float*)out = s[0];
    return 0;
}
int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    pthread_t t[1024]; float sink[1024];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < threads; ++i) pthread_create(&t[i], 0, spin, &sink[i]);
    for (int i = 0; i < threads; ++i) pthread_join(t[i], 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("%.3f\n", threads * (double)iterations * CHAINS * LANES * 2 / s / 1e9);
    return sink[0] == 12345.f;
}
"""


def measure_peak(threads):
    """GFLOP/s of a tight FMA loop on `threads` threads, or None when no C compiler is around."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "peak.c", Path(tmp) / "peak"
        src.write_text(PEAK_SOURCE)
        try:
            subprocess.run([compiler, "-O2", "-march=native", "-ffp-contract=fast", "-pthread", str(src), "-o", str(exe)],
                           check=True, capture_output=True)
            return max(float(subprocess.run([str(exe), str(threads)], check=True, capture_output=True,
                                            text=True).stdout) for _ in range(3))
        except (subprocess.CalledProcessError, ValueError):
            return None


# ---- the grid ---------------------------------------------------------------------------------

def run_case(lib, dtype_name, d, s, causal, args, log):
    torch_dtype, fa_dtype = DTYPES[dtype_name]
    b, h = args.batch, args.heads
    gen = torch.Generator().manual_seed(1234 + s + d)
    shape = (b, h, s, d)
    q, k, v = (torch.randn(shape, generator=gen).to(torch_dtype) for _ in range(3))
    dout = torch.randn(shape, generator=gen).to(torch_dtype)
    ours = Ours(lib, q, k, v, causal, fa_dtype)
    rows = []
    budget = args.budget

    # fp64 reference (math on upcast inputs), for the smaller shapes: both libraries' errors against it
    exact = None
    if s <= args.ref_max_seqlen:
        q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
        out64 = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
        exact = (out64.detach(), torch.autograd.grad(out64, (q64, k64, v64), dout.double()))

    # forward
    with torch.no_grad():
        ref_out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        our_out = ours.forward()
        err = max_err(our_out, ref_out)
        ref_errs = (max_err(our_out, exact[0]), max_err(ref_out, exact[0])) if exact else (None, None)
        t_ours, t_torch, runs = timed_pair(ours.forward,
                                           lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), budget)
    rows.append(dict(direction="fwd", err=err, t_ours=t_ours, t_torch=t_torch, runs=runs,
                     err_fp64_ours=ref_errs[0], err_fp64_torch=ref_errs[1]))
    log(rows[-1], dtype_name, d, s, causal)

    if args.forward_only:
        return rows
    # backward (torch: autograd through its SDPA; only the backward call is timed)
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    def torch_backward():
        return torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)

    ref_grads = torch_backward()
    ours.prepare_backward(dout)
    our_grads = ours.backward()
    err = max(max_err(a, r) for a, r in zip(our_grads, ref_grads))
    ref_errs = ((max(max_err(a, r) for a, r in zip(our_grads, exact[1])),
                 max(max_err(a, r) for a, r in zip(ref_grads, exact[1]))) if exact else (None, None))
    t_ours, t_torch, runs = timed_pair(ours.backward, torch_backward, budget)
    rows.append(dict(direction="bwd", err=err, t_ours=t_ours, t_torch=t_torch, runs=runs,
                     err_fp64_ours=ref_errs[0], err_fp64_torch=ref_errs[1]))
    log(rows[-1], dtype_name, d, s, causal)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=str(REPO / "build" / "src" / "libflashattn.so"),
                    help="path to libflashattn.so (default: build/src/libflashattn.so)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both libraries")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlens", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    ap.add_argument("--causal", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    ap.add_argument("--forward-only", action="store_true")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per measurement (approx.)")
    ap.add_argument("--quick", action="store_true", help="seqlens 512 1024 only")
    ap.add_argument("--ref-max-seqlen", type=int, default=1024,
                    help="also compare both libraries with an fp64 reference up to this seqlen")
    ap.add_argument("--out", default=str(SCRATCH / "cpu-vs-torch"),
                    help="output path without extension (default bench/out/cpu-vs-torch)")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.seqlens = [s for s in args.seqlens if s <= 1024]

    if not Path(args.lib).is_file():
        ap.error(f"--lib {args.lib}: no such library; build it first (bash scripts/run.sh, or "
                 "cmake --preset dev && cmake --build --preset dev)")
    lib = Library(args.lib)
    torch.set_num_threads(args.threads)
    lib.lib.fa_set_num_threads(args.threads)
    flags = cpu_flags()
    isa = our_isa(flags)
    machine = dict(model=cpu_model(), cores=os.cpu_count(), threads=args.threads,
                   isa=" ".join(f for f in ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bf16", "amx_tile")
                                if f in flags),
                   our_build=isa, torch=torch.__version__, torch_cpu=torch.backends.cpu.get_cpu_capability(),
                   flashattn=lib.version)
    print(f"machine: {machine['model']}, {machine['cores']} cores ({args.threads} threads used), ISA: {machine['isa']}")
    print(f"flashattn {lib.version} ({isa} kernels) vs torch {torch.__version__} ({machine['torch_cpu']})")
    peak = measure_peak(args.threads)
    machine["peak_gflops"] = peak
    if peak:
        print(f"peak (FMA loop, {args.threads} threads): {peak:.1f} GFLOP/s")

    header = f"{'dtype':5} {'d':>4} {'seqlen':>6} {'causal':>6} {'pass':4} | {'ours GF/s':>9} {'torch GF/s':>10} " \
             f"{'speedup':>7} | {'max|ours-torch|':>15}"
    print(header)
    print("-" * len(header))
    results = []

    def log(row, dtype_name, d, s, causal):
        f = flops(args.batch, args.heads, s, d, causal, row["direction"])
        row.update(dtype=dtype_name, head_dim=d, seqlen=s, causal=causal, gflop=f / 1e9,
                   ours_gflops=f / row["t_ours"] / 1e9, torch_gflops=f / row["t_torch"] / 1e9)
        row["speedup"] = row["t_torch"] / row["t_ours"]
        results.append(row)
        print(f"{dtype_name:5} {d:4d} {s:6d} {('yes' if causal else 'no'):>6} {row['direction']:4} | "
              f"{row['ours_gflops']:9.1f} {row['torch_gflops']:10.1f} {row['speedup']:6.2f}x | {row['err']:15.3e}",
              flush=True)

    machine["load_before"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    start = time.time()
    total = len(args.dtypes) * len(args.head_dims) * len(args.seqlens) * len(args.causal)
    done = 0
    for dtype_name in args.dtypes:
        for d in args.head_dims:
            for causal in args.causal:
                for s in args.seqlens:
                    done += 1
                    print(f"  [{done}/{total}] {dtype_name} d={d} s={s} causal={causal} "
                          f"({time.time() - start:.0f}s elapsed)", file=sys.stderr, flush=True)
                    run_case(lib, dtype_name, d, s, causal == "yes", args, log)
    elapsed = time.time() - start
    machine["load_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"grid done in {elapsed:.0f} s")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), results)
    write_markdown(out.with_suffix(".md"), results, machine, args, elapsed)
    plotted = not args.no_plot and plot(out.with_suffix(".png"), results, machine)
    print(f"wrote {out.with_suffix('.csv')}, .md" + (", .png" if plotted else ""))


FIELDS = ["dtype", "head_dim", "seqlen", "causal", "direction", "ours_gflops", "torch_gflops", "speedup",
          "t_ours", "t_torch", "runs", "err", "err_fp64_ours", "err_fp64_torch", "gflop"]


def write_csv(path, results):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in results:
            w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) else ("" if r[k] is None else r[k]))
                        for k in FIELDS})


def fmt_err(e):
    return "–" if e is None else f"{e:.2e}"


def write_markdown(path, results, machine, args, elapsed):
    cmd = "python3 " + " ".join([str(Path(sys.argv[0]).resolve().relative_to(REPO))
                                 if Path(sys.argv[0]).resolve().is_relative_to(REPO) else sys.argv[0]] + sys.argv[1:])
    peak = machine.get("peak_gflops")
    lines = [
        "# flashattn CPU backend vs PyTorch SDPA (CPU)",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {machine['model']}, {machine['cores']} cores, {machine['threads']} threads used; "
        f"ISA: {machine['isa']}; flashattn {machine['flashattn']} ({machine['our_build']} kernels); "
        f"torch {machine['torch']} (CPU capability {machine['torch_cpu']}).",
        "",
        (f"Peak of a tight FMA loop on {machine['threads']} threads: **{peak:.1f} GFLOP/s**." if peak else
         "Peak FLOP/s: not measured (no C compiler).")
        + (f" Load average (1 min) before / after the grid: {machine['load_before']:.2f} / {machine['load_after']:.2f} "
           "(anything else running shows up here and skews both columns)." if machine.get("load_before") is not None
           else ""),
        "",
        f"Shapes: batch {args.batch}, {args.heads} heads, (batch, heads, seqlen, head_dim) contiguous tensors shared "
        "by both libraries. FLOPs: forward 4·b·h·s²·d (halved when causal), backward 2.5x the forward. Times are "
        "medians over `runs` runs of each library, alternating ours/torch, after a warm-up run of each; every timed "
        f"run starts after a {PAUSE_S * 1e3:.0f} ms pause, so that the other library's idle threads have stopped "
        "spinning (torch's libgomp spins for milliseconds after each op and would otherwise steal a core). Errors are "
        "max abs differences over out (fwd) or dq, dk, dv (bwd): ours against torch, and each against an fp64 "
        f"reference (math SDPA on upcast inputs) for seqlen <= {args.ref_max_seqlen}.",
        "",
        "| dtype | d | seqlen | causal | pass | ours GFLOP/s | torch GFLOP/s | speedup |"
        + (" ours % of peak |" if peak else "") + " max\\|ours−torch\\| | ours vs fp64 | torch vs fp64 | runs |",
        "|---|---:|---:|---|---|---:|---:|---:|" + ("---:|" if peak else "") + "---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['dtype']} | {r['head_dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
                     f"{r['direction']} | {r['ours_gflops']:.1f} | {r['torch_gflops']:.1f} | {r['speedup']:.2f}x |"
                     + (f" {100 * r['ours_gflops'] / peak:.0f}% |" if peak else "")
                     + f" {r['err']:.2e} | {fmt_err(r['err_fp64_ours'])} | {fmt_err(r['err_fp64_torch'])} | {r['runs']} |")
    slower = [r for r in results if r["speedup"] < 1.0]
    lines += ["", f"Grid time: {elapsed:.0f} s. Shapes where torch is faster: {len(slower)} of {len(results)}."]
    if slower:
        lines += [f"- {r['dtype']} d{r['head_dim']} s{r['seqlen']} {'causal' if r['causal'] else 'full'} "
                  f"{r['direction']}: {r['speedup']:.2f}x" for r in slower]
    Path(path).write_text("\n".join(lines) + "\n")


def plot(path, results, machine):
    """The chart; False where matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False

    dtypes = sorted({r["dtype"] for r in results}, key=["fp32", "bf16", "fp16"].index)
    directions = [x for x in ("fwd", "bwd") if any(r["direction"] == x for r in results)]
    causals = sorted({r["causal"] for r in results})
    panels = [(dt, dr, c) for dr in directions for dt in dtypes for c in causals]
    ncols = len(causals)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.5 * ncols, 3.6 * nrows), squeeze=False)
    peak = machine.get("peak_gflops")
    for ax, (dt, dr, c) in zip(axes.flat, panels):
        rows = [r for r in results if r["dtype"] == dt and r["direction"] == dr and r["causal"] == c]
        rows.sort(key=lambda r: (r["head_dim"], r["seqlen"]))
        x = range(len(rows))
        width = 0.4
        ours = [r["ours_gflops"] for r in rows]
        theirs = [r["torch_gflops"] for r in rows]
        b1 = ax.bar([i - width / 2 for i in x], ours, width, label="flashattn (ours)", color="#1f77b4")
        b2 = ax.bar([i + width / 2 for i in x], theirs, width, label="torch SDPA", color="#ff7f0e")
        for bars in (b1, b2):
            for bar in bars:
                ax.annotate(f"{bar.get_height():.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
        top = max(ours + theirs + [peak or 0])
        if peak:
            ax.axhline(peak, color="grey", linestyle="--", linewidth=0.8)
            ax.text(len(rows) - 0.5, peak, f"FMA peak {peak:.0f}", ha="right", va="bottom", fontsize=7, color="grey")
        ax.set_ylim(0, top * 1.15)
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"d{r['head_dim']}\ns{r['seqlen']}" for r in rows], fontsize=8)
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{dr}, {dt}, {'causal' if c else 'non-causal'}", fontsize=10)
        if ax is axes.flat[0]:
            ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"flashattn CPU backend vs torch {machine['torch']} SDPA — {machine['model']}, "
                 f"{machine['threads']} threads ({machine['our_build']})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


if __name__ == "__main__":
    main()
