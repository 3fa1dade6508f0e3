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
    """--variant "LABEL:ENV=VALUE[,ENV=VALUE]" -> (LABEL, {ENV: VALUE, ...})."""
    label, _, assignments = text.partition(":")
    return label, dict(a.split("=", 1) for a in assignments.split(","))


@contextlib.contextmanager
def environment(env):
    """env's variables set inside the block, then put back as they were."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def best_of_rounds(entries, rounds, bench_ms, work):
    """Times each (column, fn, env) once per round, round-robin, with env's variables set while it
    runs (then put back as they were); returns {column: best work / ms}. No implementation gains
    from its place in the order."""
    best = {}
    for _ in range(rounds):
        for column, fn, env in entries:
            with environment(env):
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
    of .git can be stale, so scripts/gpu_run.sh callers pass the hash they pushed), else git."""
    if os.environ.get("FLASHATTN_COMMIT"):
        return os.environ["FLASHATTN_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"
