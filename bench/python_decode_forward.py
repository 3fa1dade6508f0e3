"""Decoding through the plain forward: flashattn.flash_attn_func on one query token (or a few) against
long keys, with the split-KV rule of the Python forward (flashattn/_ops.py: _forward_splits) and
without it (num_splits = 1, the package's behaviour before session 13), beside torch SDPA's flash
and cuDNN backends on the same tensors.

    PYTHONPATH=python FLASHATTN_LIBRARY=build-gpu/src/libflashattn.so python3 bench/python_decode_forward.py --out DIR

DIR defaults to bench/out, a gitignored scratch folder (the committed figures are in bench/results/).

32 query / 8 KV heads, d 128, bf16; ours causal (bottom-right: every query row sees all but the last
few keys), SDPA unmasked (its causal mask is top-left aligned), the same work to within 3 keys. Each function
rotates over copies of K/V (at least 256 MB touched, 4x the L2) and is timed by CUDA events, the
median of 50 calls: eager calls (host time included: what an eager Python caller sees; at these
sizes every implementation is mostly host time), or with --graph one CUDA graph of a call per copy
(the GPU's time). Prints a table of KV bytes read per second and writes
python-decode-forward[-graph].csv and .png to DIR.
"""
import argparse
import contextlib
import csv
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SCRATCH, pyplot  # noqa: E402

HEADS, HEADS_K, HDIM = 32, 8, 128
ROTATE_BYTES = 256 << 20
SHAPES = [(1, 1, 1024), (1, 1, 8192), (1, 1, 32768), (4, 1, 8192), (1, 4, 8192), (16, 1, 8192)]


GRAPH = False


def median_ms(fn_and_calls, reps=50):
    fn, calls_per_fn = fn_and_calls
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls_per_fn)
    return statistics.median(times)


@contextlib.contextmanager
def one_split():
    """The Python forward without its split-KV rule (num_splits = 1: the package before session 13)."""
    rule = _ops._forward_splits
    _ops._forward_splits = lambda *args: 1
    try:
        yield
    finally:
        _ops._forward_splits = rule


def rotating(make_call, copies):
    """One call per copy of K/V, all captured in one CUDA graph (--graph: the GPU's time only, no
    host time between the events), or a function that calls the next copy on each call (eager: what
    an eager Python caller sees, host time included)."""
    calls = [make_call(c) for c in copies]
    if GRAPH:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for c in calls:
                c()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for c in calls:
                c()
        return graph.replay, len(calls)
    state = {"i": 0}

    def run():
        calls[state["i"] % len(calls)]()
        state["i"] += 1
    return run, 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(SCRATCH), help="output folder (default bench/out)")
    ap.add_argument("--graph", action="store_true", help="time CUDA graph replays (GPU time only)")
    args = ap.parse_args()
    global GRAPH
    GRAPH = args.graph
    tag = "-graph" if GRAPH else ""
    dev = torch.device("cuda")
    rows = []
    for batch, seqlen_q, seqlen_k in SHAPES:
        kv_bytes = 2 * batch * seqlen_k * HEADS_K * HDIM * 2
        copies = max(1, min(16, ROTATE_BYTES // kv_bytes))
        q = torch.randn(batch, seqlen_q, HEADS, HDIM, device=dev, dtype=torch.bfloat16)
        kvs = [(torch.randn(batch, seqlen_k, HEADS_K, HDIM, device=dev, dtype=torch.bfloat16),
                torch.randn(batch, seqlen_k, HEADS_K, HDIM, device=dev, dtype=torch.bfloat16)) for _ in range(copies)]
        ours = lambda kv: lambda: flashattn.flash_attn_func(q, kv[0], kv[1], causal=True)
        row = {"batch": batch, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k}
        row["ours_split_tbps"] = kv_bytes / median_ms(rotating(ours, kvs)) / 1e9
        with one_split():
            row["ours_nosplit_tbps"] = kv_bytes / median_ms(rotating(ours, kvs)) / 1e9
        qt = q.transpose(1, 2)
        kvt = [(k.transpose(1, 2), v.transpose(1, 2)) for k, v in kvs]
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            def call(kv, backend=backend):
                def run():
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(qt, kv[0], kv[1], enable_gqa=True)
                return run
            try:
                row[f"{name}_tbps"] = kv_bytes / median_ms(rotating(call, kvt)) / 1e9
            except RuntimeError as e:
                print(f"  {name} failed: {str(e)[:100]}", flush=True)
                row[f"{name}_tbps"] = float("nan")
        # Same answer both ways (the split merge reorders the sums: a few ulp).
        a = flashattn.flash_attn_func(q, kvs[0][0], kvs[0][1], causal=True)
        with one_split():
            b = flashattn.flash_attn_func(q, kvs[0][0], kvs[0][1], causal=True)
        row["max_diff"] = (a.float() - b.float()).abs().max().item()
        rows.append(row)
        print(f"b={batch:3d} sq={seqlen_q} sk={seqlen_k:6d}: split {row['ours_split_tbps']:5.2f}  "
              f"no split {row['ours_nosplit_tbps']:5.2f}  sdpa flash {row['sdpa_flash_tbps']:5.2f}  "
              f"cudnn {row['sdpa_cudnn_tbps']:5.2f} TB/s  (max |split - no split| {row['max_diff']:.2e})", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"python-decode-forward{tag}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'batch':>5} {'sq':>3} {'sk':>6} | {'split':>6} {'nosplit':>7} {'flash':>6} {'cudnn':>6} | "
          f"{'x nosplit':>9} {'x flash':>7} {'x cudnn':>7}")
    for r in rows:
        s = r["ours_split_tbps"]
        print(f"{r['batch']:5d} {r['seqlen_q']:3d} {r['seqlen_k']:6d} | {s:6.2f} {r['ours_nosplit_tbps']:7.2f} "
              f"{r['sdpa_flash_tbps']:6.2f} {r['sdpa_cudnn_tbps']:6.2f} | {s / r['ours_nosplit_tbps']:9.2f} "
              f"{s / r['sdpa_flash_tbps']:7.2f} {s / r['sdpa_cudnn_tbps']:7.2f}")
    plt = pyplot()
    if plt is None:
        return
    labels = [f"b{r['batch']} q{r['seqlen_q']}\n{r['seqlen_k'] // 1024}k" for r in rows]
    series = [("flashattn (split-KV rule)", "ours_split_tbps"), ("flashattn, one split", "ours_nosplit_tbps"),
              ("SDPA flash", "sdpa_flash_tbps"), ("SDPA cuDNN", "sdpa_cudnn_tbps")]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.2
    for i, (name, key) in enumerate(series):
        ax.bar([x + (i - 1.5) * width for x in range(len(rows))], [r[key] for r in rows], width, label=name)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("KV read rate, TB/s")
    ax.set_title(f"flash_attn_func decode (bf16, {HEADS}/{HEADS_K} heads, d{HDIM}), {torch.cuda.get_device_name()}, "
                 + ("CUDA graph replays" if GRAPH else "eager calls"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"python-decode-forward{tag}.png", dpi=120)


if __name__ == "__main__":
    main()
