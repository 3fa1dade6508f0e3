"""Backward benchmark of the CUDA backend against PyTorch SDPA's FlashAttention-2 and cuDNN backends.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_backward.py --out DIR [--quick]
        [--shapes mha,gqa] [--hdims 64,128,256] [--seqlens S,...] [--rounds N]
        [--variant LABEL:KEY=VALUE[,KEY=VALUE]]... [--det-variant LABEL:KEY=VALUE]... [--lib NAME:PATH]...
        [--alternate CALLS] [--fa3 SO]

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

The forward benchmark's grid (bench/gpu_forward.py, bench_common.shape_grid): bf16, batch * seqlen =
16k tokens, seqlen 1k/2k/4k/8k/16k (--quick: 1k/4k/16k), causal and not, MHA (nheads = nheads_k =
2048 / d, d in {64, 128, 256}) and GQA ((nheads, nheads_k) = (32, 8) and (64, 8) at d128, (32, 4) at
d256), chosen with --shapes. Backward FLOPs = 2.5 x the forward's (4 * b * h_q * s^2 * d on the
query heads, halved when causal): five products instead of two. Only the backward is timed: ours is
fa_backward on the forward's out and lse (library scratch, as a plain C caller gets it), dk and dv
with nheads_k heads; torch's is torch.autograd.grad through SDPA with the graph kept, so each timed
call is exactly one backward (no grad accumulation). Torch's backends get (b, h, s, d) leaves; on a
GQA row, K/V with their nheads_k heads (enable_gqa=True), or, for a backend that raises for that,
K/V repeated to nheads heads beforehand (outside the graph: its gradients are per query head, and
their per-group sums are compared with ours); column baseline_gqa says which, per backend (e.g.
fa2=native;cudnn=expanded; empty on MHA rows). All in this process, on the same tensors, timed in
turns (bench_common.timed_rates): every implementation after every one equally often, after an
untimed lead-in turn, the mean of its turns kept (at the 700 W cap a turn runs at the clock the turn
before it left). A turn is one triton do_bench (CUDA events, median, L2 flushed between runs),
--rounds turns each (rounded up to whole orders; default one order). With --alternate CALLS a turn is
CALLS calls between CUDA events (warm L2), 20 turns each by default: for before/after comparisons
within a few percent (A/A: sd 1.3-1.8% a row, docs/perf-log.md session 51).

Writes DIR/<card>-backward.csv (the forward file's columns: date, commit, gpu, hdim, causal,
seqlen, batch, nheads, nheads_k, ours_tflops, torch_fa2_tflops, cudnn_tflops, then
ours_deterministic_tflops, max_abs_diff_vs_fa2, the largest |dq|, |dk|, |dv| difference to torch
FA2's gradients, and baseline_gqa) and DIR/<card>-backward.png (the forward's panels: a row per head
shape, non-causal and causal). Each --variant LABEL:OVERRIDES (e.g.
`sm80:backward_kernel=sm80`, the mma.sync kernel; fa_set_overrides, FLASHATTN_OVERRIDES's syntax) is
timed as its own column ours_LABEL_tflops with those overrides set while it runs, plus
ours_LABEL_diff: its largest gradient difference to the library's own choice on the same tensors (a
wrong kernel shows here; the dQ atomics make it nonzero even between two runs of one kernel). Each
--lib NAME:PATH (a build of another commit: a before/after comparison in one process, interleaved)
gets the same two columns, ours_NAME_tflops and ours_NAME_diff, and its deterministic call
ours_NAME_deterministic_tflops; the table prints ours / NAME and det / NAME's det.
Each --det-variant LABEL:OVERRIDES times the deterministic call with those overrides set (e.g.
`chunks:deterministic_dq=chunks`, the per-chunk dQ buffers instead of the ordered dQ): columns
ours_LABEL_tflops and ours_LABEL_diff (against the library's non-deterministic gradients); the
table prints det / LABEL.
--fa3 SO also times FlashAttention-3's backward (default and deterministic; on its own forward's out
and lse) through the shim bench/fa3/build.sh builds: columns fa3_tflops, fa3_deterministic_tflops and
fa3_diff (its largest gradient difference to ours).
`--replot CSV` only redraws the chart from a results file (one without nheads_k: all MHA).
"""
import argparse
import csv
import ctypes
import datetime
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fa3"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import abi  # noqa: E402
import fa3 as fa3_shim  # noqa: E402
from bench_common import ALTERNATE_HELP, FAMILIES, ROUNDS_HELP, commit, parse_variant, timed_rates  # noqa: E402
from bench_common import SCRATCH, baseline_or_nan, grid_from_args, parse_lib, plot_grid, read_rows  # noqa: E402
from bench_common import card_file, replot_file, shape_label  # noqa: E402

