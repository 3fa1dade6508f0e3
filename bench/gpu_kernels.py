"""Which kernels one call launches: ours against cuDNN, forward and backward.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_kernels.py --out DIR \
        [--d 192 --dv 128] [--shapes 16384x1x16x16,1024x16x64x8] [--causal both|yes|no] \
        [--directions forward,backward] [--reps 10] [--deterministic] [--sink] [--lib NAME:PATH]...

Each implementation's call runs --reps times back to back (after three untimed) under torch.profiler
(CUPTI), and every kernel it launched is listed with its median duration, grid, block, registers and
shared memory; the first line gives the kernels' time per call. Ours goes through the package
(`flashattn.flash_attn_func`, autograd for the backward), cuDNN through torch SDPA's
CUDNN_ATTENTION backend (K/V with their own heads through `enable_gqa`), both built by
bench/gpu_features.py's functions, so q/k and v may have different head dims. L2 is warm (no flush between calls), unlike the benchmark grids. A shape is SEQxBATCHxHEADSxKV_HEADS.
The implementations run one after another, so at the 700 W cap each is timed at the clock the one
before left: the same kernel read 6-9% slower second than first (H100, docs/perf-log.md session 49).
Use the listing for which kernels run and where a call's time goes; compare nearly equal kernels
with the grids or bench_common.balanced_means.
--deterministic adds our backward in deterministic mode (`ours_det`); --sink adds each build of ours
with a learnable sink (`ours_sink`: logits from bench/gpu_features.py's sink_logits), on the same q,
k, v; --lib NAME:PATH another build of ours (`ours_NAME`). Writes DIR/kernels.txt.
"""
import argparse
import collections
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_features as features  # noqa: E402  (sets FLASHATTN_LIBRARY's default and the package path)
from bench_common import SCRATCH, parse_lib  # noqa: E402


def kernels_of(fn, reps):
    """(kernel time per call in us, [(calls per call, median us, grid, block, registers, shared memory, name)])."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
    launched = collections.OrderedDict()
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        a = e.get("args", {})
        key = (e["name"], str(a.get("grid")), str(a.get("block")), a.get("registers per thread"), a.get("shared memory"))
        launched.setdefault(key, []).append(e["dur"])
    total = sum(sum(d) for d in launched.values()) / reps
    rows = [(len(d) / reps, sorted(d)[len(d) // 2], grid, block, regs, smem, name)
            for (name, grid, block, regs, smem), d in launched.items()]
    return total, rows


def parse_shape(text):
    seqlen, batch, heads, heads_k = (int(x) for x in text.lower().split("x"))
    return seqlen, batch, heads, heads_k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--d", type=int, default=128, help="head dim of q and k (default 128)")
    ap.add_argument("--dv", type=int, help="head dim of v and out (default --d)")
    ap.add_argument("--shapes", default="1024x16x16x16,16384x1x16x16",
                    help="comma-separated SEQxBATCHxHEADSxKV_HEADS (default 1024x16x16x16,16384x1x16x16)")
    ap.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    ap.add_argument("--directions", default="forward,backward", help="comma-separated: forward, backward")
    ap.add_argument("--reps", type=int, default=10, help="calls profiled back to back (default 10)")
    ap.add_argument("--deterministic", action="store_true", help="also our backward in deterministic mode (ours_det)")
    ap.add_argument("--sink", action="store_true", help="also ours with a learnable sink (ours_sink)")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME:PATH", help="another build of ours; repeatable")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from flashattn._library import Library
    libs = [(name, Library(path)) for name, path in (parse_lib(spec) for spec in args.lib)]
    dv = args.dv or args.d
    directions = args.directions.split(",")
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    lines = []

    def emit(text):
        print(text, flush=True)
        lines.append(text)

    emit(f"# {torch.cuda.get_device_name()}, bf16, q/k {args.d}, v {dv}, {args.reps} calls back to back (warm L2)")
    for shape in args.shapes.split(","):
        seqlen, batch, heads, heads_k = parse_shape(shape)
        for causal in causals:
            torch.manual_seed(0)
            q = torch.randn(batch, seqlen, heads, args.d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, seqlen, heads_k, args.d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(batch, seqlen, heads_k, dv, device="cuda", dtype=torch.bfloat16)
            dout = torch.randn(batch, seqlen, heads, dv, device="cuda", dtype=torch.bfloat16)
            tag = f"{batch}x{seqlen} {heads}/{heads_k} d {args.d}/{dv} {'causal' if causal else 'dense'}"
            impls = [("ours", None)] + [(f"ours_{name}", lib) for name, lib in libs]
            sinks = [None, features.sink_logits(heads, seqlen)] if args.sink else [None]
            for direction in directions:
                # Each builder runs its call once (a refusal raises there) and returns (run, results).
                calls = []
                for (label, lib), s in itertools.product(impls, sinks):
                    label += "_sink" if s is not None else ""
                    with features.on_library(lib):
                        if direction == "forward":
                            calls.append((label, lib, features.ours_forward(q, k, v, causal, s)[0]))
                        else:
                            calls.append((label, lib, features.ours_backward(q, k, v, dout, causal, s)[0]))
                            if args.deterministic and s is None:
                                calls.append((label + "_det", lib,
                                              features.ours_backward(q, k, v, dout, causal, None, deterministic=True)[0]))
                try:
                    if direction == "forward":
                        calls.append(("cudnn", None, features.cudnn_forward(q, k, v, causal)[0]))
                    else:
                        calls.append(("cudnn", None, features.cudnn_backward(q, k, v, dout, causal)[0]))
                except RuntimeError as error:  # a shape the backend refuses
                    emit(f"== cudnn {direction} {tag}: refused ({str(error).splitlines()[0][:120]})")
                for label, lib, run in calls:
                    with features.on_library(lib):
                        total, rows = kernels_of(run, args.reps)
                    emit(f"== {label} {direction} {tag}: {total:.1f} us of kernels per call")
                    for per_call, median, grid, block, regs, smem, name in rows:
                        emit(f"   {per_call:4.1f}x {median:9.1f} us  grid {grid:>14} block {block:>12} "
                             f"regs {regs} smem {smem}  {name[:200]}")
            del q, k, v, dout
            torch.cuda.empty_cache()
    (out / "kernels.txt").write_text("\n".join(lines) + "\n")
    print(f"\nwrote {out / 'kernels.txt'}")


if __name__ == "__main__":
    main()
