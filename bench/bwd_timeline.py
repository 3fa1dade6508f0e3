"""Where a key block's time goes in the Hopper backward: per-CTA event times, in a measuring build.

    cmake -B build-timeline -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_BWD_TIMELINE=ON -DFLASHATTN_HEADDIMS="64;128" ...
    FLASHATTN_LIB=build-timeline/src/libflashattn.so python3 bench/bwd_timeline.py [--out DIR] [SHAPE ...]

(`scripts/gpu_run.sh` step `bwd_timeline` does both.) A shape is "d128n1k" style (head dim, 'c'
causal or 'n' not, seqlen in k; batch * seqlen = 16k tokens, hidden 2048, bf16, as
bench/gpu_backward.py). Each shape runs one backward with the Hopper kernel forced, after a warm-up,
with $FLASHATTN_CUDA_BWD_TIMELINE_FILE set: the library writes one CSV row per CTA
(kernels/bwd_timeline.cuh: the SM, %globaltimer at the consumers' start and after the first key
block's epilogue, clock64 at each event). This script turns each CTA's cycles into microseconds with
that CTA's own (ns / cycles) ratio and prints, per shape, the median and 90th percentile of:

  kv wait      consumers' start -> the first key block's K, V landed, of which
    producer set-up   consumers' start -> the producer's loop (its setmaxnreg, address set-up)
    K/V issue         the producer issuing K and V (cp.async)
  first S      K, V landed -> the first query block's S^T done (its Q stage, then one wgmma)
  per block    the remaining query blocks of the first key block, per block
  epilogue     last query block done -> dK, dV stored
  producer     dK, dV stored -> the producer's exit (its last dQ add, its copies landed)
  SM gap       one CTA's epilogue end -> the next CTA's start on the same SM (exit, launch,
               shared-memory carve-up, barrier init, setmaxnreg)

The question it answers (docs/perf-log.md, session 6): at 1k tokens each CTA costs ~17-21 us more
than its query blocks' share at 16k; which of these phases holds it.
"""
import argparse
import csv
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SCRATCH  # noqa: E402

DEFAULT_SHAPES = ["d128n1k", "d128c1k", "d128n16k", "d64n1k"]
BLOCK_M = 64   # query rows per block of the Hopper backward (bwd_traits_sm90.cuh)
BLOCK_N = 128  # keys per CTA at d64 and d128


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def query_blocks(seqlen, causal, key_block):
    """Query blocks that meet key block `key_block` (seqlen_q == seqlen_k: bottom-right = top-left)."""
    total = (seqlen + BLOCK_M - 1) // BLOCK_M
    if not causal:
        return total
    return total - (key_block * BLOCK_N) // BLOCK_M


def analyse(rows, seqlen, causal, num_chunks):
    """Per-CTA phases in us, and the gaps between consecutive CTAs of an SM."""
    phases = {k: [] for k in ("kv wait", "producer set-up", "K/V issue", "first S", "per block", "epilogue", "producer",
                              "SM gap", "CTA")}
    ctas = []
    for r in rows:
        v = {k: int(x) for k, x in r.items()}
        if v["kv_ready"] == 0 or v["epilogue_done"] <= v["start"] or v["global_end_ns"] <= v["global_start_ns"]:
            continue  # no work in its first key block, or a build without the marks
        ns_per_cycle = (v["global_end_ns"] - v["global_start_ns"]) / (v["epilogue_done"] - v["start"])
        us = lambda a, b: (v[b] - v[a]) * ns_per_cycle / 1000.0  # noqa: E731
        blocks = query_blocks(seqlen, causal, v["cta"] % num_chunks)
        phases["kv wait"].append(us("start", "kv_ready"))
        phases["first S"].append(us("kv_ready", "first_scores"))
        if blocks > 1:
            phases["per block"].append(us("first_scores", "blocks_done") / (blocks - 1))
        phases["epilogue"].append(us("blocks_done", "epilogue_done"))
        if v["producer_exit"]:
            phases["producer"].append(us("epilogue_done", "producer_exit"))
        if v["producer_start"] and v["producer_kv_issued"]:
            phases["producer set-up"].append(us("start", "producer_start"))
            phases["K/V issue"].append(us("producer_start", "producer_kv_issued"))
        phases["CTA"].append((v["global_end_ns"] - v["global_start_ns"]) / 1000.0)
        ctas.append(v)
    by_sm = {}
    for v in ctas:
        by_sm.setdefault(v["smid"], []).append(v)
    for runs in by_sm.values():
        runs.sort(key=lambda v: v["global_start_ns"])
        for a, b in zip(runs, runs[1:]):
            phases["SM gap"].append((b["global_start_ns"] - a["global_end_ns"]) / 1000.0)
    span = (max(v["global_end_ns"] for v in ctas) - min(v["global_start_ns"] for v in ctas)) / 1000.0 if ctas else 0.0
    summary = {k: {"median_us": percentile(x, 0.5), "p90_us": percentile(x, 0.9), "n": len(x)} for k, x in phases.items()}
    summary["span_us"] = span
    summary["ctas_recorded"] = len(ctas)
    summary["sms"] = len(by_sm)
    return summary


