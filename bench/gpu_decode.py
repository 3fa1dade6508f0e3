"""Decode benchmark of the inference path (issue 6) against PyTorch SDPA's FlashAttention-2 and cuDNN.

    FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_decode.py --out DIR [--quick]
        [--variants] [--variant NAME:KEY=VALUE[,KEY=VALUE]]... [--lib NAME:PATH]...

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

One query token per sequence, 32 query heads / 8 KV heads, d = 128, bf16, cache lengths L in
{1k, 8k, 32k, 128k} x batch {1, 16, 64, 256}, every pair whose cache (K and V) fits in the card's
memory. The figure of merit is KV bytes read per second: batch * L * 8 * 128 * 2 bytes * 2 (K and V)
divided by the time of one call. Ours runs fa_kvcache_forward (cache_seqlens = L, no new tokens,
num_splits = 0: the library's split-KV heuristic) on a contiguous cache and on a paged pool of page 16
(shuffled blocks); torch SDPA (enable_gqa=True) reads the contiguous cache through (b, h, s, d) views.

Variants, on the same caches: --variants times both inference kernels forced (overrides
inference_kernel=tile64, the forward's 64-row tile with a ring of K/V stages, and =split_keys, the
decode kernel) beside the planner's choice; --variant NAME:OVERRIDES times ours with any overrides
(fa_set_overrides, FLASHATTN_OVERRIDES's syntax); --lib NAME:PATH times ours from another build of
the library (a build of another commit: a before/after comparison in one process); --head-major also
times ours and cuDNN on caches whose memory is (b, h, s, d) (each KV head's rows back to back), the
same views; --paged-in-order also times ours on pools whose pages lie in sequence order (the
benchmark's pools are shuffled).

Timing. Each timed call follows an idle kernel (torch.cuda._sleep, ~200 us, during which the host
enqueues the call, so no implementation's host overhead is measured) and is bracketed by CUDA
events; the median of 40 calls. Each timed function rotates over several copies of the cache (as
many as make 256 MB, 4x the L2, and fit), so neither the L2 nor a warm TLB is measured: the
issue's method. Until session 8 each call followed triton's do_bench flush (zeroing 256 MB), which
leaves ~50 MB of dirty lines in the L2 that the timed call's reads must first write back: ~12 us
added to every call (a torch.profiler timeline, docs/perf-log.md), a cost no decode step in a model pays. That figure
is still reported for ours and cuDNN (columns ours_flushed_tbps, cudnn_flushed_tbps). The copy
bandwidth (y.copy_(x), 2 GB) is the ceiling.

Writes DIR/<card>-decode.csv (date, commit, gpu, cache_len, batch, paged, page_size, ours_tbps,
torch_fa2_tbps, cudnn_tbps, then ours_flushed_tbps, cudnn_flushed_tbps and one ours_<variant>_tbps
column per variant; the torch columns are their contiguous-cache figures on both rows of a shape)
and DIR/<card>-decode.png, and prints a table with the ratios the issue asks for. `--replot CSV`
only redraws the chart from a results file (without the copy-bandwidth line, which it does not hold).
"""
import argparse
import contextlib
import csv
import ctypes
import datetime
import itertools
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import abi  # noqa: E402
from bench_common import commit, parse_variant  # noqa: E402
from bench_common import SCRATCH, card_file, parse_lib, pyplot, replot_file  # noqa: E402

HEADS, HEADS_K, HDIM, PAGE = 32, 8, 128, 16
CACHE_LENS = (1024, 8192, 32768, 131072)
BATCHES = (1, 16, 64, 256)
ROTATE_BYTES = 256 << 20  # rotate over copies until this much cache is touched: 4x the 60 MB L2


IDLE_CYCLES = 400_000  # ~200 us at the H200's ~2 GHz: more than any timed call's host work


