"""Backward benchmark of the CUDA backend against PyTorch SDPA's FlashAttention-2 and cuDNN backends.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_backward.py --out DIR [--quick]
        [--rounds N] [--variant LABEL:KEY=VALUE[,KEY=VALUE]]... [--lib NAME:PATH]...

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

The forward benchmark's grid (bench/gpu_forward.py): bf16, batch * seqlen = 16k tokens, hidden 2048
(nheads = 2048 / d), d in {64, 128, 256}, causal and not, seqlen 512..16k. Backward FLOPs = 2.5 x
the forward's (4 * b * h * s^2 * d, halved when causal): five products instead of two. Only the
backward is timed: ours is fa_backward on the forward's out and lse (library scratch, as a plain
C caller gets it); torch's is torch.autograd.grad through SDPA with the graph kept, so each timed
call is exactly one backward (no grad accumulation). All in this process, on the same tensors,
timed with triton's do_bench (CUDA events, median, L2 flushed between runs).

Writes DIR/h200-backward.csv (the forward file's columns: date, commit, gpu, hdim, causal,
seqlen, batch, nheads, ours_tflops, torch_fa2_tflops, cudnn_tflops, then
ours_deterministic_tflops and max_abs_diff_vs_fa2, the largest |dq|, |dk|, |dv| difference to torch
FA2's gradients) and DIR/h200-backward.png. Each --variant LABEL:OVERRIDES (e.g.
`sm80:backward_kernel=sm80`, the mma.sync kernel; fa_set_overrides, FLASHATTN_OVERRIDES's syntax) is
timed as its own column ours_LABEL_tflops with those overrides set while it runs, plus
ours_LABEL_diff: its largest gradient difference to the library's own choice on the same tensors (a
wrong kernel shows here; the dQ atomics make it nonzero even between two runs of one kernel). Each
--lib NAME:PATH (a build of another commit: a before/after comparison in one process, interleaved)
gets the same two columns, ours_NAME_tflops and ours_NAME_diff, and the table prints ours / NAME.
"""
import argparse
import csv
import ctypes
import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import abi  # noqa: E402
from bench_common import HDIMS, HIDDEN, SEQLENS, TOKENS, best_of_rounds, commit, parse_variant  # noqa: E402
from bench_common import SCRATCH, parse_lib, pyplot  # noqa: E402


def bench_ms(fn):
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def ours_fn(q, k, v, out, lse, dout, grads, causal, deterministic, library=abi.lib):
    """fa_backward with prebuilt parameters: what is timed is the library call alone."""
    params = abi.make_bwd_params(q, k, v, out, lse, dout, *grads, deterministic=deterministic, causal=causal,
                                 backend=abi.BACKEND_CUDA, stream=torch.cuda.current_stream().cuda_stream)
    backward, ref = library.backward, ctypes.byref(params)
    library.check(backward(ref))  # once for errors
    return lambda: backward(ref)


def sdpa_backward_fn(q, k, v, dout, causal, backend):
    leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]  # (b, h, s, d) views
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    dout_t = dout.transpose(1, 2)

    def run():
        return torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
    return run


