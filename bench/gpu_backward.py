"""Backward benchmark of the CUDA backend against PyTorch SDPA's FlashAttention-2 and cuDNN backends.

    FLASHATTN_LIB=build-gpu/src/libflashattn.so python3 bench/gpu_backward.py --out DIR [--quick] [--tiles]
        [--rounds N] [--variant LABEL:ENV=VALUE[,ENV=VALUE]]...

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
FA2's gradients) and DIR/h200-backward.png. With --tiles (a FLASHATTN_CUDA_TUNING build), every
tiling of TILES is timed beside the default on the same tensors ($FLASHATTN_CUDA_BWD_TILE, read by
the library on every call) into DIR/h200-backward-tiles.csv: hdim, causal, seqlen, tile, tflops,
ratio to the default, and the largest gradient difference to the default tiling (a sanity check;
the dQ atomics make it nonzero even between two runs of one tiling). A tiling the build lacks runs
the default instead, and the library says so once on stderr. Each --variant (e.g.
`sm90:FLASHATTN_CUDA_BWD_KERNEL=sm90`, the Hopper kernel) is timed as its own column ours_LABEL with
those variables set while it runs (the library reads them on every call), plus ours_LABEL_diff: its
largest gradient difference to the default kernel's on the same tensors (a wrong kernel shows here).
"""
import argparse
import csv
import ctypes
import datetime
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
# Tilings of a FLASHATTN_CUDA_TUNING build (src/cuda/CMakeLists.txt, FLASHATTN_CUDA_BWD_TILE_VARIANTS),
# "MxNxW-S.K.Q-sD": block_m x block_n x warps, M extents (in warps) of the S/dP, dK/dV, dQ warp
# grids, dQ column slabs. The defaults (src/cuda/kernels/bwd_tile_config.h) are 128x128x8-4.4.4-s1
# (d64), 64x128x8-2.4.2-s1 (d128), 64x64x8-4.2.2-s2 (d256).
TILES = {64: ["64x128x8-2.4.4-s1", "128x64x8-4.2.4-s1"],
         128: ["64x128x8-2.4.2-s2", "64x128x8-2.2.2-s1", "128x64x8-4.2.2-s1", "64x64x8-4.2.2-s1"],
         256: ["64x64x8-4.2.2-s1", "64x64x8-4.2.2-s4", "64x64x8-2.2.2-s2"]}


def bench_ms(fn):
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def ours_fn(q, k, v, out, lse, dout, grads, causal, deterministic):
    """fa_backward with prebuilt parameters: what is timed is the library call alone."""
    params = fa.make_bwd_params(q, k, v, out, lse, dout, *grads, deterministic=deterministic, causal=causal,
                                backend=fa.FA_BACKEND_CUDA, stream=torch.cuda.current_stream().cuda_stream)
    backward = fa.lib().fa_backward
    ref = ctypes.byref(params)
    status = backward(ref)
    if status != 0:
        raise fa.FlashAttnError(status, fa.lib().fa_last_error().decode())
    return lambda: backward(ref)


def sdpa_backward_fn(q, k, v, dout, causal, backend):
    leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]  # (b, h, s, d) views
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    dout_t = dout.transpose(1, 2)

    def run():
        return torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
    return run