def bench_ms(fn, reps=40, warmup_s=0.2):
    """Median ms of fn, each call after an idle kernel (the module docstring says why). Warm-up:
    calls for warmup_s seconds (at least 5): with 5 calls, the first function timed on a freshly
    filled 8.6 GB cache (128k x 16) measured 10% below itself timed later (session 8 runs 3-4)."""
    start = time.perf_counter()
    for i in itertools.count():
        fn()
        if i >= 4 and time.perf_counter() - start >= warmup_s:
            break
        if i % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        torch.cuda._sleep(IDLE_CYCLES)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def flushed_bench_ms(fn):
    """triton's do_bench: each call after zeroing 256 MB (the decode benchmark's method until session
    8; still the copy ceiling's)."""
    return do_bench(fn, warmup=10, rep=60, return_mode="median")


def copy_tbps():
    x = torch.empty(2 * 1024 ** 3 // 4, device="cuda")
    y = torch.empty_like(x)
    t = 2 * x.numel() * 4 / flushed_bench_ms(lambda: y.copy_(x)) / 1e9
    del x, y
    torch.cuda.empty_cache()
    return t


def rotating(fns):
    """One callable that runs fns[0], fns[1], ... in turn."""
    state = {"i": 0}

    def run():
        fns[state["i"] % len(fns)]()
        state["i"] += 1
    return run


LIBRARIES = {}  # --lib: path -> the loaded library


def library(path):
    """The library at path (None: the one under test, $FLASHATTN_LIBRARY)."""
    if path is None:
        return abi.lib
    if path not in LIBRARIES:
        LIBRARIES[path] = abi.Library(path)
    return LIBRARIES[path]


_WORKSPACE = []


def shared_workspace(size=64 << 20):
    if not _WORKSPACE:
        _WORKSPACE.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    return _WORKSPACE[0]


def ours_fn(q, k_cache, v_cache, lengths, block_table=None, num_splits=0, lib_path=None):
    # With a workspace from torch, as the Python package calls it (flashattn/_ops.py): the library
    # allocates nothing per call (stream-ordered allocation cost ~1.2 us a call, session 10). One
    # buffer for every call (they run in stream order), larger than any variant's split-KV partials.
    kp, out, lse = abi.make_kvcache_params(q, k_cache, v_cache, lengths, block_table=block_table,
                                           num_splits=num_splits, backend=abi.BACKEND_CUDA,
                                           stream=torch.cuda.current_stream().cuda_stream, workspace=shared_workspace())
    call, ref = library(lib_path).kvcache_forward, ctypes.byref(kp)
    library(lib_path).check(call(ref))  # once for errors
    keep = (kp, out, lse)  # the params point into these

    def run():
        return call(ref)  # the status
    run.keep = keep
    run.out = out
    return run


HEAD_MAJOR = False  # --head-major
PAGED_IN_ORDER = False  # --paged-in-order


def time_variants(make_fns, kv_bytes, variants):
    """{name: TB/s} of the rotating fns under each (name, overrides, library path) of variants (name
    None: the library under test as the planner chooses); make_fns(library path or None) gives the fns
    of a library. The overrides are set around the whole timed loop, not per call; a variant the
    library refuses (a kernel forced onto a problem it cannot run) is nan."""
    rates, fns = {}, {}
    for name, spec, lib_path in variants:
        if lib_path not in fns:
            fns[lib_path] = make_fns(lib_path)
        context = (lambda: abi.overrides(spec)) if spec else None
        try:
            if spec:
                with context():
                    abi.lib.check(fns[lib_path][0]())
        except abi.FlashAttnError as e:
            rates[name] = float("nan")
            print(f"  {name}: {e}", flush=True)
            continue
        with (context or contextlib.nullcontext)():  # one entry at a time: no order to balance
            rates[name] = kv_bytes / 1e9 / bench_ms(rotating(fns[lib_path]))
    return rates


def sdpa_fn(q, k_cache, v_cache, backend):
    qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)  # views of the same memory

    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    return run


