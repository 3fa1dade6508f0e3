"""Forward benchmark of the CUDA backend against PyTorch SDPA's FlashAttention-2 and cuDNN backends.

    FLASHATTN_LIB=build-gpu/src/libflashattn.so python3 bench/gpu_forward.py --out DIR [--quick] [--tiles]
        [--rounds N] [--variant LABEL:ENV=VALUE[,ENV=VALUE]]...

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

Shapes of the FlashAttention-2 paper: bf16, batch * seqlen = 16k tokens, hidden 2048 (nheads =
2048 / d), d in {64, 128, 256}, causal and not, seqlen 512..16k. FLOPs = 4 * b * h * s^2 * d, halved
when causal. All three run in this process on the same (batch, seqlen, heads, d) tensors, timed
with triton's do_bench (CUDA events, median, L2 flushed between runs).

Writes DIR/h200-forward.csv (date, commit, gpu, hdim, causal, seqlen, batch, nheads, ours_tflops,
torch_fa2_tflops, cudnn_tflops), DIR/h200-forward.png (grouped bars per seqlen, one panel per
(hdim, causal)) and, with --tiles, DIR/h200-forward-tiles.csv (each tiling of a tuning build).
Also measures the two ceilings (bf16 matmul TFLOP/s, copy TB/s) into DIR/h200-ceilings.json.
Column ours_sm80_tflops times the portable mma.sync kernel on the same shapes (on Hopper the library
runs the wgmma kernel, column ours_tflops).
`--replot CSV` only redraws the chart from a results file.
"""
import argparse
import csv
import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_ctypes as fa  # noqa: E402
from bench_common import (HDIMS, HIDDEN, SCRATCH, SEQLENS, TOKENS, best_of_rounds, commit,  # noqa: E402
                          parse_variant, pyplot)
# Tilings of a FLASHATTN_CUDA_TUNING build (head dim -> variants). "sm90:N" is the Hopper kernel
# with N keys per block ($FLASHATTN_CUDA_SM90_BLOCK_N; the default N needs no variable); "MxNxW"
# the SM80 kernel's variants ($FLASHATTN_CUDA_FWD_TILE; measured in session 2's first run:
# bench/results/h200-2026-11-30-s2-sm80-tiles).
TILES = {64: ["128x64x4", "sm90:64"],
         128: ["128x32x4", "sm90:64"],
         256: ["64x64x4", "sm90:32"]}


def bench_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


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


def ours_fn(q, k, v, out, causal):
    params = fa.make_fwd_params(q, k, v, out, causal=causal, backend=fa.FA_BACKEND_CUDA,
                                stream=torch.cuda.current_stream().cuda_stream)
    fa.call_forward(params)  # once for errors
    forward = fa.lib().fa_forward
    ref = fa.ctypes.byref(params)
    return lambda: forward(ref)


def sdpa_fn(q, k, v, causal, backend):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # (b, h, s, d) views of the same memory

    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return run


