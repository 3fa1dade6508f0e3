"""What the benchmark scripts share."""
import contextlib
import os
import subprocess
import sys
from pathlib import Path

# Where a benchmark writes when no --out is given: a scratch folder (gitignored), so that a run never
# overwrites the committed figures in bench/results/ unless told to (--out bench/results/...).
SCRATCH = Path(__file__).resolve().parent / "out"

# The FlashAttention-2 paper's grid (forward and backward benchmarks): bf16, batch * seqlen = 16k
# tokens, hidden 2048 (heads = 2048 / d).
HDIMS = (64, 128, 256)
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, HIDDEN = 16384, 2048


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


def best_of_rounds(entries, rounds, bench_ms, work):
    """Times each (column, fn, context) once per round, round-robin, inside `context()` (a context
    manager factory, e.g. overrides set and put back; None: nothing); returns {column: best work / ms}.
    No implementation gains from its place in the order."""
    best = {}
    for _ in range(rounds):
        for column, fn, context in entries:
            with (context or contextlib.nullcontext)():
                rate = work / bench_ms(fn)
            best[column] = max(best.get(column, 0.0), rate)
    return best


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
