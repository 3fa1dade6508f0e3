"""Forward benchmark of the CUDA backend against PyTorch SDPA's FlashAttention-2 and cuDNN backends.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_forward.py --out DIR [--quick]
        [--shapes mha,gqa] [--hdims 64,128,256] [--seqlens S,...] [--rounds N]
        [--variant LABEL:KEY=VALUE[,KEY=VALUE]]... [--lib NAME:PATH]... [--alternate CALLS] [--fa3 SO]

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

The shapes models train (bench_common.shape_grid): bf16, batch * seqlen = 16k tokens, seqlen
1k/2k/4k/8k/16k (--quick: 1k/4k/16k), causal and not, for two families (--shapes):
  mha: the FlashAttention-2 paper's, hidden 2048: nheads = nheads_k = 2048 / d, d in {64, 128, 256};
  gqa: grouped K/V heads, (nheads, nheads_k) = (32, 8) and (64, 8) at d128, (32, 4) at d256.
FLOPs are counted on the query heads, as FlashAttention does: 4 * b * h_q * s^2 * d, halved when
causal. All implementations run in this process on the same tensors (q (batch, seqlen, nheads, d),
k/v (batch, seqlen, nheads_k, d)), timed in balanced turns of triton's do_bench (CUDA events,
median, L2 flushed between runs; with --alternate CALLS, CALLS calls a turn), as
bench/gpu_backward.py says. Torch's backends get (b, h, s, d) views; on a GQA row, K/V with their
nheads_k heads (enable_gqa=True), or, for a backend that raises for that, K/V repeated to nheads
heads beforehand, outside the timed call: column baseline_gqa says which, per backend (e.g.
fa2=native;cudnn=expanded; empty on MHA rows).

Writes DIR/<card>-forward.csv (date, commit, gpu, hdim, causal, seqlen, batch, nheads, nheads_k,
ours_tflops, torch_fa2_tflops, cudnn_tflops, ours_sm80_tflops, max_abs_diff_vs_fa2, baseline_gqa, then
one column per --variant and --lib) and DIR/<card>-forward.png (grouped bars per seqlen, one panel per
(head shape, causal): rows MHA d64, MHA d128, MHA d256, GQA 32/8 d128, GQA 64/8 d128, GQA 32/4 d256;
columns non-causal, causal; bars ours, ours_sm80, FA2, cuDNN, then the --variant and --lib columns).
Also measures the two ceilings (bf16 matmul TFLOP/s, copy TB/s) into DIR/<card>-ceilings.json.
Column ours_sm80_tflops times the portable mma.sync kernel on the same shapes (overrides
forward_kernel=sm80; on Hopper the library's own choice, column ours_tflops, is mostly the wgmma kernel).
--variant LABEL:OVERRIDES times ours with those overrides set (fa_set_overrides, FLASHATTN_OVERRIDES's
syntax), column ours_LABEL_tflops; --lib NAME:PATH times the library at PATH (a build of another
commit: a before/after comparison in one process, interleaved), column ours_NAME_tflops, and the
table prints ours / NAME. --fa3 SO also times FlashAttention-3's Hopper forward through the shim that
bench/fa3/build.sh builds from a FlashAttention-3 checkout (column fa3_tflops; its max abs diff against
torch's FA2 goes into fa3_max_abs_diff_vs_fa2): what a Hopper user could build instead.
`--replot CSV` only redraws the chart from a results file (one without nheads_k: all MHA).
"""
import argparse
import csv
import ctypes
import datetime
import json
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fa3"))
import abi  # noqa: E402
import fa3 as fa3_shim  # noqa: E402
from bench_common import ALTERNATE_HELP, FAMILIES, ROUNDS_HELP, commit, parse_variant, timed_rates  # noqa: E402
from bench_common import SCRATCH, baseline_or_nan, grid_from_args, parse_lib, plot_grid, read_rows  # noqa: E402
from bench_common import card_file, replot_file, shape_label  # noqa: E402

BASELINES = (("torch_fa2", "fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", "cudnn", SDPBackend.CUDNN_ATTENTION))


def bench_ms(fn):
    return do_bench(fn, warmup=5, rep=25, return_mode="median")