BASELINES = (("torch_fa2", "fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", "cudnn", SDPBackend.CUDNN_ATTENTION))


def bench_ms(fn):
    return do_bench(fn, warmup=5, rep=25, return_mode="median")


def ours_fn(q, k, v, out, lse, dout, grads, causal, deterministic, library=abi.lib):
    """fa_backward with prebuilt parameters: what is timed is the library call alone."""
    params = abi.make_bwd_params(q, k, v, out, lse, dout, *grads, deterministic=deterministic, causal=causal,
                                 backend=abi.BACKEND_CUDA, stream=torch.cuda.current_stream().cuda_stream)
    backward, ref = library.backward, ctypes.byref(params)
    library.check(backward(ref))  # once for errors
    return lambda: backward(ref)


def sdpa_backward_fn(q, k, v, dout, causal, backend, expand):
    """torch.autograd.grad through SDPA on (b, h, s, d) leaves, the forward's graph kept; run once here
    (a refusal raises); returns (run, its (dq, dk, dv)). Fewer K/V heads go in as they are (enable_gqa)
    or, with expand, repeated to q's heads here, outside the graph and the timed call. MHA rows go
    without enable_gqa: the call the MHA records were timed with."""
    gqa = k.shape[2] != q.shape[2]
    if expand:
        k, v = (t.repeat_interleave(q.shape[2] // k.shape[2], dim=2) for t in (k, v))
    leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=gqa and not expand)
    dout_t = dout.transpose(1, 2)

    def run():
        return torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
    return run, run()


def folded(grad, nheads):
    """A torch gradient (b, h, s, d) in ours' layout (b, s, nheads, d), fp32: the gradient of K/V
    expanded to the query heads summed over each group (repeat_interleave's heads are contiguous)."""
    return grad.transpose(1, 2).float().unflatten(2, (nheads, -1)).sum(3)


def measure(grid, variants=(), libs=(), rounds=1, det_variants=(), alternate=0, fa3=None):
    rows, noted = [], set()
    for shape in grid:
        b, s, h, hk, d, causal = (shape[key] for key in ("batch", "seqlen", "nheads", "nheads_k", "hdim", "causal"))
        flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)  # on the query heads, GQA or not
        q, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse, _ = abi.forward(q, k, v, causal=causal)
        grads = [torch.empty_like(t) for t in (q, k, v)]  # dk, dv with nheads_k heads
        row = dict(shape)
        ours = ours_fn(q, k, v, out, lse, dout, grads, causal, False)
        ours()
        ours_grads = [g.clone() for g in grads]
        # Each implementation's rate is the mean of its turns (bench_common.timed_rates).
        entries = [("ours", ours, None),
                   ("ours_deterministic", ours_fn(q, k, v, out, lse, dout, grads, causal, True), None)]
        # The default call under each of `variants`' overrides, the deterministic one under `det_variants`'.
        forced = [(label, spec, ours) for label, spec in variants]
        forced += [(label, spec, ours_fn(q, k, v, out, lse, dout, grads, causal, True)) for label, spec in det_variants]
        for label, spec, call in forced:
            try:
                with abi.overrides(spec):
                    abi.lib.check(call())
            except abi.FlashAttnError as e:  # e.g. a kernel forced onto a problem it cannot run
                row[f"ours_{label}_tflops"] = row[f"ours_{label}_diff"] = float("nan")
                print(f"  {label}: {e}", flush=True)
                continue
            entries.append((f"ours_{label}", call, lambda spec=spec: abi.overrides(spec)))
            row[f"ours_{label}_diff"] = max((g.float() - o.float()).abs().max().item()
                                            for g, o in zip(grads, ours_grads))
        for name, library in libs:
            entries.append((f"ours_{name}", ours_fn(q, k, v, out, lse, dout, grads, causal, False, library),
                            None))  # (called once: grads hold its result)
            row[f"ours_{name}_diff"] = max((g.float() - o.float()).abs().max().item()
                                           for g, o in zip(grads, ours_grads))
            entries.append((f"ours_{name}_deterministic",
                            ours_fn(q, k, v, out, lse, dout, grads, causal, True, library), None))
        hows = []
        for name, short, backend in BASELINES:
            got = baseline_or_nan(partial(sdpa_backward_fn, q, k, v, dout, causal, backend), hk != h, name, noted, row)
            if got is None:
                continue
            (f, ref), how = got
            entries.append((name, f, None))
            hows += [f"{short}={how}"] if how else []
            if name == "torch_fa2":  # sanity: the same gradients as the reference backend
                row["max_abs_diff_vs_fa2"] = max((o.float() - folded(r, o.shape[2])).abs().max().item()
                                                 for o, r in zip(ours_grads, ref))
            del ref
        row["baseline_gqa"] = ";".join(hows)
        if fa3 is not None:
            try:  # (the default mode last: its gradients are the ones left for the difference)
                runs3, grads3 = fa3_shim.own_backward_fns(fa3, q, k, v, dout, causal, (True, False))
                entries += [("fa3", runs3[False], None), ("fa3_deterministic", runs3[True], None)]
                row["fa3_diff"] = max((g.float() - o.float()).abs().max().item() for g, o in zip(grads3, ours_grads))
            except RuntimeError as e:  # a head dim the shim was not built with
                row["fa3_tflops"] = row["fa3_deterministic_tflops"] = row["fa3_diff"] = float("nan")
                print(f"  fa3: {e}", flush=True)
        for column, tflops in timed_rates(entries, rounds, bench_ms, flops / 1e9, alternate).items():
            row[f"{column}_tflops"] = tflops
        del entries
        rows.append(row)
        print(f"{shape_label(row):>13} causal={causal!s:5} s={s:5d}: ours {row['ours_tflops']:6.1f} "
              f"(det {row['ours_deterministic_tflops']:6.1f})  fa2 {row['torch_fa2_tflops']:6.1f}  "
              f"cudnn {row['cudnn_tflops']:6.1f}  (diff {row.get('max_abs_diff_vs_fa2', float('nan')):.3g})"
              + "".join(f"  {label} {row[f'ours_{label}_tflops']:6.1f} (diff {row[f'ours_{label}_diff']:.3g})"
                        for label, _ in variants + det_variants + libs)
              + "".join(f"  {name} det {row[f'ours_{name}_deterministic_tflops']:6.1f}" for name, _ in libs)
              + (f"  [{row['baseline_gqa']}]" if row["baseline_gqa"] else "")
              + (f"  fa3 {row['fa3_tflops']:6.1f} (det {row['fa3_deterministic_tflops']:6.1f}, diff {row['fa3_diff']:.3g})"
                 if fa3 else ""), flush=True)
        del q, k, v, dout, out, lse, grads, ours_grads
        torch.cuda.empty_cache()
    return rows


