"""Benchmark of issue 27's two features on the CUDA backend: a value head dim unlike the query's
(d_qk 192, d_v 128) against cuDNN, and learnable sinks against the same attention without them.

    PYTHONPATH=python FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/gpu_features.py --out DIR
        [--quick] [--kinds value_dim,sink] [--seqlens S,...] [--rounds N] [--lib NAME:PATH]...
        [--alternate CALLS]
    python3 scripts/gpu.py bench features -- --quick        (the same on the device machine, logged)

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

bf16, 16 query heads and 16 K/V heads, batch * seqlen = 16k tokens, seqlen 4k/8k/16k, causal and
not (causal: seqlen_q == seqlen_k, so our bottom-right mask and SDPA's top-left one are the same),
forward and backward, two kinds of rows (--kinds):
  value_dim: q and k with d_qk = 192, v with d_v = 128 (DeepSeek's shape). Ours (flashattn.flash_attn_func)
      against cuDNN (torch SDPA, sdpa_kernel(SDPBackend.CUDNN_ATTENTION), on (b, h, s, d) transposed
      views of the same tensors). Torch's FLASH backend takes no d_v unlike d_qk: not timed. Where
      cuDNN refuses the shape (it raises), its cell is empty and column baseline_note says why (the
      reason torch warned, else the error).
  sink: d 128; ours with learnable_sink (fp32, (heads,); requires_grad in the backward, so dsink is
      computed) against ours without it, on the same q, k, v: ratio = what the sink costs.
--quick times fewer iterations per call (meant to end within about a minute on an H200), not fewer
shapes; --seqlens and --kinds do choose the shapes, --directions the rows of each (forward, backward).
The library must have head dims 128 and 192 built (scripts/gpu.py build's default has both); a missing
one fails at the first call of that kind.

FLOPs, FlashAttention's count with d_qk and d_v apart: forward 2 * b * h * s^2 * (d_qk + d_v) (S = Q K^T
at d_qk, O = P V at d_v), halved when causal, as bench/gpu_forward.py does; backward 2.5 x the
forward. (The backward's five products are exactly 2 * b * h * s^2 * (3 d_qk + 2 d_v): 4% more than
2.5 x at 192/128; the convention is kept so the figures compare with the other benchmarks'. Both
sides of a ratio use the same count, so the ratios do not depend on it.) The sink adds no FLOPs.

What is timed. Ours as a Python caller runs it: flash_attn_func (argument checks and output
allocation included: host time hidden behind milliseconds of queued kernels). Forward: the call under
torch.no_grad(). Backward: torch.autograd.grad through the forward's graph, kept (retain_graph), so
each timed call is exactly one backward, for ours and cuDNN alike (as bench/gpu_backward.py times
torch's). Every implementation of a row is timed in turns, each after every one equally often,
after untimed lead-in turns, and the mean of its turns kept (bench_common.timed_rates: at the power
cap a turn runs at the clock the turn before it left), in one process on the same tensors.
value_dim rows: a turn is one Triton do_bench (CUDA events, median, L2 flushed between runs),
--rounds turns each (rounded up to whole orders); with --alternate CALLS, CALLS calls between CUDA
events (warm L2), 20 turns each by default: the timing for a comparison of builds (--lib), whose A/A
spread by do_bench turns reached 4% a row. sink rows, a difference of a few percent at most:
a turn is three calls between CUDA events, 30 turns each (10 with --quick). --lib NAME:PATH times
the package on another build of the library (a before/after comparison, interleaved), column
ours_NAME_tflops.

Correctness, checked before a direction is timed: each implementation's out (forward), and dq, dk, dv
(and dsink) from the very graph that is then timed (backward), against float32 attention through
autograd, computed once per shape on two heads
(the first and the last, the whole batch): relative error ||x - ref|| / ||ref|| (dsink: over the
norm of its per-row terms, since it is a sum with cancellations). The sinks are drawn around
log(seqlen) so that they take a visible share of every row: a sink dropped or counted twice moves
out and dsink far past the tolerance (5%, several times what bf16 rounding gives). Ours over the
tolerance (with or without a sink, or a --lib build) stops the run with an error: a wrong kernel is
never timed. cuDNN over it is still timed, and baseline_note says so.

Writes DIR/<card>-features.csv (date, commit, gpu, kind, direction, causal, seqlen, batch, nheads,
nheads_k, d_qk, d_v, ours_tflops, baseline (cudnn | nosink), baseline_tflops, ratio = ours /
baseline, check_rel_err (ours against the reference), baseline_rel_err, baseline_note, then one
ours_NAME_tflops per --lib) and DIR/<card>-features.png (grouped bars per seqlen: a row of panels per
(kind, direction), non-causal left, causal right), and prints a table.
`--replot CSV` only redraws the chart from a results file.
"""
import argparse
import contextlib
import csv
import datetime
import math
import os
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

