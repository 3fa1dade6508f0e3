"""Where the time of one decode call goes: the GPU timeline of ours, cuDNN and torch FA2 (torch.profiler).

    FLASHATTN_LIB=build-gpu/src/libflashattn.so python3 bench/decode_timeline.py [SHAPE ...] > timeline.txt

A shape is "L32k_b1" (cache length in k, batch; 32 query / 8 KV heads, d 128, bf16, one query token,
contiguous cache, as bench/gpu_decode.py), optionally "p" (a pool of 16-row pages, ours only) and
":sN" (ours with num_splits = N instead of the split rule). Each implementation runs 12 calls under
the profiler after a warm-up, rotating over copies of the cache, each call after either an idle
kernel (torch.cuda._sleep: bench/gpu_decode.py's method since session 8) or a 256 MB flush (triton's
do_bench: its method before), both printed. Per call the trace gives: `gap`, from the end of the
idle or flush kernel (where the start event lands) to the first kernel of the call; every kernel's
duration and the gaps between them; `span`, idle/flush end to the call's last kernel end (what the
benchmark measures, up to the end event's own latency). Printed: the median of each, per
implementation, and the KV read rate implied by the span and by the main kernel alone.

FLASHATTN_TIMELINE_ENV="NAME:VAR=VALUE,...;NAME2:..." also runs ours under those environments
(e.g. "pdl:FLASHATTN_CUDA_PDL=1").
"""
import json
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import environment, parse_variant  # noqa: E402
from gpu_decode import HDIM, HEADS, HEADS_K, IDLE_CYCLES, PAGE, ROTATE_BYTES, ours_fn, sdpa_fn  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

CALLS = 12
DEFAULT_SHAPES = ["L1k_b1", "L8k_b1", "L32k_b1", "L128k_b1", "L32k_b1:s16", "L32k_b1:s66", "L8k_b16", "L1k_b64",
                  "L32k_b64", "L32k_b1p"]


def parse(shape):
    m = re.fullmatch(r"L(\d+)k_b(\d+)(p?)(?::s(\d+))?", shape)
    if not m:
        raise SystemExit(f"shape {shape!r}: expected e.g. L32k_b1, L8k_b64p or L32k_b1:s16")
    return int(m.group(1)) * 1024, int(m.group(2)), m.group(3) == "p", int(m.group(4) or 0)


def trace_calls(fns, before):
    """Kernel lists [(name, start_us, dur_us)] of CALLS calls, each after before() (a flush or an
    idle kernel), from a chrome trace."""
    for i in range(3):  # warm-up (plans, first-call set-up)
        before()
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(CALLS):
            before()
            fns[i % len(fns)]()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    os.unlink(path)
    kernels = sorted((e["ts"], e["dur"], e["name"]) for e in events if e.get("cat") == "kernel")
    # Split at the flush or idle kernels (the first of each call, and longer than 20 us).
    calls, current, flush_end = [], None, None
    for ts, dur, name in kernels:
        lowered = name.lower()
        is_flush = any(word in lowered for word in ("fill", "zero", "memset", "spin", "sleep")) and dur > 20
        if is_flush:
            if current is not None:
                calls.append((flush_end, current))
            flush_end, current = ts + dur, []
        elif current is not None:
            current.append((name, ts, dur))
    if current is not None:
        calls.append((flush_end, current))
    return calls


def summarize(label, calls, kv_bytes):
    calls = [(f, ks) for f, ks in calls if ks]
    if not calls:
        print(f"  {label:22s} no kernels traced")
        return
    n = statistics.median(len(ks) for _, ks in calls)
    calls = [(f, ks) for f, ks in calls if len(ks) == n]
    gap0 = statistics.median(ks[0][1] - f for f, ks in calls)
    span = statistics.median(ks[-1][1] + ks[-1][2] - f for f, ks in calls)
    parts = [f"gap {gap0:5.1f}"]
    for i in range(int(n)):
        dur = statistics.median(ks[i][2] for _, ks in calls)
        if i:
            between = statistics.median(ks[i][1] - (ks[i - 1][1] + ks[i - 1][2]) for _, ks in calls)
            parts.append(f"gap {between:5.1f}")
        parts.append(f"{calls[0][1][i][0][:38]} {dur:6.1f}")
    main = max(statistics.median(ks[i][2] for _, ks in calls) for i in range(int(n)))
    print(f"  {label:24s} span {span:7.1f} us = {kv_bytes / span / 1e6:5.2f} TB/s (main kernel alone "
          f"{kv_bytes / main / 1e6:5.2f}) | " + " | ".join(parts), flush=True)


def parse_env(spec):
    """FLASHATTN_TIMELINE_ENV: "NAME:VAR=VALUE,...;NAME2:..." -> [(NAME, {VAR: VALUE}), ...]."""
    return [parse_variant(part) for part in filter(None, (spec or "").split(";"))]


def main():
    shapes = sys.argv[1:] or DEFAULT_SHAPES
    flush_buffer = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    patterns = (("idle", lambda: torch.cuda._sleep(IDLE_CYCLES)), ("flush", flush_buffer.zero_))
    envs = [("ours", {})] + [(f"ours {n}", e) for n, e in parse_env(os.environ.get("FLASHATTN_TIMELINE_ENV"))]
    print(f"decode timeline, bf16, {HEADS}/{HEADS_K} heads, d {HDIM}; medians of {CALLS} calls; times in us")
    for shape in shapes:
        cache_len, batch, paged, splits = parse(shape)
        kv_bytes = batch * cache_len * HEADS_K * HDIM * 2 * 2
        free, _ = torch.cuda.mem_get_info()
        copies = max(1, min(math.ceil(ROTATE_BYTES / kv_bytes), int(0.5 * free // kv_bytes)))
        q = torch.randn(batch, 1, HEADS, HDIM, device="cuda", dtype=torch.bfloat16)
        lengths = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")
        print(f"{shape} ({kv_bytes / 1e6:.0f} MB of K/V, {copies} copies)", flush=True)
        if paged:
            blocks = cache_len // PAGE
            caches = []
            for _ in range(copies):
                kp = torch.randn(batch * blocks, PAGE, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16)
                table = torch.randperm(batch * blocks, device="cuda").to(torch.int32).view(batch, blocks)
                caches.append((kp, torch.randn_like(kp), table))
        else:
            caches = [(torch.randn(batch, cache_len, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16),
                       torch.randn(batch, cache_len, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16), None)
                      for _ in range(copies)]
        for label, env in envs:
            with environment(env):
                fns = [ours_fn(q, k, v, lengths, block_table=t, num_splits=splits) for k, v, t in caches]
                for pattern, before in patterns:
                    summarize(f"{label}, {pattern}", trace_calls(fns, before), kv_bytes)
        if not paged and not splits:
            for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("torch_fa2", SDPBackend.FLASH_ATTENTION)):
                try:
                    fns = [sdpa_fn(q, k, v, backend) for k, v, _ in caches]
                    for pattern, before in patterns:
                        summarize(f"{label}, {pattern}", trace_calls(fns, before), kv_bytes)
                except RuntimeError as e:
                    print(f"  {label} failed: {str(e)[:120]}")
        del caches
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
