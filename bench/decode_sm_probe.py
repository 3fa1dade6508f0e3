"""Does a decode grid of one CTA per item read faster when it has more SMs? (issue 6, batch 16)

    FLASHATTN_LIB=build-gpu/src/libflashattn.so python3 bench/decode_sm_probe.py [--lens 8192,32768]
        [--shapes 30x4,16x8,33x4]

Batch 16 with 8 KV heads is 128 (sequence, KV head) items on the H200's 132 SMs: ours and cuDNN run
one CTA per item, so 4 SMs idle. Whether a grid that used them (stream-K shares, which need a merge)
could read faster depends on what limits the one-CTA-per-SM grid: each SM's own rate (then time
stays flat as items grow towards the SM count and TB/s rises with them) or DRAM (then time grows
with the items and TB/s stays flat). This times, at the same cache length (4 query heads per KV
head, d 128, bf16; batch x KV heads varied, --shapes), ours under the library's rule (column
"ours"), ours unsplit on the deep ring ("deep") and on the 3-stage ring ("3-st"), and cuDNN, with
gpu_decode.py's method (each call after an idle kernel, caches rotated so the L2 is not measured;
the best of 3 rounds, bench_common.best_of_rounds).
"""
import argparse
import math
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_decode as gd  # noqa: E402
from bench_common import best_of_rounds  # noqa: E402

SHAPES = ((8, 4), (16, 4), (24, 4), (30, 4), (16, 8), (32, 4), (33, 4), (66, 2))  # (batch, KV heads)


def time_shape(batch, heads_k, cache_len):
    group, hdim = 4, gd.HDIM
    kv_bytes = batch * cache_len * heads_k * hdim * 2 * 2
    copies = max(1, math.ceil(gd.ROTATE_BYTES / kv_bytes))
    q = torch.randn(batch, 1, group * heads_k, hdim, device="cuda", dtype=torch.bfloat16)
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")
    caches = [(torch.randn(batch, cache_len, heads_k, hdim, device="cuda", dtype=torch.bfloat16),
               torch.randn(batch, cache_len, heads_k, hdim, device="cuda", dtype=torch.bfloat16))
              for _ in range(copies)]
    unsplit = gd.rotating([gd.ours_fn(q, k, v, lengths, num_splits=1) for k, v in caches])
    entries = [("ours", gd.rotating([gd.ours_fn(q, k, v, lengths) for k, v in caches]), {}),
               ("deep", unsplit, {"FLASHATTN_CUDA_DECODE": "split_keys_deep"}),
               ("reg", unsplit, {"FLASHATTN_CUDA_DECODE": "split_keys"}),
               ("cudnn", gd.rotating([gd.sdpa_fn(q, k, v, SDPBackend.CUDNN_ATTENTION) for k, v in caches]), {})]
    tbps = best_of_rounds(entries, 3, gd.bench_ms, kv_bytes / 1e9)
    row = {name: (kv_bytes / rate / 1e6, rate) for name, rate in tbps.items()}  # (us per call, TB/s)
    del caches
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", default="8192,32768")
    ap.add_argument("--shapes", default=None, help="batch x KV heads pairs, e.g. 30x4,16x8,33x4")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{sms} SMs; ours = the library's rule, cuDNN = SDPA's cuDNN backend; us per call and TB/s", flush=True)
    print(f"{'L':>6} {'batch':>5} {'hk':>3} {'items':>5} | {'ours us':>8} {'TB/s':>5} | {'deep us':>8} {'TB/s':>5} | "
          f"{'3-st us':>8} {'TB/s':>5} | "
          f"{'cuDNN us':>8} {'TB/s':>5}")
    shapes = SHAPES if args.shapes is None else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for cache_len in (int(x) for x in args.lens.split(",")):
        for batch, heads_k in shapes:
            r = time_shape(batch, heads_k, cache_len)
            items = batch * heads_k
            print(f"{cache_len:6d} {batch:5d} {heads_k:3d} {items:5d} | "
                  + " | ".join(f"{r[n][0]:8.1f} {r[n][1]:5.2f}" for n in ("ours", "deep", "reg", "cudnn")), flush=True)


if __name__ == "__main__":
    main()