def measure_shape(cache_len, batch, free_bytes, variants):
    kv_bytes = batch * cache_len * HEADS_K * HDIM * 2 * 2
    copies = max(1, min(math.ceil(ROTATE_BYTES / kv_bytes), int(0.7 * free_bytes // kv_bytes)))
    row = {"cache_len": cache_len, "batch": batch, "kv_bytes": kv_bytes, "copies": copies}
    q = torch.randn(batch, 1, HEADS, HDIM, device="cuda", dtype=torch.bfloat16)
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")

    # Contiguous caches: ours and torch's two backends on the same memory.
    caches = [(torch.randn(batch, cache_len, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16),
               torch.randn(batch, cache_len, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16))
              for _ in range(copies)]
    ours = [ours_fn(q, k, v, lengths) for k, v in caches]
    row["variants"] = time_variants(
        lambda lib_path: ours if lib_path is None else [ours_fn(q, k, v, lengths, lib_path=lib_path) for k, v in caches],
        kv_bytes, variants)
    row["ours_tbps"] = row["variants"][None]
    row["ours_flushed_tbps"] = kv_bytes / flushed_bench_ms(rotating(ours)) / 1e9
    for name, backend in (("torch_fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            fns = [sdpa_fn(q, k, v, backend) for k, v in caches]
            ref = fns[0]()
            row[f"{name}_tbps"] = kv_bytes / bench_ms(rotating(fns)) / 1e9
            if name == "cudnn":
                row["cudnn_flushed_tbps"] = kv_bytes / flushed_bench_ms(rotating(fns)) / 1e9
            if name == "torch_fa2" or "max_abs_diff" not in row:  # sanity: the same function
                ours[0]()
                row["max_abs_diff"] = (ours[0].out.float() - ref.transpose(1, 2).float()).abs().max().item()
        except RuntimeError as e:
            row[f"{name}_tbps"] = float("nan")
            row.setdefault("cudnn_flushed_tbps", float("nan"))
            print(f"  {name} failed: {str(e)[:120]}", flush=True)
    del ours, caches
    torch.cuda.empty_cache()

    if HEAD_MAJOR:
        # --head-major: the same (b, s, h, d) views over head-major memory (b, h, s, d): each KV
        # head's rows back to back instead of 2 KB apart (8 heads x 256 bytes), ours and cuDNN (for
        # which it is the contiguous layout). How much of the decode rate is the cache layout's
        # DRAM locality rather than the kernel.
        hm = [(torch.randn(batch, HEADS_K, cache_len, HDIM, device="cuda", dtype=torch.bfloat16).transpose(1, 2),
               torch.randn(batch, HEADS_K, cache_len, HDIM, device="cuda", dtype=torch.bfloat16).transpose(1, 2))
              for _ in range(copies)]
        ours_hm = [ours_fn(q, k, v, lengths) for k, v in hm]
        row["ours_hm_tbps"] = kv_bytes / bench_ms(rotating(ours_hm)) / 1e9
        try:
            fns = [sdpa_fn(q, k, v, SDPBackend.CUDNN_ATTENTION) for k, v in hm]
            row["cudnn_hm_tbps"] = kv_bytes / bench_ms(rotating(fns)) / 1e9
        except RuntimeError as e:
            row["cudnn_hm_tbps"] = float("nan")
            print(f"  cudnn (head-major) failed: {str(e)[:120]}", flush=True)
        del ours_hm, hm
        torch.cuda.empty_cache()

    # The same rows in a pool of 16-row pages, blocks shuffled.
    blocks_per_seq = cache_len // PAGE
    pools = []
    for _ in range(copies):
        num_blocks = batch * blocks_per_seq
        k_pool = torch.randn(num_blocks, PAGE, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16)
        v_pool = torch.randn_like(k_pool)
        table = torch.randperm(num_blocks, device="cuda").to(torch.int32).view(batch, blocks_per_seq)
        pools.append((k_pool, v_pool, table))
    paged = [ours_fn(q, k, v, lengths, block_table=t) for k, v, t in pools]
    row["paged_variants"] = time_variants(
        lambda lib_path: paged if lib_path is None else [ours_fn(q, k, v, lengths, block_table=t, lib_path=lib_path)
                                                         for k, v, t in pools],
        kv_bytes, variants)
    row["ours_paged_tbps"] = row["paged_variants"][None]
    del paged, pools
    torch.cuda.empty_cache()

    if PAGED_IN_ORDER:
        # --paged-in-order: the same pools with each sequence's pages in order (its rows as in a
        # contiguous cache): how much of paged/contiguous is the shuffled placement (address
        # translation, DRAM locality) rather than the page-table reads.
        in_order = torch.arange(batch * blocks_per_seq, device="cuda", dtype=torch.int32).view(batch, blocks_per_seq)
        fns = []
        for _ in range(copies):
            k_pool = torch.randn(batch * blocks_per_seq, PAGE, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16)
            fns.append(ours_fn(q, k_pool, torch.randn_like(k_pool), lengths, block_table=in_order))
        row["ours_paged_in_order_tbps"] = kv_bytes / bench_ms(rotating(fns)) / 1e9
        del fns
        torch.cuda.empty_cache()
    return row


def plot(rows, copy, path):
    plt = pyplot()
    if plt is None:
        return
    lens = sorted({r["cache_len"] for r in rows})
    fig, axes = plt.subplots(1, len(lens), figsize=(4.2 * len(lens), 4.5), sharey=True, squeeze=False)
    series = (("ours_tbps", "flashattn", "#1f77b4"), ("ours_paged_tbps", "flashattn paged 16", "#9ecae1"),
              ("torch_fa2_tbps", "SDPA FA2", "#ff7f0e"), ("cudnn_tbps", "SDPA cuDNN", "#2ca02c"))
    for ax, cache_len in zip(axes[0], lens):
        sel = [r for r in rows if r["cache_len"] == cache_len]
        xs = range(len(sel))
        for i, (key, label, color) in enumerate(series):
            bars = ax.bar([x + (i - 1.5) * 0.2 for x in xs], [r.get(key, float("nan")) for r in sel], width=0.2,
                          label=label, color=color)
            ax.bar_label(bars, fmt="%.1f", fontsize=6)
        if copy is not None:  # (a results file does not record it)
            ax.axhline(copy, color="gray", linestyle="--", linewidth=1, label="copy bandwidth")
        ax.set_xticks(list(xs), [str(r["batch"]) for r in sel])
        ax.set_xlabel("batch")
        ax.set_title(f"cache {cache_len // 1024}k")
    axes[0][0].set_ylabel("KV bytes read per second (TB/s)")
    axes[0][0].legend(loc="upper left", fontsize=7)
    fig.suptitle(f"Decode, bf16, {HEADS} q heads / {HEADS_K} KV heads, d {HDIM}, H200")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def read_rows(path):
    """A results CSV's rows as plot() takes them: a contiguous and a paged row per (cache_len, batch)."""
    rows = {}
    with open(path) as f:
        records = list(csv.DictReader(f))
    for r in records:
        row = rows.setdefault((int(r["cache_len"]), int(r["batch"])), {"cache_len": int(r["cache_len"]),
                                                                        "batch": int(r["batch"]),
                                                                        "gpu": r.get("gpu", "")})
        if r["paged"] == "1":
            row["ours_paged_tbps"] = float(r["ours_tbps"])
        else:
            row.update(ours_tbps=float(r["ours_tbps"]), torch_fa2_tbps=float(r["torch_fa2_tbps"]),
                       cudnn_tbps=float(r["cudnn_tbps"]))
    return list(rows.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--replot", metavar="CSV", help="only redraw DIR/<card>-decode.png from a results CSV")
    ap.add_argument("--quick", action="store_true", help="batch 1 and 64 only")
    ap.add_argument("--variants", action="store_true",
                    help="also time each inference kernel forced (overrides inference_kernel=tile64, =split_keys)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                    help="also time ours with these overrides set, in column ours_NAME_tbps")
    ap.add_argument("--lib", action="append", default=[], metavar="NAME:PATH",
                    help="also time ours from the library at PATH (another build), in column ours_NAME_tbps")
    ap.add_argument("--head-major", action="store_true",
                    help="also time ours and cuDNN on head-major (b, h, s, d) caches (columns *_hm_tbps)")
    ap.add_argument("--paged-in-order", action="store_true",
                    help="also time ours on pools whose pages lie in sequence order (column ours_paged_in_order_tbps)")
    args = ap.parse_args()
    if args.replot:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        replot_rows = read_rows(args.replot)
        plot(replot_rows, None, replot_file(out, replot_rows, "decode.png"))
        return
    global HEAD_MAJOR, PAGED_IN_ORDER
    HEAD_MAJOR = args.head_major
    PAGED_IN_ORDER = args.paged_in_order
    # (column name, overrides, library path or None = the library under test): the planner's choice,
    # each inference kernel forced (--variants), --variant, --lib.
    kernels = ["tile64", "split_keys"] if args.variants else []
    variants = [(None, "", None)] + [(v, f"inference_kernel={v}", None) for v in kernels]
    variants += [(*parse_variant(v), None) for v in args.variant]
    variants += [(name, "", path) for name, path in map(parse_lib, args.lib)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    copy = copy_tbps()
    print(f"{props.name}: copy bandwidth {copy:.2f} TB/s, L2 {props.L2_cache_size >> 20} MB", flush=True)

    rows = []
    for cache_len in CACHE_LENS:
        for batch in ((1, 64) if args.quick else BATCHES):
            kv_bytes = batch * cache_len * HEADS_K * HDIM * 2 * 2
            free, _ = torch.cuda.mem_get_info()
            if kv_bytes > 0.7 * free:
                print(f"L={cache_len} batch={batch}: {kv_bytes / 1e9:.0f} GB of cache does not fit, skipped", flush=True)
                continue
            row = measure_shape(cache_len, batch, free, variants)
            rows.append(row)
            print(f"L={cache_len:6d} b={batch:3d} ({row['copies']} copies): ours {row['ours_tbps']:5.2f} "
                  f"paged {row['ours_paged_tbps']:5.2f} fa2 {row['torch_fa2_tbps']:5.2f} "
                  f"cudnn {row['cudnn_tbps']:5.2f} TB/s (diff {row.get('max_abs_diff', float('nan')):.2g}); after a "
                  f"flush: ours {row['ours_flushed_tbps']:5.2f} cudnn {row['cudnn_flushed_tbps']:5.2f}; "
                  + " ".join(f"{n} {row['variants'][n]:5.2f} paged {row['paged_variants'][n]:5.2f}"
                             for n, _, _ in variants if n), flush=True)

    date, rev = datetime.date.today().isoformat(), commit()
    names = [name for name, _, _ in variants if name]
    fields = ["date", "commit", "gpu", "cache_len", "batch", "paged", "page_size", "ours_tbps", "torch_fa2_tbps",
              "cudnn_tbps", "ours_flushed_tbps", "cudnn_flushed_tbps"] + [f"ours_{n}_tbps" for n in names]
    hm_fields = ["ours_hm_tbps", "cudnn_hm_tbps"] if HEAD_MAJOR else []
    hm_fields += ["ours_paged_in_order_tbps"] if PAGED_IN_ORDER else []  # (both rows, as the torch columns)
    fields += hm_fields
    with open(card_file(out, props.name, "decode.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            for paged in (0, 1):
                w.writerow({"date": date, "commit": rev, "gpu": props.name, "cache_len": r["cache_len"],
                            "batch": r["batch"], "paged": paged, "page_size": PAGE if paged else 0,
                            "ours_tbps": round(r["ours_paged_tbps" if paged else "ours_tbps"], 3),
                            "torch_fa2_tbps": round(r["torch_fa2_tbps"], 3), "cudnn_tbps": round(r["cudnn_tbps"], 3),
                            # flushed: contiguous only (the paged row repeats them, as the torch columns)
                            "ours_flushed_tbps": round(r["ours_flushed_tbps"], 3),
                            "cudnn_flushed_tbps": round(r["cudnn_flushed_tbps"], 3),
                            **{f"ours_{v}_tbps": round(r["paged_variants" if paged else "variants"][v], 3)
                               for v in names},
                            **{k: round(r[k], 3) for k in hm_fields}})
    try:
        plot(rows, copy, card_file(out, props.name, "decode.png"))
    except Exception as e:  # the numbers matter more than the chart
        print("plot failed:", e)

    print(f"\ndecode TB/s (KV bytes read per second), bf16, {HEADS}/{HEADS_K} heads, d {HDIM}; copy {copy:.2f} TB/s")
    print(f"{'L':>6} {'batch':>5} | {'ours':>5} {'paged':>5} {'FA2':>5} {'cuDNN':>5} | {'/FA2':>5} {'/cuDNN':>6} "
          f"{'%copy':>5} {'paged/contig':>12} | after a flush: {'ours':>5} {'cuDNN':>5} {'/cuDNN':>6}")
    for r in rows:
        o = r["ours_tbps"]
        print(f"{r['cache_len']:6d} {r['batch']:5d} | {o:5.2f} {r['ours_paged_tbps']:5.2f} {r['torch_fa2_tbps']:5.2f} "
              f"{r['cudnn_tbps']:5.2f} | {o / r['torch_fa2_tbps']:5.2f} {o / r['cudnn_tbps']:6.2f} "
              f"{100 * o / copy:5.0f} {r['ours_paged_tbps'] / o:12.2f} | {'':14} {r['ours_flushed_tbps']:5.2f} "
              f"{r['cudnn_flushed_tbps']:5.2f} {r['ours_flushed_tbps'] / r['cudnn_flushed_tbps']:6.2f}")

    if HEAD_MAJOR:
        print("\nhead-major (b, h, s, d) caches against the (b, s, h, d) ones, TB/s")
        print(f"{'L':>6} {'batch':>5} | {'ours':>5} {'ours hm':>7} {'cuDNN':>5} {'cuDNN hm':>8} | {'hm ours/cuDNN':>13}")
        for r in rows:
            print(f"{r['cache_len']:6d} {r['batch']:5d} | {r['ours_tbps']:5.2f} {r['ours_hm_tbps']:7.2f} "
                  f"{r['cudnn_tbps']:5.2f} {r['cudnn_hm_tbps']:8.2f} | {r['ours_hm_tbps'] / r['cudnn_hm_tbps']:13.2f}")

    if PAGED_IN_ORDER:
        print("\npaged (page 16): shuffled pages (the benchmark's) against pages in sequence order, TB/s")
        print(f"{'L':>6} {'batch':>5} | {'contig':>6} {'shuffled':>8} {'in order':>8} | {'shuffled/contig':>15} {'in order/contig':>15}")
        for r in rows:
            o, sh, io = r["ours_tbps"], r["ours_paged_tbps"], r["ours_paged_in_order_tbps"]
            print(f"{r['cache_len']:6d} {r['batch']:5d} | {o:6.2f} {sh:8.2f} {io:8.2f} | {sh / o:15.2f} {io / o:15.2f}")

    print("\nours as built vs its variants, TB/s (contiguous | paged 16)")
    print(f"{'L':>6} {'batch':>5} | {'built':>5} " + " ".join(f"{n:>15}" for n in names) + " | "
          f"{'built':>5} " + " ".join(f"{n:>15}" for n in names))
    for r in rows:
        cv, pv = r["variants"], r["paged_variants"]
        print(f"{r['cache_len']:6d} {r['batch']:5d} | {cv[None]:5.2f} " + " ".join(f"{cv[n]:15.2f}" for n in names)
              + f" | {pv[None]:5.2f} " + " ".join(f"{pv[n]:15.2f}" for n in names))

    print("\nagainst the issue's goals: >= 1.0x cuDNN, >= 1.5x at batch 1, >= 85% of copy above the L2, "
          "paged within 10%")
    l2 = props.L2_cache_size
    for r in rows:
        o = r["ours_tbps"]
        misses = []
        if o < r["cudnn_tbps"]:
            misses.append(f"{o / r['cudnn_tbps']:.2f}x cuDNN")
        if r["batch"] == 1 and o < 1.5 * r["cudnn_tbps"]:
            misses.append("batch 1 < 1.5x cuDNN")
        if r["kv_bytes"] > l2 and o < 0.85 * copy:
            misses.append(f"{100 * o / copy:.0f}% of copy")
        if r["ours_paged_tbps"] < 0.9 * o:
            misses.append(f"paged {r['ours_paged_tbps'] / o:.2f}x")
        print(f"{r['cache_len']:6d} {r['batch']:5d} | " + ("met" if not misses else "missed: " + ", ".join(misses)))

if __name__ == "__main__":
    main()
