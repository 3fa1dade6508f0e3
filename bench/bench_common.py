"""What the benchmark scripts share."""
import contextlib
import csv
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

# Where a benchmark writes when no --out is given: a scratch folder (gitignored), so that a run never
# overwrites the committed figures in bench/results/ unless told to (--out bench/results/...).
SCRATCH = Path(__file__).resolve().parent / "out"

# The training benchmarks' grid (forward and backward): bf16, batch * seqlen = 16k tokens. MHA rows are
# the FlashAttention-2 paper's shapes (hidden 2048: heads = 2048 / d, as many K/V heads); GQA rows the
# grouped shapes models train with, (hdim, query heads, K/V heads).
HDIMS = (64, 128, 256)
SEQLENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQLENS = (1024, 4096, 16384)
TOKENS, HIDDEN = 16384, 2048
GQA_SHAPES = ((128, 32, 8), (128, 64, 8), (256, 32, 4))
FAMILIES = ("mha", "gqa")
EXTRA_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def parse_subset(option, text, allowed):
    """A comma-separated option's value ("mha,gqa") -> the tuple of its items, each one of `allowed`."""
    items = tuple(text.split(","))
    if any(item not in allowed for item in items):
        raise SystemExit(f"{option} {text!r}: expected a comma-separated subset of {','.join(allowed)}")
    return items


def parse_families(text):
    """--shapes "mha,gqa" -> the tuple of families, checked."""
    return parse_subset("--shapes", text, FAMILIES)