def measure(shapes, variants=(), libs=(), rounds=1, hdims=HDIMS):
    rows = []
    for hdim in hdims:
        nheads = HIDDEN // hdim
        for causal in (False, True):
            for seqlen in shapes:
                batch = TOKENS // seqlen
                flops = 2.5 * 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)
                q, k, v, dout = (torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=torch.bfloat16)
                                 for _ in range(4))
                out, lse, _ = abi.forward(q, k, v, causal=causal)
                grads = [torch.empty_like(t) for t in (q, k, v)]
                row = {"hdim": hdim, "causal": causal, "seqlen": seqlen, "batch": batch, "nheads": nheads}
                ours = ours_fn(q, k, v, out, lse, dout, grads, causal, False)
                ours()
                ours_grads = [g.clone() for g in grads]
                # Each implementation keeps its best round (bench_common.best_of_rounds).
                entries = [("ours", ours, None),
                           ("ours_deterministic", ours_fn(q, k, v, out, lse, dout, grads, causal, True), None)]
                for label, spec in variants:
                    try:
                        with abi.overrides(spec):
                            abi.lib.check(ours())
                    except abi.FlashAttnError as e:  # e.g. a kernel forced onto a problem it cannot run
                        row[f"ours_{label}_tflops"] = row[f"ours_{label}_diff"] = float("nan")
                        print(f"  {label}: {e}", flush=True)
                        continue
                    entries.append((f"ours_{label}", ours, lambda spec=spec: abi.overrides(spec)))
                    row[f"ours_{label}_diff"] = max((g.float() - o.float()).abs().max().item()
                                                    for g, o in zip(grads, ours_grads))
                for name, library in libs:
                    entries.append((f"ours_{name}", ours_fn(q, k, v, out, lse, dout, grads, causal, False, library),
                                    None))  # (called once: grads hold its result)
                    row[f"ours_{name}_diff"] = max((g.float() - o.float()).abs().max().item()
                                                   for g, o in zip(grads, ours_grads))
                for name, backend in (("torch_fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        f = sdpa_backward_fn(q, k, v, dout, causal, backend)
                        ref = f()
                        entries.append((name, f, None))
                        if name == "torch_fa2":  # sanity: the same gradients as the reference backend
                            row["max_abs_diff_vs_fa2"] = max(
                                (o.float() - r.transpose(1, 2).float()).abs().max().item()
                                for o, r in zip(ours_grads, ref))
                        del ref
                    except RuntimeError as e:
                        row[f"{name}_tflops"] = float("nan")
                        print(f"  {name} failed: {str(e)[:100]}", flush=True)
                for column, tflops in best_of_rounds(entries, rounds, bench_ms, flops / 1e9).items():
                    row[f"{column}_tflops"] = tflops
                del entries
                rows.append(row)
                print(f"d{hdim:3d} causal={causal!s:5} s={seqlen:5d}: ours {row['ours_tflops']:6.1f} "
                      f"(det {row['ours_deterministic_tflops']:6.1f})  fa2 {row['torch_fa2_tflops']:6.1f}  "
                      f"cudnn {row['cudnn_tflops']:6.1f}  (diff {row.get('max_abs_diff_vs_fa2', float('nan')):.3g})"
                      + "".join(f"  {label} {row[f'ours_{label}_tflops']:6.1f} (diff {row[f'ours_{label}_diff']:.3g})"
                                for label, _ in variants + libs),
                      flush=True)
                del q, k, v, dout, out, lse, grads, ours_grads
                torch.cuda.empty_cache()
    return rows


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return
    panels = [(h, c) for h in sorted({r["hdim"] for r in rows}) for c in (False, True)]
    fig, axes = plt.subplots(3, 2, figsize=(13, 12), sharey=True)
    series = (("ours_tflops", "flashattn (ours)", "#1f77b4"), ("torch_fa2_tflops", "PyTorch SDPA FA2", "#ff7f0e"),
              ("cudnn_tflops", "PyTorch SDPA cuDNN", "#2ca02c"))
    for ax, (hdim, causal) in zip(axes.flat, panels):
        sel = [r for r in rows if r["hdim"] == hdim and r["causal"] == causal]
        xs = range(len(sel))
        for i, (key, label, color) in enumerate(series):
            bars = ax.bar([x + (i - 1) * 0.27 for x in xs], [r[key] for r in sel], width=0.27, label=label,
                          color=color)
            ax.bar_label(bars, fmt="%.0f", fontsize=6)
        ax.set_xticks(list(xs), [f"{r['seqlen'] // 1024}k" if r["seqlen"] >= 1024 else str(r["seqlen"]) for r in sel])
        ax.set_title(f"head dim {hdim}, {'causal' if causal else 'non-causal'}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
    axes.flat[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Backward, bf16, H200 (batch x seqlen = 16k, hidden 2048; FLOPs = 2.5 x forward)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k only")
    ap.add_argument("--hdims", help="comma-separated head dims (default: 64,128,256)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every implementation this many times, round-robin, and keep each one's best")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
                    help="also time ours with these overrides set (column ours_LABEL_tflops); repeatable")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME:PATH",
                    help="also time the library at PATH (another build), interleaved (column ours_NAME_tflops)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)

    variants = [parse_variant(v) for v in args.variant]
    libs = [(name, abi.Library(path)) for name, path in map(parse_lib, args.lib)]
    hdims = tuple(int(d) for d in args.hdims.split(",")) if args.hdims else HDIMS
    rows = measure((1024, 4096, 16384) if args.quick else SEQLENS, variants=variants, libs=libs, rounds=args.rounds,
                   hdims=hdims)
    date, rev = datetime.date.today().isoformat(), commit()
    fields = ["date", "commit", "gpu", "hdim", "causal", "seqlen", "batch", "nheads", "ours_tflops",
              "torch_fa2_tflops", "cudnn_tflops", "ours_deterministic_tflops", "max_abs_diff_vs_fa2"]
    for label, _ in variants + libs:
        fields += [f"ours_{label}_tflops", f"ours_{label}_diff"]
    with open(out / "h200-backward.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({"date": date, "commit": rev, "gpu": props.name,
                        **{k: (round(v, 2) if isinstance(v, float) and k.endswith("tflops") else v)
                           for k, v in r.items()}})
    try:
        plot(rows, out / "h200-backward.png")
    except Exception as e:  # the numbers matter more than the chart
        print("plot failed:", e)

    print("\nbackward TFLOP/s, bf16 (ratio = ours / torch FA2, ours / cuDNN)")
    print(f"{'hdim':>4} {'causal':>6} {'seqlen':>6} | {'ours':>6} {'det':>6} {'FA2':>6} {'cuDNN':>6} | "
          f"{'/FA2':>5} {'/cuDNN':>6} | diff")
    for r in rows:
        print(f"{r['hdim']:4d} {str(r['causal']):>6} {r['seqlen']:6d} | {r['ours_tflops']:6.1f} "
              f"{r['ours_deterministic_tflops']:6.1f} {r['torch_fa2_tflops']:6.1f} {r['cudnn_tflops']:6.1f} | "
              f"{r['ours_tflops'] / r['torch_fa2_tflops']:5.2f} {r['ours_tflops'] / r['cudnn_tflops']:6.2f} | "
              f"{r.get('max_abs_diff_vs_fa2', float('nan')):.2g}"
              + "".join(f" | {label} {r[f'ours_{label}_tflops']:6.1f} ({r[f'ours_{label}_tflops'] / r['torch_fa2_tflops']:4.2f}"
                        f" FA2, diff {r[f'ours_{label}_diff']:.2g})" for label, _ in variants)
              + "".join(f" | {name} {r[f'ours_{name}_tflops']:6.1f} ours/{name} "
                        f"{r['ours_tflops'] / r[f'ours_{name}_tflops']:4.2f} (diff {r[f'ours_{name}_diff']:.2g})"
                        for name, _ in libs))


if __name__ == "__main__":
    main()