REPO = Path(__file__).resolve().parents[1]
# As the other benchmarks find it (tests/gpu/abi.py): $FLASHATTN_LIBRARY, else the build-gpu library;
# the package from python/ of this tree, not an installed one.
if not os.environ.get("FLASHATTN_LIBRARY"):
    os.environ["FLASHATTN_LIBRARY"] = str(REPO / "build-gpu" / "src" / "libflashattn.so")
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))
from bench_common import (ALTERNATE_HELP, EXTRA_COLORS, ROUNDS_HELP, SCRATCH, TOKENS,  # noqa: E402
                          card_file, commit, parse_lib, parse_subset, pyplot, replot_file, timed_rates)

HEADS = 16
SEQLENS = (4096, 8192, 16384)
DIRECTIONS = ("forward", "backward")
SINK_ROUNDS = {False: 30, True: 10}  # the sink rows' turns each (bench_common.timed_rates), by --quick
# kind: (d_qk, d_v, baseline column name, baseline label)
KINDS = {"value_dim": (192, 128, "cudnn", "PyTorch SDPA cuDNN"),
         "sink": (128, 128, "nosink", "flashattn without sink")}
KIND_TITLES = {"value_dim": "d_qk 192 / d_v 128", "sink": "d128, learnable sink"}
CHECK_HEADS = (0, HEADS - 1)
TOLERANCE = 0.05


def bench_ms(direction, quick):
    """do_bench with the other benchmarks' iteration budgets (ms of warm-up and of repetitions);
    --quick a fraction of them."""
    warmup, rep = {"forward": (25, 100), "backward": (10, 50)}[direction]
    if quick:
        warmup, rep = 5, 20
    return lambda fn: do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def problems(kinds, seqlens):
    """The shapes in the order measured and charted: per kind, non-causal then causal, each seqlen."""
    return [{"kind": kind, "causal": causal, "seqlen": s, "batch": TOKENS // s, "nheads": HEADS, "nheads_k": HEADS,
             "d_qk": KINDS[kind][0], "d_v": KINDS[kind][1]}
            for kind in kinds for causal in (False, True) for s in seqlens]


def work(p, direction):
    """GFLOP of one call, so that work / ms is TFLOP/s."""
    flops = 2 * p["batch"] * p["nheads"] * p["seqlen"] ** 2 * (p["d_qk"] + p["d_v"]) / (2 if p["causal"] else 1)
    return flops * (2.5 if direction == "backward" else 1) / 1e9


@contextlib.contextmanager
def on_library(library):
    """The package's functions on another build (--lib) inside the block: they call the C ABI through
    the module global flashattn._ops.lib. None: the library under test."""
    from flashattn import _ops
    saved = _ops.lib
    _ops.lib = library or saved
    try:
        yield
    finally:
        _ops.lib = saved


# ------------------------------------------------------------------------------------------------
# The implementations. Each builder runs its function once (a refusal raises there, not in the
# timing) and returns (run, what that run gave) in our (b, s, h, d) layout: {"out"} for the forward,
# {"dq", "dk", "dv"(, "dsink")} for the backward.