def shape_grid(hdims=HDIMS, seqlens=SEQLENS, families=FAMILIES):
    """The problems to time, in the order measured and charted: per head shape (MHA at each head dim,
    then the GQA shapes at the head dims asked for), non-causal then causal, each seqlen. Each is a dict
    of hdim, nheads, nheads_k, causal, seqlen, batch."""
    heads = [(d, HIDDEN // d, HIDDEN // d) for d in hdims] if "mha" in families else []
    heads += [s for s in GQA_SHAPES if s[0] in hdims] if "gqa" in families else []
    return [{"hdim": d, "nheads": h, "nheads_k": hk, "causal": c, "seqlen": s, "batch": TOKENS // s}
            for d, h, hk in heads for c in (False, True) for s in seqlens]



def grid_from_args(args):
    """The grid a benchmark's --quick, --seqlens, --hdims and --shapes ask for; exits when it is empty."""
    seqlens = QUICK_SEQLENS if args.quick else SEQLENS
    if args.seqlens:
        seqlens = tuple(int(s) for s in args.seqlens.split(","))
    hdims = tuple(int(d) for d in args.hdims.split(",")) if args.hdims else HDIMS
    grid = shape_grid(hdims, seqlens, parse_families(args.shapes))
    if not grid:
        raise SystemExit(f"no problem to time: --shapes {args.shapes} has no shape at --hdims {args.hdims}")
    return grid

def shape_label(row):
    """A row's head shape as the chart and tables name it: "MHA d128", "GQA 32/8 d128"."""
    h, hk = int(row["nheads"]), int(row["nheads_k"])
    return f"MHA d{row['hdim']}" if h == hk else f"GQA {h}/{hk} d{row['hdim']}"


def read_rows(csv_path):
    """A results CSV's rows with numbers parsed (an empty cell: nan). A file from before the GQA rows
    has no nheads_k: its rows are MHA."""
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["causal"] = r["causal"] == "True"
        r["nheads_k"] = r.get("nheads_k") or r["nheads"]
        for k in ("hdim", "seqlen", "batch", "nheads", "nheads_k"):
            r[k] = int(r[k])
        for k in r:
            if k.endswith(("_tflops", "_diff")) or k == "max_abs_diff_vs_fa2":
                r[k] = float(r[k] or "nan")
    return rows


def plot_grid(rows, path, title, series, hide=()):
    """Grouped bars per seqlen, one panel per (head shape, causal): a row of panels per head shape
    (MHA d64 ... GQA 32/4 d256), non-causal left, causal right. series: (column, label, color); the
    other ours_*_tflops columns (--variant, --lib) but those in hide come after them; a column
    measured in no row is left out."""
    plt = pyplot()
    if plt is None:
        return
    named = {key for key, _, _ in series} | set(hide)
    extra = [k for k in dict.fromkeys(k for r in rows for k in r)
             if k.startswith("ours_") and k.endswith("_tflops") and k not in named]
    series = list(series) + [(k, f"flashattn, {k[5:-7]}", c) for k, c in zip(extra, EXTRA_COLORS)]
    series = [s for s in series if any(not math.isnan(r.get(s[0], math.nan)) for r in rows)]
    labels = list(dict.fromkeys(shape_label(r) for r in rows))
    fig, axes = plt.subplots(len(labels), 2, figsize=(14, 4 * len(labels)), sharey=True, squeeze=False)
    width = 0.8 / len(series)
    for (label, causal), ax in zip([(lab, c) for lab in labels for c in (False, True)], axes.flat):
        sel = [r for r in rows if shape_label(r) == label and r["causal"] == causal]
        xs = range(len(sel))
        for i, (key, name, color) in enumerate(series):
            bars = ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], [r.get(key, math.nan) for r in sel],
                          width=width, label=name, color=color)
            ax.bar_label(bars, fmt="%.0f", fontsize=5)
        ax.set_xticks(list(xs), [f"{r['seqlen'] // 1024}k" if r["seqlen"] >= 1024 else str(r["seqlen"]) for r in sel])
        ax.set_title(f"{label}, {'causal' if causal else 'non-causal'}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
    # Title and legend above the panels (in a panel, the legend hides bars), in a band kept free of them.
    top = 1 - 0.7 / fig.get_figheight()
    fig.suptitle(title, fontsize=10, y=1 - 0.15 / fig.get_figheight(), va="top")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="upper center", ncol=len(series), fontsize=8,
               bbox_to_anchor=(0.5, 1 - 0.4 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=110)


def parse_variant(text):
    """--variant "LABEL:OVERRIDES" -> (LABEL, OVERRIDES): ours timed with the overrides (src/core/overrides.h,
    FLASHATTN_OVERRIDES's syntax, e.g. "sm80:forward_kernel=sm80") set through fa_set_overrides."""
    label, sep, spec = text.partition(":")
    if not sep or not label or not spec:
        raise SystemExit(f"--variant {text!r}: expected LABEL:KEY=VALUE[,KEY=VALUE] (e.g. sm80:forward_kernel=sm80)")
    return label, spec


def parse_lib(text):
    """--lib "NAME:PATH" -> (NAME, PATH): ours from another build of the library (another commit),
    timed in the same process, interleaved with the library under test."""
    name, sep, path = text.partition(":")
    if not sep or not name or not Path(path).is_file():
        raise SystemExit(f"--lib {text!r}: expected NAME:PATH of a built libflashattn.so")
    return name, path


def native_or_expanded(make, gqa, name, noted):
    """A torch baseline on a row: make(expand) builds and runs it once. With fewer K/V heads it gets them
    as they are (enable_gqa: "native"); where the backend raises RuntimeError for that, K/V expanded to
    the query heads beforehand ("expanded"; the reason printed once per backend, name, in the set
    noted). Returns (make's value, how); how is "" on an MHA row."""
    try:
        return make(False), "native" if gqa else ""
    except RuntimeError as e:
        if not gqa:
            raise
        if name not in noted:
            noted.add(name)
            print(f"  {name} with enable_gqa: {str(e)[:100]}; K/V expanded to the query heads instead", flush=True)
        return make(True), "expanded"


def baseline_or_nan(make, gqa, name, noted, row):
    """native_or_expanded, or None where the backend refuses the row: its column then holds NaN and
    the reason is printed."""
    try:
        return native_or_expanded(make, gqa, name, noted)
    except RuntimeError as e:
        row[f"{name}_tflops"] = float("nan")
        print(f"  {name} failed: {str(e)[:100]}", flush=True)
        return None


# --rounds' help, for every benchmark that times through timed_rates or balanced_means.
ROUNDS_HELP = ("turns of every implementation, rounded up to whole balanced orders (bench_common.blocked_order: "
               "each implementation once in every n turns, after every one, itself included, twice; twice as "
               "many turns each as there are implementations); default one order")


def blocked_order(n):
    """A cycle of 2 n * n turns of n entries in which
    - every block of n turns (0..n-1, n..2n-1, ...) holds each entry once, so whatever stretch of the
      recent past the clock follows, every entry's turns inherit the same mix of entries: at the
      700 W cap the clock follows the power of the last ~100 ms, several turns of a long row, and an
      order in which one entry's turns bunch together (the de Bruijn order of pairs that this one
      replaced put entry 0 at every other place of its first and last few) times that entry after
      more of its own power than the others (tests/gpu/test_bench_timing.py models it);
    - every entry follows every entry, itself included, exactly twice (the cycle repeated: the last
      turn is followed by the first), so the clock that the turn before leaves is the same mix for all;
    - the cycle is a palindrome, so every entry's mean place is the middle and a linear drift over
      the sequence (the card slowing) weighs on every entry alike.
    Built as a half H and its reverse. H: n blocks, each a permutation of the entries; each block
    opens with the entry that closed the one before (an entry after itself: the only such pairs);
    H opens and closes with entry 0 and the other entries close one block each; every two different
    entries are neighbours inside the blocks exactly twice, either way round, so that H and its
    reverse hold each ordered pair twice. Found by a depth-first search, at once for n <= 13."""
    together = {}  # {frozenset pair: times neighbours inside a block}
    closers = set()
    blocks = []

    def blocks_from(block, left, last_block):
        """Completions of `block` (a prefix) to a permutation whose neighbours are still allowed."""
        if not left:
            closer = block[-1]
            if (closer == 0) == last_block and closer not in closers:
                yield list(block)
            return
        for entry in sorted(left):
            if entry == 0 and last_block and len(left) > 1:
                continue  # the last block closes with 0
            pair = frozenset((block[-1], entry))
            if together.get(pair, 0) == 2:
                continue
            together[pair] = together.get(pair, 0) + 1
            block.append(entry)
            left.discard(entry)
            yield from blocks_from(block, left, last_block)
            left.add(entry)
            block.pop()
            together[pair] -= 1

    def search(opener):
        if len(blocks) == n:
            return True
        last_block = len(blocks) == n - 1
        for block in blocks_from([opener], set(range(n)) - {opener}, last_block):
            blocks.append(block)
            closers.add(block[-1])
            if search(block[-1]):
                return True
            closers.discard(block[-1])
            blocks.pop()
        return False

    if not search(0):
        raise RuntimeError(f"no blocked order of {n} entries found")
    half = [entry for block in blocks for entry in block]
    return half + half[::-1]


# Untimed turns before a row's first timed one (balanced_means): the card settles again after the
# row's set-up on the host (a drift over the first second or so, docs/perf-log.md session 51).
LEAD_IN_S = 1.0


def balanced_means(entries, rounds, time_turn, work, lead_in_s=None, clock=time.monotonic):
    """Times each (column, fn, context) by `time_turn(fn)` (ms a call) inside `context()` (a context
    manager factory, e.g. overrides set and put back; None: nothing), `rounds` turns each, rounded up
    to whole repeats of blocked_order, and returns {column: work / mean ms}. At the H200's and H100's
    700 W cap the clock follows the power of the last ~100 ms, so a turn runs at the clock that the
    turns before it left, and the card slows down over a row after its set-up on the host (likely the
    die warming up again: at a fixed power a cool die clocks higher). Two handles on one library timed
    in a fixed order, or round-robin from the row's start, or in the plain balanced order, read up to
    3% apart on average, the one timed earliest ahead (docs/perf-log.md sessions 50 and 51); in an
    order balanced for the turn before but with one entry's turns bunched, that entry read 1-2.5%
    behind a copy of itself in rows of 12 ms turns (sessions 51 and 53). Here untimed turns in the
    same order run for lead_in_s (default LEAD_IN_S) first, ending on the order's last entry (which
    closes the cycle); every entry follows every entry equally often, has the same mean place and one
    turn in every n, and the means weigh the clock states alike (a median of so few discrete states
    would not). At least one whole order is timed."""
    if not entries:
        return {}
    times = {column: [] for column, _, _ in entries}
    cycle = blocked_order(len(entries))
    lead_in_s = LEAD_IN_S if lead_in_s is None else lead_in_s

    def turn(i):
        column, fn, context = entries[i]
        with (context or contextlib.nullcontext)():
            return column, time_turn(fn)

    began, k = clock(), 0
    while True:  # the lead-in
        entry = cycle[k % len(cycle)]
        turn(entry)
        k += 1
        if entry == cycle[-1] and clock() - began >= lead_in_s:
            break
    for i in cycle * max(1, -(-rounds // (2 * len(entries)))):
        column, ms = turn(i)
        times[column].append(ms)
    return {column: work * len(ms) / sum(ms) for column, ms in times.items()}


def event_timer(calls):
    """time_turn for balanced_means: `calls` calls back to back between two CUDA events, ms a call
    (no L2 flush: for calls of milliseconds, where the flush would be a large share of the turn)."""
    import torch

    def time_turn(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls
    return time_turn


# --alternate's help, and the rounds it takes where --rounds is not given.
ALTERNATE_HELP = ("time by CALLS calls a turn between CUDA events instead of do_bench (warm L2, no flush), "
                  "--rounds then the turns of every implementation, default 20: for a comparison of builds "
                  "or variants (--lib, --variant) within a few percent (bench_common.timed_rates)")
ALTERNATE_ROUNDS = 20


def timed_rates(entries, rounds, bench_ms, work, alternate=0):
    """{column: work per ms} of the entries, by balanced_means: each turn one bench_ms (do_bench's
    median, L2 flushed), `rounds` turns each; with alternate = CALLS > 0 each turn CALLS calls between
    CUDA events and ALTERNATE_ROUNDS turns each where rounds < 2. A/A, main's library timed against a
    copy of itself beside torch's two backends (H100, 18 rows, docs/perf-log.md session 51): do_bench
    turns in the mirrored de Bruijn order that blocked_order replaced read 0.978-1.030 apart, mean
    0.998, sd 1.1% (forward) and mean 1.003, sd 1.2% (backward), where the former best of two
    round-robin rounds read mean 1.023, sd 3.5% (forward) and the plain balanced order 1.026, sd 2.7%;
    three calls a turn between events, mean 1.000 and 0.998, sd 1.8% and 1.3%, but at 16k (12 ms
    turns) the copy read 1-2.5% ahead (sessions 51 and 53), a bias of that order's bunched entry 0
    that blocked_order removes (the same A/A at 16k, six rows, twice each: a / ours 1.011 and 1.012
    in the mirrored order, 0.995 and 1.000 in this one; session 54)."""
    if alternate > 0:
        return balanced_means(entries, rounds if rounds >= 2 else ALTERNATE_ROUNDS, event_timer(alternate), work)
    return balanced_means(entries, rounds, bench_ms, work)


def card_prefix(gpu_name):
    """The prefix of a benchmark's output files for the card it ran on: "NVIDIA H200" -> "h200",
    "NVIDIA H100 80GB HBM3" -> "h100", so that a run on another card never writes files named for the
    H200 (the top-level records are the H200's)."""
    words = [w for w in re.split(r"[\s_-]+", gpu_name) if w and w.upper() not in ("NVIDIA", "GEFORCE", "TESLA")]
    if len(words) > 1 and words[0].upper() in ("RTX", "QUADRO"):  # "RTX 4090" -> "rtx4090"
        words = [words[0] + words[1]]
    slug = re.sub(r"[^a-z0-9]", "", words[0].lower()) if words else ""
    return slug or "gpu"


def card_file(out, gpu_name, name):
    """OUT/<card>-NAME: a benchmark's output file named for the card (card_prefix)."""
    return Path(out) / f"{card_prefix(gpu_name)}-{name}"


def replot_file(out, rows, name):
    """The chart --replot redraws, named for the card in the CSV's gpu column (h200 for a file without one)."""
    return card_file(out, (rows[0].get("gpu") if rows else None) or "H200", name)


def pyplot():
    """matplotlib.pyplot drawing to files, or None, after a one-line note, where matplotlib is not
    installed: the charts are optional, the numbers are written either way."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no chart (pip install matplotlib draws it)", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def commit():
    """The commit whose tree is being measured: $FLASHATTN_COMMIT when set (the device machine's copy
    of .git can be stale, so device calls pass the hash they pushed), else git."""
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"