def ceilings():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = 2 * 8192 ** 3 / bench_ms(lambda: a @ b) / 1e9
    x = torch.randn(2 * 1024 ** 3 // 4, device="cuda")
    y = torch.empty_like(x)
    copy = 2 * x.numel() * 4 / bench_ms(lambda: y.copy_(x)) / 1e9
    del a, b, x, y
    torch.cuda.empty_cache()
    return {"matmul_bf16_tflops": mm, "copy_TBps": copy}


def ours_fn(q, k, v, out, causal, library=abi.lib):
    params = abi.make_fwd_params(q, k, v, out, causal=causal, backend=abi.BACKEND_CUDA,
                                 stream=torch.cuda.current_stream().cuda_stream)
    abi.call_forward(params, library=library)  # once for errors
    forward, ref = library.forward, ctypes.byref(params)
    return lambda: forward(ref)


def sdpa_fn(q, k, v, causal, backend, expand):
    """Torch SDPA on (b, h, s, d) views of the same memory, run once (a refusal raises here); returns
    (run, its output). Fewer K/V heads go in as they are (enable_gqa) or, with expand, repeated to q's
    heads here, outside the timed call. MHA rows go without enable_gqa: the call the MHA records were
    timed with."""
    gqa = k.shape[2] != q.shape[2]
    if expand:
        k, v = (t.repeat_interleave(q.shape[2] // k.shape[2], dim=2) for t in (k, v))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa and not expand)
    return run, run()


def measure(grid, variants=(), libs=(), rounds=1, alternate=0, fa3=None):
    rows, noted = [], set()
    for shape in grid:
        b, s, h, hk, d, causal = (shape[key] for key in ("batch", "seqlen", "nheads", "nheads_k", "hdim", "causal"))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)  # on the query heads, GQA or not
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        row = dict(shape)
        fn = ours_fn(q, k, v, out, causal)
        # (column, function, context while it runs): the library's own choice (the Hopper kernel on
        # sm_90), the portable mma.sync kernel forced, the --variant overrides, the --lib builds,
        # torch's two backends; each the mean of its turns (bench_common.timed_rates).
        entries = [("ours", fn, None)]
        for label, spec in [("sm80", "forward_kernel=sm80"), *variants]:
            try:
                with abi.overrides(spec):
                    abi.lib.check(fn())
                entries.append((f"ours_{label}", fn, lambda spec=spec: abi.overrides(spec)))
            except abi.FlashAttnError as e:  # e.g. a kernel forced onto a problem it cannot run
                row[f"ours_{label}_tflops"] = float("nan")
                print(f"  {label}: {e}", flush=True)
        entries += [(f"ours_{name}", ours_fn(q, k, v, out, causal, library), None) for name, library in libs]
        hows, fa2_out = [], None
        for name, short, backend in BASELINES:
            got = baseline_or_nan(partial(sdpa_fn, q, k, v, causal, backend), hk != h, name, noted, row)
            if got is None:
                continue
            (f, ref), how = got
            entries.append((name, f, None))
            hows += [f"{short}={how}"] if how else []
            if name == "torch_fa2":  # sanity: same function as the reference backend
                fn()
                fa2_out = ref.transpose(1, 2)
                row["max_abs_diff_vs_fa2"] = (out.float() - fa2_out.float()).abs().max().item()
            del ref
        row["baseline_gqa"] = ";".join(hows)
        if fa3 is not None:
            out3 = torch.empty_like(q)
            try:
                entries.append(("fa3", fa3_shim.forward_fn(fa3, q, k, v, out3, causal)[0], None))
                row["fa3_max_abs_diff_vs_fa2"] = (float("nan") if fa2_out is None else
                                                  (out3.float() - fa2_out.float()).abs().max().item())
            except RuntimeError as e:  # a head dim the shim was not built with
                row["fa3_tflops"] = row["fa3_max_abs_diff_vs_fa2"] = float("nan")
                print(f"  fa3: {e}", flush=True)
        for column, tflops in timed_rates(entries, rounds, bench_ms, flops / 1e9, alternate).items():
            row[f"{column}_tflops"] = tflops
        rows.append(row)
        print(f"{shape_label(row):>13} causal={causal!s:5} s={s:5d}: ours {row['ours_tflops']:6.1f}  "
              f"fa2 {row['torch_fa2_tflops']:6.1f}  cudnn {row['cudnn_tflops']:6.1f}  "
              f"(diff {row.get('max_abs_diff_vs_fa2', float('nan')):.3g})"
              + (f"  [{row['baseline_gqa']}]" if row["baseline_gqa"] else "")
              + (f"  fa3 {row['fa3_tflops']:6.1f} (diff {row['fa3_max_abs_diff_vs_fa2']:.3g})" if fa3 else ""),
              flush=True)
        del q, k, v, out, entries, fa2_out
        torch.cuda.empty_cache()
    return rows


def plot(rows, path):
    """Bars per shape: our two kernels (where measured), torch's FA2 and cuDNN backends, FlashAttention-3
    where timed (--fa3)."""
    plot_grid(rows, path, "Forward, bf16, H200 (batch x seqlen = 16k; MHA: hidden 2048; FLOPs on the query heads)",
              [("ours_tflops", "flashattn (on Hopper: the wgmma kernel)", "#1f77b4"),
               ("ours_sm80_tflops", "flashattn, mma.sync kernel forced", "#9ecae1"),
               ("torch_fa2_tflops", "PyTorch SDPA FA2", "#ff7f0e"),
               ("cudnn_tflops", "PyTorch SDPA cuDNN", "#2ca02c"),
               ("fa3_tflops", "FlashAttention-3 (built by bench/fa3/build.sh)", "#d62728")])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k only")
    ap.add_argument("--shapes", default=",".join(FAMILIES), help="comma-separated families: mha, gqa (default both)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
                    help="also time ours with these overrides set (column ours_LABEL_tflops); repeatable")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME:PATH",
                    help="also time the library at PATH (another build), interleaved (column ours_NAME_tflops)")
    ap.add_argument("--rounds", type=int, default=1,
                    help=ROUNDS_HELP)
    ap.add_argument("--alternate", type=int, default=0, metavar="CALLS", help=ALTERNATE_HELP)
    ap.add_argument("--hdims", help="comma-separated head dims (default: 64,128,256; GQA: its shapes at these)")
    ap.add_argument("--seqlens", help="comma-separated seqlens (default: the grid, or --quick's)")
    ap.add_argument("--fa3", metavar="SO", help="also time FlashAttention-3's forward through this shim library "
                    "(bench/fa3/build.sh), column fa3_tflops")
    ap.add_argument("--replot", metavar="CSV", help="only redraw DIR/<card>-forward.png from a results CSV")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        replot_rows = read_rows(args.replot)
        plot(replot_rows, replot_file(out, replot_rows, "forward.png"))
        return
    grid = grid_from_args(args)
    print(f"{len(grid)} problems", flush=True)
    props = torch.cuda.get_device_properties(0)
    ceil = ceilings()
    ceil.update({"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                 "cudnn": torch.backends.cudnn.version()})
    print(ceil, flush=True)
    card_file(out, props.name, "ceilings.json").write_text(json.dumps(ceil, indent=1))

    variants = [parse_variant(v) for v in args.variant]
    libs = [(name, abi.Library(path)) for name, path in map(parse_lib, args.lib)]
    fa3 = fa3_shim.load(args.fa3) if args.fa3 else None
    rows = measure(grid, variants=variants, libs=libs, rounds=args.rounds, alternate=args.alternate, fa3=fa3)
    date, rev = datetime.date.today().isoformat(), commit()
    fields = ["date", "commit", "gpu", "hdim", "causal", "seqlen", "batch", "nheads", "nheads_k", "ours_tflops",
              "torch_fa2_tflops", "cudnn_tflops", "ours_sm80_tflops", "max_abs_diff_vs_fa2",
              "baseline_gqa"] + [f"ours_{label}_tflops" for label, _ in variants + libs] + (
                  ["fa3_tflops", "fa3_max_abs_diff_vs_fa2"] if fa3 else [])
    with open(card_file(out, props.name, "forward.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({"date": date, "commit": rev, "gpu": props.name, **{k: (round(v, 2) if isinstance(v, float)
                                                                              and k.endswith("tflops") else v)
                                                                          for k, v in r.items()}})
    try:
        plot(rows, card_file(out, props.name, "forward.png"))
    except Exception as e:  # the numbers matter more than the chart
        print("plot failed:", e)

    print("\nforward TFLOP/s, bf16 (ratio = ours / torch FA2, ours / cuDNN)")
    print(f"{'hdim':>4} {'h':>3} {'hk':>3} {'causal':>6} {'seqlen':>6} | {'ours':>6} {'FA2':>6} {'cuDNN':>6} "
          f"{'sm80':>6} | {'/FA2':>5} {'/cuDNN':>6} | diff")
    for r in rows:
        print(f"{r['hdim']:4d} {r['nheads']:3d} {r['nheads_k']:3d} {str(r['causal']):>6} {r['seqlen']:6d} | "
              f"{r['ours_tflops']:6.1f} "
              f"{r['torch_fa2_tflops']:6.1f} {r['cudnn_tflops']:6.1f} {r['ours_sm80_tflops']:6.1f} | "
              f"{r['ours_tflops'] / r['torch_fa2_tflops']:5.2f} {r['ours_tflops'] / r['cudnn_tflops']:6.2f} | "
              f"{r.get('max_abs_diff_vs_fa2', float('nan')):.2g}"
              + "".join(f" | {label} {r[f'ours_{label}_tflops']:6.1f}" for label, _ in variants)
              + "".join(f" | {name} {r[f'ours_{name}_tflops']:6.1f} ours/{name} "
                        f"{r['ours_tflops'] / r[f'ours_{name}_tflops']:4.2f}" for name, _ in libs)
              + (f" | FA3 {r['fa3_tflops']:6.1f} ours/FA3 {r['ours_tflops'] / r['fa3_tflops']:4.2f} "
                 f"FA3/cuDNN {r['fa3_tflops'] / r['cudnn_tflops']:4.2f}" if fa3 else ""))


if __name__ == "__main__":
    main()