def ours_forward(q, k, v, causal, sink):
    from flashattn import flash_attn_func

    def run():
        with torch.no_grad():
            return flash_attn_func(q, k, v, causal=causal, learnable_sink=sink)
    return run, {"out": run()}


def ours_backward(q, k, v, dout, causal, sink, deterministic=False):
    from flashattn import flash_attn_func
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    if sink is not None:
        leaves.append(sink.detach().requires_grad_(True))
    out = flash_attn_func(*leaves[:3], causal=causal, learnable_sink=leaves[3] if sink is not None else None,
                          deterministic=deterministic)

    def run():
        return torch.autograd.grad(out, leaves, dout, retain_graph=True)
    return run, dict(zip(("dq", "dk", "dv", "dsink"), run()))


# (K/V with fewer heads than Q go with their own heads, through enable_gqa.)
def cudnn_forward(q, k, v, causal):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    gqa = k.shape[2] != q.shape[2]

    def run():
        with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)
    return run, {"out": run().transpose(1, 2)}


def cudnn_backward(q, k, v, dout, causal):
    leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=k.shape[2] != q.shape[2])
    dout_t = dout.transpose(1, 2)

    def run():
        return torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
    return run, {key: g.transpose(1, 2) for key, g in zip(("dq", "dk", "dv"), run())}


def refused(build):
    """A baseline's builder run: (its value, "") or, where it raises, (None, why). Before it raises "No
    available kernel", torch warns why each backend cannot take the problem ("CuDNN attention kernel
    not used because:", then the reasons): the reasons after that line go first in the note."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return build(), ""
        except Exception as e:  # any refusal (RuntimeError, a cuDNN frontend error): a note, not a crash
            said = [" ".join(str(w.message).split(" (Triggered internally")[0].split()) for w in caught]
            start = next((i + 1 for i, m in enumerate(said) if "cudnn attention kernel not used" in m.lower()), 0)
            why = "; ".join(said[start:] + [f"{type(e).__name__}: {' '.join(str(e).split())}"])
            return None, "cudnn refused: " + why[:300]


# ------------------------------------------------------------------------------------------------
# The check: float32 attention of one head over the whole batch, through autograd.

def reference(q, k, v, dout, causal, sink, head):
    """{"out", "dq", "dk", "dv"(, "dsink", "dsink_scale")} of head `head` in float32, (b, s, d) each;
    dsink_scale: the norm of dsink's per-row terms p_sink * (dO . O)."""
    leaves = [t[:, :, head].float().requires_grad_(True) for t in (q, k, v)]
    qh, kh, vh = leaves
    s = qh.shape[1]
    scores = qh @ kh.transpose(1, 2) * qh.shape[-1] ** -0.5                 # (b, s, s)
    if causal:  # seqlen_q == seqlen_k: key j > query i is masked
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if sink is not None:  # one more score per row that takes no value
        leaves.append(sink[head:head + 1].detach().clone().requires_grad_(True))
        scores = torch.cat([scores, leaves[3].expand(*scores.shape[:2], 1)], dim=-1)
    probs = torch.softmax(scores, dim=-1)
    out = probs[..., :s] @ vh
    douth = dout[:, :, head].float()
    grads = torch.autograd.grad(out, leaves, douth)
    ref = {"out": out.detach(), **dict(zip(("dq", "dk", "dv", "dsink"), grads))}
    if sink is not None:
        with torch.no_grad():
            ref["dsink_scale"] = (probs[..., s] * (douth * out).sum(-1)).norm()
    return ref


def rel_err(got, refs):
    """The largest relative error of an implementation's outputs (got, (b, s, h, d) or dsink (h,))
    against the references of the checked heads; NaN counts as infinite."""
    worst = 0.0
    for head, ref in refs.items():
        for key, value in got.items():
            if key == "dsink":
                err = (value[head].float() - ref[key][0]).abs() / ref["dsink_scale"]
            else:
                err = (value[:, :, head].float() - ref[key]).norm() / ref[key].norm()
            err = err.item()
            worst = max(worst, math.inf if math.isnan(err) else err)
    return worst