def measure(shapes, tiles=False, variants=(), rounds=1):
    rows, tile_rows = [], []
    os.environ.pop("FLASHATTN_CUDA_BWD_TILE", None)
    for hdim in HDIMS:
        nheads = HIDDEN // hdim
        for causal in (False, True):
            for seqlen in shapes:
                batch = TOKENS // seqlen
                flops = 2.5 * 4 * batch * nheads * seqlen * seqlen * hdim / (2 if causal else 1)
                q, k, v, dout = (torch.randn(batch, seqlen, nheads, hdim, device="cuda", dtype=torch.bfloat16)
                                 for _ in range(4))
                out, lse, _ = fa.forward(q, k, v, causal=causal)
                grads = [torch.empty_like(t) for t in (q, k, v)]
                row = {"hdim": hdim, "causal": causal, "seqlen": seqlen, "batch": batch, "nheads": nheads}
                ours = ours_fn(q, k, v, out, lse, dout, grads, causal, False)
                ours()
                ours_grads = [g.clone() for g in grads]
                # Each implementation keeps its best round (bench_common.best_of_rounds).
                entries = [("ours", ours, {}),
                           ("ours_deterministic", ours_fn(q, k, v, out, lse, dout, grads, causal, True), {})]
                for label, assignments in variants:
                    entries.append((f"ours_{label}", ours, assignments))
                    os.environ.update(assignments)
                    try:
                        ours()
                        row[f"ours_{label}_diff"] = max((g.float() - o.float()).abs().max().item()
                                                        for g, o in zip(grads, ours_grads))
                    finally:
                        for name in assignments:
                            os.environ.pop(name)
                for name, backend in (("torch_fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        f = sdpa_backward_fn(q, k, v, dout, causal, backend)
                        ref = f()
                        entries.append((name, f, {}))
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
                                for label, _ in variants),
                      flush=True)
                if tiles:
                    for tile in TILES[hdim]:
                        os.environ["FLASHATTN_CUDA_BWD_TILE"] = tile
                        try:
                            fn = ours_fn(q, k, v, out, lse, dout, grads, causal, False)
                            t = flops / bench_ms(fn) / 1e9
                            diff = max((g.float() - o.float()).abs().max().item() for g, o in zip(grads, ours_grads))
                        except fa.FlashAttnError as e:
                            t, diff = float("nan"), float("nan")
                            print(f"  tile {tile}: {e}", flush=True)
                        finally:
                            os.environ.pop("FLASHATTN_CUDA_BWD_TILE", None)
                        tile_rows.append({"hdim": hdim, "causal": causal, "seqlen": seqlen, "tile": tile,
                                          "tflops": t, "ratio_to_default": t / row["ours_tflops"],
                                          "max_abs_diff_vs_default": diff})
                        print(f"    tile {tile:20s} {t:6.1f}  ({t / row['ours_tflops']:4.2f}x default, "
                              f"diff {diff:.3g})", flush=True)
                del q, k, v, dout, out, lse, grads, ours_grads
                torch.cuda.empty_cache()
    return rows, tile_rows


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return
    panels = [(h, c) for h in HDIMS for c in (False, True)]
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
    ap.add_argument("--tiles", action="store_true", help="also time each tiling of TILES (tuning build)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every implementation this many times, round-robin, and keep each one's best")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:ENV=VALUE[,ENV=VALUE]",
                    help="also time ours with these environment variables set (column ours_LABEL)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)

    variants = [parse_variant(v) for v in args.variant]
    rows, tile_rows = measure((1024, 4096, 16384) if args.quick else SEQLENS, tiles=args.tiles, variants=variants,
                              rounds=args.rounds)
    date, rev = datetime.date.today().isoformat(), commit()
    fields = ["date", "commit", "gpu", "hdim", "causal", "seqlen", "batch", "nheads", "ours_tflops",
              "torch_fa2_tflops", "cudnn_tflops", "ours_deterministic_tflops", "max_abs_diff_vs_fa2"]
    for label, _ in variants:
        fields += [f"ours_{label}_tflops", f"ours_{label}_diff"]
    with open(out / "h200-backward.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({"date": date, "commit": rev, "gpu": props.name,
                        **{k: (round(v, 2) if isinstance(v, float) and k.endswith("tflops") else v)
                           for k, v in r.items()}})
    if tile_rows:
        with open(out / "h200-backward-tiles.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["date", "commit", "gpu", "hdim", "causal", "seqlen", "tile", "tflops",
                                              "ratio_to_default", "max_abs_diff_vs_default"])
            w.writeheader()
            for r in tile_rows:
                w.writerow({"date": date, "commit": rev, "gpu": props.name,
                            **{k: (round(v, 3) if isinstance(v, float) and k != "max_abs_diff_vs_default" else v)
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
                        f" FA2, diff {r[f'ours_{label}_diff']:.2g})" for label, _ in variants))


if __name__ == "__main__":
    main()