def plot(rows, path):
    """Bars per shape: ours (the library's own choice), torch's FA2 and cuDNN backends, the --variant
    and --lib columns."""
    plot_grid(rows, path, "Backward, bf16, H200 (batch x seqlen = 16k; MHA: hidden 2048; FLOPs = 2.5 x forward, "
                          "on the query heads)",
              [("ours_tflops", "flashattn (ours)", "#1f77b4"), ("torch_fa2_tflops", "PyTorch SDPA FA2", "#ff7f0e"),
               ("cudnn_tflops", "PyTorch SDPA cuDNN", "#2ca02c"),
               ("fa3_tflops", "FlashAttention-3 (built by bench/fa3/build.sh)", "#d62728")],
              hide=tuple({k for r in rows for k in r if k.endswith("_deterministic_tflops")}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k only")
    ap.add_argument("--shapes", default=",".join(FAMILIES), help="comma-separated families: mha, gqa (default both)")
    ap.add_argument("--hdims", help="comma-separated head dims (default: 64,128,256; GQA: its shapes at these)")
    ap.add_argument("--seqlens", help="comma-separated seqlens (default: the grid, or --quick's)")
    ap.add_argument("--rounds", type=int, default=1,
                    help=ROUNDS_HELP)
    ap.add_argument("--alternate", type=int, default=0, metavar="CALLS", help=ALTERNATE_HELP)
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
                    help="also time ours with these overrides set (column ours_LABEL_tflops); repeatable")
    ap.add_argument("--det-variant", action="append", default=[], metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
                    help="also time the deterministic call with these overrides set (column ours_LABEL_tflops; "
                         "e.g. chunks:deterministic_dq=chunks); repeatable")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME:PATH",
                    help="also time the library at PATH (another build), interleaved (columns ours_NAME_tflops, "
                         "ours_NAME_deterministic_tflops)")
    ap.add_argument("--fa3", metavar="SO", help="also time FlashAttention-3's backward through this shim library "
                    "(bench/fa3/build.sh), columns fa3_tflops, fa3_deterministic_tflops")
    ap.add_argument("--replot", metavar="CSV", help="only redraw DIR/<card>-backward.png from a results CSV")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        replot_rows = read_rows(args.replot)
        plot(replot_rows, replot_file(out, replot_rows, "backward.png"))
        return
    grid = grid_from_args(args)
    print(f"{len(grid)} problems", flush=True)
    props = torch.cuda.get_device_properties(0)

    variants = [parse_variant(v) for v in args.variant]
    det_variants = [parse_variant(v) for v in args.det_variant]
    libs = [(name, abi.Library(path)) for name, path in map(parse_lib, args.lib)]
    rows = measure(grid, variants=variants, libs=libs, rounds=args.rounds, det_variants=det_variants,
                   alternate=args.alternate, fa3=fa3_shim.load(args.fa3) if args.fa3 else None)
    date, rev = datetime.date.today().isoformat(), commit()
    fields = ["date", "commit", "gpu", "hdim", "causal", "seqlen", "batch", "nheads", "nheads_k", "ours_tflops",
              "torch_fa2_tflops", "cudnn_tflops", "ours_deterministic_tflops", "max_abs_diff_vs_fa2", "baseline_gqa"]
    for label, _ in variants + det_variants + libs:
        fields += [f"ours_{label}_tflops", f"ours_{label}_diff"]
    fields += [f"ours_{name}_deterministic_tflops" for name, _ in libs]
    fields += ["fa3_tflops", "fa3_deterministic_tflops", "fa3_diff"] if args.fa3 else []
    with open(card_file(out, props.name, "backward.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({"date": date, "commit": rev, "gpu": props.name,
                        **{k: (round(v, 2) if isinstance(v, float) and k.endswith("tflops") else v)
                           for k, v in r.items()}})
    try:
        plot(rows, card_file(out, props.name, "backward.png"))
    except Exception as e:  # the numbers matter more than the chart
        print("plot failed:", e)

    print("\nbackward TFLOP/s, bf16 (ratio = ours / torch FA2, ours / cuDNN; det/ours = deterministic / ours)")
    print(f"{'hdim':>4} {'h':>3} {'hk':>3} {'causal':>6} {'seqlen':>6} | {'ours':>6} {'det':>6} {'FA2':>6} "
          f"{'cuDNN':>6} | {'/FA2':>5} {'/cuDNN':>6} {'det/ours':>8} | diff")
    for r in rows:
        print(f"{r['hdim']:4d} {r['nheads']:3d} {r['nheads_k']:3d} {str(r['causal']):>6} {r['seqlen']:6d} | "
              f"{r['ours_tflops']:6.1f} "
              f"{r['ours_deterministic_tflops']:6.1f} {r['torch_fa2_tflops']:6.1f} {r['cudnn_tflops']:6.1f} | "
              f"{r['ours_tflops'] / r['torch_fa2_tflops']:5.2f} {r['ours_tflops'] / r['cudnn_tflops']:6.2f} "
              f"{r['ours_deterministic_tflops'] / r['ours_tflops']:8.2f} | "
              f"{r.get('max_abs_diff_vs_fa2', float('nan')):.2g}"
              + "".join(f" | {label} {r[f'ours_{label}_tflops']:6.1f} ({r[f'ours_{label}_tflops'] / r['torch_fa2_tflops']:4.2f}"
                        f" FA2, diff {r[f'ours_{label}_diff']:.2g})" for label, _ in variants)
              + "".join(f" | {label} {r[f'ours_{label}_tflops']:6.1f} (det/{label} "
                        f"{r['ours_deterministic_tflops'] / r[f'ours_{label}_tflops']:4.2f}, diff {r[f'ours_{label}_diff']:.2g})"
                        for label, _ in det_variants)
              + "".join(f" | {name} {r[f'ours_{name}_tflops']:6.1f} ours/{name} "
                        f"{r['ours_tflops'] / r[f'ours_{name}_tflops']:4.2f} (diff {r[f'ours_{name}_diff']:.2g}), "
                        f"det/{name} {r['ours_deterministic_tflops'] / r[f'ours_{name}_deterministic_tflops']:4.2f}"
                        for name, _ in libs)
              + (f" | FA3 {r['fa3_tflops']:6.1f} det {r['fa3_deterministic_tflops']:6.1f} ours/FA3 "
                 f"{r['ours_tflops'] / r['fa3_tflops']:4.2f} FA3/cuDNN {r['fa3_tflops'] / r['cudnn_tflops']:4.2f} "
                 f"FA3 det/FA3 {r['fa3_deterministic_tflops'] / r['fa3_tflops']:4.2f}" if args.fa3 else ""))


if __name__ == "__main__":
    main()