def must_match(name, p, direction, got, refs):
    err = rel_err(got, refs)
    if not err <= TOLERANCE:
        raise SystemExit(f"WRONG RESULT: {name} {direction} on {label(p)}: relative error {err:.3g} against the "
                         f"float32 reference (tolerance {TOLERANCE}); not timed")
    return err


def label(p):
    return f"{p['kind']} d{p['d_qk']}/{p['d_v']} causal={p['causal']!s:5} s={p['seqlen']:5d} b={p['batch']}"


# ------------------------------------------------------------------------------------------------

def sink_logits(heads, seqlen):
    """Learnable sink logits as the sink rows draw them: around log(seqlen), so that the sink takes a
    visible share of every row (see the docstring's correctness paragraph)."""
    return torch.randn(heads, device="cuda") + math.log(seqlen)


def measure(p, libs, rounds, quick, alternate=0, directions=DIRECTIONS):
    """The rows of one shape, a row per direction (forward, backward)."""
    b, s, h, dqk, dv, causal = (p[key] for key in ("batch", "seqlen", "nheads", "d_qk", "d_v", "causal"))
    q, k = (torch.randn(b, s, h, dqk, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    v, dout = (torch.randn(b, s, h, dv, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    sink = sink_logits(h, s) if p["kind"] == "sink" else None
    refs = {False: {head: reference(q, k, v, dout, causal, None, head) for head in CHECK_HEADS}}
    if sink is not None:
        refs[True] = {head: reference(q, k, v, dout, causal, sink, head) for head in CHECK_HEADS}
    rows = []
    for direction in directions:
        def ours(library, with_sink=True):
            with on_library(library):
                if direction == "forward":
                    return ours_forward(q, k, v, causal, sink if with_sink else None)
                return ours_backward(q, k, v, dout, causal, sink if with_sink else None)

        row = {**p, "direction": direction, "baseline": KINDS[p["kind"]][2], "baseline_note": ""}
        # (column, function, context while it runs): ours, the --lib builds, the baseline; each
        # checked before any is timed.
        fn, got = ours(None)
        row["check_rel_err"] = must_match("ours", p, direction, got, refs[sink is not None])
        entries = [("ours", fn, None)]
        for name, library in libs:
            fn, got = ours(library)
            must_match(f"ours ({name})", p, direction, got, refs[sink is not None])
            entries.append((f"ours_{name}", fn, lambda library=library: on_library(library)))
        if p["kind"] == "sink":
            fn, got = ours(None, with_sink=False)
            row["baseline_rel_err"] = must_match("ours without sink", p, direction, got, refs[False])
        else:
            built, row["baseline_note"] = refused(lambda: cudnn_forward(q, k, v, causal) if direction == "forward"
                                                  else cudnn_backward(q, k, v, dout, causal))
            fn, got = built or (None, None)
            if got is not None:
                row["baseline_rel_err"] = rel_err(got, refs[False])
                if not row["baseline_rel_err"] <= TOLERANCE:
                    row["baseline_note"] = f"cudnn off the float32 reference (relative error {row['baseline_rel_err']:.3g})"
        if fn is not None:
            entries.append(("baseline", fn, None))
        del got
        sink_row = p["kind"] == "sink"  # the same kernel with and without: three calls a turn, SINK_ROUNDS
        timed = timed_rates(entries, SINK_ROUNDS[quick] if sink_row else rounds, bench_ms(direction, quick),
                            work(p, direction), alternate=3 if sink_row else alternate)
        for column, tflops in timed.items():
            row[f"{column}_tflops"] = tflops
        del entries, fn
        row.setdefault("baseline_tflops", math.nan)
        row.setdefault("baseline_rel_err", math.nan)
        row["ratio"] = row["ours_tflops"] / row["baseline_tflops"]
        rows.append(row)
        print(f"{label(p)} {direction:8}: ours {row['ours_tflops']:6.1f}  {row['baseline']} "
              f"{row['baseline_tflops']:6.1f}  ratio {row['ratio']:5.2f}  (rel err {row['check_rel_err']:.2g})"
              + "".join(f"  {name} {row[f'ours_{name}_tflops']:6.1f}" for name, _ in libs)
              + (f"  [{row['baseline_note']}]" if row["baseline_note"] else ""), flush=True)
    return rows


def plot(rows, path):
    """Bars per seqlen: ours (and the --lib builds) beside the kind's baseline; a row of panels per
    (kind, direction), non-causal left, causal right."""
    plt = pyplot()
    if plt is None:
        return
    extra = [key for key in dict.fromkeys(key for r in rows for key in r)
             if key.startswith("ours_") and key.endswith("_tflops") and key != "ours_tflops"]
    panels = list(dict.fromkeys((r["kind"], r["direction"]) for r in rows))
    fig, axes = plt.subplots(len(panels), 2, figsize=(12, 3.6 * len(panels)), squeeze=False)
    for (kind, direction), pair in zip(panels, axes):
        series = ([("ours_tflops", "flashattn" + (" with sink" if kind == "sink" else ""), "#1f77b4")]
                  + [(key, f"flashattn, {key[5:-7]}", color) for key, color in zip(extra, EXTRA_COLORS)]
                  + [("baseline_tflops", KINDS[kind][3], "#2ca02c")])
        width = 0.8 / len(series)
        for causal, ax in zip((False, True), pair):
            sel = [r for r in rows if (r["kind"], r["direction"], r["causal"]) == (kind, direction, causal)]
            for i, (key, name, color) in enumerate(series):
                values = [r.get(key, math.nan) for r in sel]
                xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(sel))]
                bars = ax.bar(xs, values, width=width, label=name, color=color)
                ax.bar_label(bars, labels=["" if math.isnan(v) else f"{v:.0f}" for v in values], fontsize=6)
                for x, value in zip(xs, values):
                    if math.isnan(value):  # e.g. cuDNN refused the shape: baseline_note in the CSV says why
                        ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=6)
            ax.set_xticks(range(len(sel)), [f"{r['seqlen'] // 1024}k" if r["seqlen"] >= 1024 else str(r["seqlen"])
                                            for r in sel])
            ax.set_xlim(-0.5, len(sel) - 0.5)  # an empty (NaN) bar does not widen the axes: its "n/a" would fall off
            ax.set_title(f"{KIND_TITLES[kind]}: {direction}, {'causal' if causal else 'non-causal'}", fontsize=9)
            ax.set_xlabel("sequence length")
            ax.set_ylabel("TFLOP/s")
            heights = [r.get(key, math.nan) for r in sel for key, _, _ in series]
            ax.set_ylim(0, 1.3 * max([x for x in heights if not math.isnan(x)], default=1))  # the legend's room
            ax.legend(loc="upper left", ncol=len(series), fontsize=7)
    gpu = rows[0].get("gpu", "") if rows else ""
    fig.suptitle(f"Issue 27 features, bf16, 16/16 heads, batch x seqlen = 16k, {gpu}\n(FLOPs 2*b*h*s^2*(d_qk+d_v), "
                 "halved when causal; backward 2.5 x forward)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / fig.get_figheight()))
    fig.savefig(path, dpi=110)


def read_rows(csv_path):
    """A results CSV's rows with numbers parsed (an empty cell: nan)."""
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["causal"] = r["causal"] == "True"
        for key in ("seqlen", "batch", "nheads", "nheads_k", "d_qk", "d_v"):
            r[key] = int(r[key])
        for key in r:
            if key.endswith(("_tflops", "_rel_err")) or key == "ratio":
                r[key] = float(r[key] or "nan")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations per timed call (the same shapes)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: value_dim, sink (default both)")
    ap.add_argument("--directions", default=",".join(DIRECTIONS),
                    help="comma-separated: forward, backward (default both)")
    ap.add_argument("--seqlens", help="comma-separated seqlens (default 4096,8192,16384; batch = 16384 / seqlen)")
    ap.add_argument("--rounds", type=int, default=1,
                    help=ROUNDS_HELP)
    ap.add_argument("--lib", action="append", default=[], metavar="NAME:PATH",
                    help="also time the package on the library at PATH (another build), interleaved "
                         "(column ours_NAME_tflops)")
    ap.add_argument("--alternate", type=int, default=0, metavar="CALLS",
                    help=ALTERNATE_HELP + " (value_dim rows)")
    ap.add_argument("--replot", metavar="CSV", help="only redraw DIR/<card>-features.png from a results CSV")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        replot_rows = read_rows(args.replot)
        plot(replot_rows, replot_file(out, replot_rows, "features.png"))
        return
    kinds = parse_subset("--kinds", args.kinds, tuple(KINDS))
    directions = parse_subset("--directions", args.directions, DIRECTIONS)
    seqlens = tuple(int(s) for s in args.seqlens.split(",")) if args.seqlens else SEQLENS
    if any(s <= 0 or TOKENS % s for s in seqlens):
        raise SystemExit(f"--seqlens {args.seqlens}: each must divide {TOKENS} (batch = {TOKENS} / seqlen)")
    grid = problems(kinds, seqlens)
    from flashattn._library import Library
    libs = [(name, Library(path)) for name, path in map(parse_lib, args.lib)]
    props = torch.cuda.get_device_properties(0)
    print(f"{len(grid)} shapes x {', '.join(directions)} on {props.name} (torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()})", flush=True)

    rows = []
    for p in grid:
        rows += measure(p, libs, args.rounds, args.quick, args.alternate, directions)
        torch.cuda.empty_cache()  # the shape's tensors, graphs and references are gone with measure's frame
    date, rev = datetime.date.today().isoformat(), commit()
    for r in rows:
        r.update(date=date, commit=rev, gpu=props.name)
    fields = ["date", "commit", "gpu", "kind", "direction", "causal", "seqlen", "batch", "nheads", "nheads_k", "d_qk",
              "d_v", "ours_tflops", "baseline", "baseline_tflops", "ratio", "check_rel_err", "baseline_rel_err",
              "baseline_note"] + [f"ours_{name}_tflops" for name, _ in libs]

    def cell(key, value):
        if isinstance(value, float) and math.isnan(value):
            return ""
        if key.endswith("_tflops"):
            return round(value, 2)
        return f"{value:.3g}" if key.endswith("_rel_err") or key == "ratio" else value
    csv_path = card_file(out, props.name, "features.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({key: cell(key, value) for key, value in r.items()})
    try:
        plot(rows, card_file(out, props.name, "features.png"))
    except Exception as e:  # the numbers matter more than the chart
        print("plot failed:", e)

    print("\nTFLOP/s, bf16, 16/16 heads (ratio = ours / baseline: value_dim against cuDNN, sink against no sink)")
    print(f"{'kind':>9} {'direction':>9} {'causal':>6} {'seqlen':>6} {'batch':>5} {'d_qk':>4} {'d_v':>3} | "
          f"{'ours':>6} {'baseline':>8} {'':>6} | {'ratio':>5} | {'rel err':>7}"
          + "".join(f" | {name:>6}" for name, _ in libs) + " | note")
    for r in rows:
        print(f"{r['kind']:>9} {r['direction']:>9} {str(r['causal']):>6} {r['seqlen']:6d} {r['batch']:5d} "
              f"{r['d_qk']:4d} {r['d_v']:3d} | {r['ours_tflops']:6.1f} {r['baseline']:>8} {r['baseline_tflops']:6.1f} | "
              f"{r['ratio']:5.2f} | {r['check_rel_err']:7.1e}"
              + "".join(f" | {r[f'ours_{name}_tflops']:6.1f}" for name, _ in libs) + f" | {r['baseline_note']}")
    print(f"\nwrote {csv_path}", flush=True)


if __name__ == "__main__":
    main()