def self_check():
    """analyse() on made-up CTAs whose phases are known (no GPU, no torch; run by ctest)."""
    rows = []
    cycles_per_us = 2000  # a 2 GHz clock: 0.5 ns per cycle
    # 4 CTAs: chunks 0 and 1 of two (sequence, head) pairs, seqlen 256 causal (4 and 2 query
    # blocks); CTAs 0, 2 on SM 0 and 1, 3 on SM 1, each second one starting 3 us after the first
    # one's epilogue ended.
    end_ns = {}
    for cta in range(4):
        sm = cta % 2
        blocks = query_blocks(256, True, cta % 2)
        phases_us = [5, 1, 4 * (blocks - 1), 2]  # kv wait, first S, the other blocks, epilogue
        start_ns = 1_000_000 if cta < 2 else end_ns[sm] + 3_000
        end_ns[sm] = start_ns + sum(phases_us) * 1000
        c = [10_000 * (cta + 1)]
        for p in phases_us:
            c.append(c[-1] + p * cycles_per_us)
        rows.append({"cta": cta, "smid": sm, "global_start_ns": start_ns, "global_end_ns": end_ns[sm],
                     "start": c[0], "kv_ready": c[1], "first_scores": c[2], "blocks_done": c[3],
                     "epilogue_done": c[4], "producer_start": c[0] + cycles_per_us,
                     "producer_kv_issued": c[0] + 3 * cycles_per_us, "producer_issued": c[0] + 4 * cycles_per_us,
                     "producer_exit": c[4] + cycles_per_us})
    rows = [{k: str(v) for k, v in r.items()} for r in rows]
    got = analyse(rows, 256, True, num_chunks=2)
    for name, want in (("kv wait", 5), ("producer set-up", 1), ("K/V issue", 2), ("first S", 1), ("per block", 4),
                       ("epilogue", 2), ("producer", 1)):
        assert abs(got[name]["median_us"] - want) < 1e-6, (name, got[name], want)
    assert got["ctas_recorded"] == 4 and got["sms"] == 2, got
    assert got["SM gap"]["n"] == 2 and abs(got["SM gap"]["median_us"] - 3) < 1e-6, got["SM gap"]
    # A row without the marks (no work in its first key block) is left out.
    rows.append({**rows[0], "cta": "4", "kv_ready": "0"})
    assert analyse(rows, 256, True, num_chunks=2)["ctas_recorded"] == 4
    print("bwd_timeline self-check passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(SCRATCH),
                    help="directory for the per-shape CSVs and bwd-timeline.json (default bench/out)")
    ap.add_argument("--self-check", action="store_true", help="check the analysis on made-up CTAs, then exit")
    ap.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES)
    args = ap.parse_args()
    if args.self_check:
        self_check()
        return

    import ctypes

    import torch

    import fa_ctypes as fa
    from profile_backward import BackwardProblem

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for shape in args.shapes:
        problem = BackwardProblem(shape)
        d, causal, s, b, h, params = problem.d, problem.causal, problem.s, problem.b, problem.h, problem.params
        path = out / f"timeline-{shape}.csv"
        os.environ["FLASHATTN_CUDA_BWD_KERNEL"] = "sm90"
        try:
            for timed in (False, True):  # warm-up, then the recorded call
                if timed:
                    os.environ["FLASHATTN_CUDA_BWD_TIMELINE_FILE"] = str(path)
                status = fa.lib().fa_backward(ctypes.byref(params))
                torch.cuda.synchronize()
                if status != 0:
                    raise fa.FlashAttnError(status, fa.lib().fa_last_error().decode())
        finally:
            os.environ.pop("FLASHATTN_CUDA_BWD_TIMELINE_FILE", None)
            os.environ.pop("FLASHATTN_CUDA_BWD_KERNEL", None)
        if not path.exists():
            raise SystemExit(f"{shape}: no timeline written: is the library built with -DFLASHATTN_CUDA_BWD_TIMELINE=ON?")
        with open(path) as f:
            rows = list(csv.DictReader(f))
        num_chunks = (s + BLOCK_N - 1) // BLOCK_N
        results[shape] = summary = analyse(rows, s, causal, num_chunks)
        print(f"{shape}: b={b} h={h} d={d} causal={causal}: {summary['ctas_recorded']} CTAs on {summary['sms']} SMs, "
              f"first CTA start to last epilogue {summary['span_us']:.0f} us", flush=True)
        for name in ("kv wait", "producer set-up", "K/V issue", "first S", "per block", "epilogue", "producer",
                     "SM gap", "CTA"):
            p = summary[name]
            print(f"    {name:10s} median {p['median_us']:8.2f} us   p90 {p['p90_us']:8.2f} us   (n={p['n']})")
    with open(out / "bwd-timeline.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