def measure(shapes, tiles=False, variants=(), rounds=1, hdims=HDIMS):
    rows, tile_rows = [], []
    for hdim in hdims:
        nheads = HIDDEN // hdim
        for causal in (False, True):
            for seqlen in shapes:
                batch = TOKENS // seqlen
                flops = 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)
                q, k, v = (torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=torch.bfloat16)
                           for _ in range(3))
                out = torch.empty_like(q)
                row = {"hdim": hdim, "causal": causal, "seqlen": seqlen, "batch": batch, "nheads": nheads}
                os.environ.pop("FLASHATTN_CUDA_FWD_TILE", None)
                fn = ours_fn(q, k, v, out, causal)
                # (column, function, environment while it runs): the library's own choice (the
                # Hopper kernel on sm_90), the portable mma.sync kernel forced, the --variant knobs,
                # torch's two backends; each keeps its best round.
                entries = [("ours", fn, {}),
                           ("ours_sm80", fn, {"FLASHATTN_CUDA_FWD_KERNEL": "sm80"})]
                entries += [(f"ours_{label}", fn, assignments) for label, assignments in variants]
                for name, backend in (("torch_fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        f = sdpa_fn(q, k, v, causal, backend)
                        ref = f()
                        entries.append((name, f, {}))
                        if name == "torch_fa2":  # sanity: same function as the reference backend
                            fn()
                            row["max_abs_diff_vs_fa2"] = (out.float() - ref.transpose(1, 2).float()).abs().max().item()
                    except RuntimeError as e:
                        row[f"{name}_tflops"] = float("nan")
                        print(f"  {name} failed: {str(e)[:100]}", flush=True)
                for column, tflops in best_of_rounds(entries, rounds, bench_ms, flops / 1e9).items():
                    row[f"{column}_tflops"] = tflops
                rows.append(row)
                print(f"d{hdim:3d} causal={causal!s:5} s={seqlen:5d}: ours {row['ours_tflops']:6.1f}  "
                      f"fa2 {row['torch_fa2_tflops']:6.1f}  cudnn {row['cudnn_tflops']:6.1f}  "
                      f"(diff {row.get('max_abs_diff_vs_fa2', float('nan')):.3g})", flush=True)
                if tiles:
                    for tile in TILES[hdim]:
                        # Each tiling with its kernel forced: the library's own choice differs by
                        # problem size (use_sm90_kernel), and a variable of the other kernel is ignored.
                        if tile.startswith("sm90:"):  # the Hopper kernel's other block width
                            os.environ["FLASHATTN_CUDA_SM90_BLOCK_N"] = tile[5:]
                            os.environ["FLASHATTN_CUDA_FWD_KERNEL"] = "sm90"
                        else:  # an mma.sync tiling
                            os.environ["FLASHATTN_CUDA_FWD_TILE"] = tile
                            os.environ["FLASHATTN_CUDA_FWD_KERNEL"] = "sm80"
                        try:
                            fn = ours_fn(q, k, v, out, causal)
                            t = flops / bench_ms(fn) / 1e9
                        except fa.FlashAttnError as e:
                            t = float("nan")
                            print(f"  tile {tile}: {e}", flush=True)
                        tile_rows.append({"hdim": hdim, "causal": causal, "seqlen": seqlen, "tile": tile,
                                          "tflops": t})
                        print(f"    tile {tile:10s} {t:6.1f}", flush=True)
                    os.environ.pop("FLASHATTN_CUDA_FWD_TILE", None)
                    os.environ.pop("FLASHATTN_CUDA_SM90_BLOCK_N", None)
                    os.environ.pop("FLASHATTN_CUDA_FWD_KERNEL", None)
                del q, k, v, out
                torch.cuda.empty_cache()
    return rows, tile_rows


def plot(rows, path):
    """Bars per shape: our two kernels (where measured), torch's FA2 and cuDNN backends."""
    plt = pyplot()
    if plt is None:
        return
    panels = [(h, c) for h in HDIMS for c in (False, True)]
    fig, axes = plt.subplots(3, 2, figsize=(14, 12), sharey=True)
    series = [("ours_tflops", "flashattn (on Hopper: the wgmma kernel)", "#1f77b4"),
              ("ours_sm80_tflops", "flashattn, mma.sync kernel forced", "#9ecae1"),
              ("torch_fa2_tflops", "PyTorch SDPA FA2", "#ff7f0e"),
              ("cudnn_tflops", "PyTorch SDPA cuDNN", "#2ca02c")]
    series = [s for s in series if any(r.get(s[0]) for r in rows)]
    width = 0.8 / len(series)
    for ax, (hdim, causal) in zip(axes.flat, panels):
        sel = [r for r in rows if r["hdim"] == hdim and r["causal"] == causal]
        xs = range(len(sel))
        for i, (key, label, color) in enumerate(series):
            vals = [float(r[key]) for r in sel]
            bars = ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], vals, width=width, label=label,
                          color=color)
            ax.bar_label(bars, fmt="%.0f", fontsize=5)
        ax.set_xticks(list(xs), [f"{r['seqlen'] // 1024}k" if r["seqlen"] >= 1024 else str(r["seqlen"]) for r in sel])
        ax.set_title(f"head dim {hdim}, {'causal' if causal else 'non-causal'}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
    axes.flat[0].legend(loc="lower right", fontsize=7)
    fig.suptitle("Forward, bf16, H200 (batch x seqlen = 16k, hidden 2048)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def replot(csv_path, png_path):
    """Redraw a chart from a results CSV (same numbers; e.g. after a change to the chart)."""
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["hdim"], r["seqlen"], r["causal"] = int(r["hdim"]), int(r["seqlen"]), r["causal"] == "True"
    plot(rows, png_path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--quick", action="store_true", help="seqlen 1k, 4k, 16k only")
    ap.add_argument("--tiles", action="store_true", help="also time each tiling of a tuning build")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:ENV=VALUE[,ENV=VALUE]",
                    help="also time ours with these variables set (column ours_LABEL_tflops); repeatable")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every implementation this many times, round-robin, and keep each one's best")
    ap.add_argument("--hdims", help="comma-separated head dims (default: 64,128,256)")
    ap.add_argument("--seqlens", help="comma-separated seqlens (default: the grid, or --quick's)")
    ap.add_argument("--replot", metavar="CSV", help="only redraw DIR/h200-forward.png from a results CSV")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        replot(args.replot, out / "h200-forward.png")
        return
    props = torch.cuda.get_device_properties(0)
    ceil = ceilings()
    ceil.update({"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                 "cudnn": torch.backends.cudnn.version()})
    print(ceil, flush=True)
    (out / "h200-ceilings.json").write_text(json.dumps(ceil, indent=1))

    variants = [parse_variant(v) for v in args.variant]
    seqlens = (1024, 4096, 16384) if args.quick else SEQLENS
    if args.seqlens:
        seqlens = tuple(int(s) for s in args.seqlens.split(","))
    hdims = tuple(int(d) for d in args.hdims.split(",")) if args.hdims else HDIMS
    rows, tile_rows = measure(seqlens, tiles=args.tiles, variants=variants, rounds=args.rounds, hdims=hdims)
    date, rev = datetime.date.today().isoformat(), commit()
    fields = ["date", "commit", "gpu", "hdim", "causal", "seqlen", "batch", "nheads", "ours_tflops",
              "torch_fa2_tflops", "cudnn_tflops", "ours_sm80_tflops",
              "max_abs_diff_vs_fa2"] + [f"ours_{label}_tflops" for label, _ in variants]
    with open(out / "h200-forward.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({"date": date, "commit": rev, "gpu": props.name, **{k: (round(v, 2) if isinstance(v, float)
                                                                              and k.endswith("tflops") else v)
                                                                          for k, v in r.items()}})
    if tile_rows:
        with open(out / "h200-forward-tiles.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["hdim", "causal", "seqlen", "tile", "tflops"])
            w.writeheader()
            w.writerows(tile_rows)
    try:
        plot(rows, out / "h200-forward.png")
    except Exception as e:  # the numbers matter more than the chart
        print("plot failed:", e)

    print("\nforward TFLOP/s, bf16 (ratio = ours / torch FA2, ours / cuDNN)")
    print(f"{'hdim':>4} {'causal':>6} {'seqlen':>6} | {'ours':>6} {'FA2':>6} {'cuDNN':>6} {'sm80':>6} | "
          f"{'/FA2':>5} {'/cuDNN':>6} | diff")
    for r in rows:
        print(f"{r['hdim']:4d} {str(r['causal']):>6} {r['seqlen']:6d} | {r['ours_tflops']:6.1f} "
              f"{r['torch_fa2_tflops']:6.1f} {r['cudnn_tflops']:6.1f} {r['ours_sm80_tflops']:6.1f} | "
              f"{r['ours_tflops'] / r['torch_fa2_tflops']:5.2f} {r['ours_tflops'] / r['cudnn_tflops']:6.2f} | "
              f"{r.get('max_abs_diff_vs_fa2', float('nan')):.2g}"
              + "".join(f" | {label} {r[f'ours_{label}_tflops']:6.1f}" for label, _ in variants))
    if tile_rows:
        print("\ntilings (TFLOP/s): hdim causal seqlen | " + " ".join(f"{t}" for t in ["..."]))
        keys = sorted({(t["hdim"], t["causal"], t["seqlen"]) for t in tile_rows})
        for key in keys:
            cells = [f"{t['tile']}={t['tflops']:.0f}" for t in tile_rows if (t["hdim"], t["causal"], t["seqlen"]) == key]
            print(f"  {key[0]:4d} {str(key[1]):>6} {key[2]:6d} | " + "  ".join(cells))


if __name__ == "__main__":
    main()
