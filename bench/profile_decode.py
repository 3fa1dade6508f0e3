"""One decode call of each implementation on a few shapes, for Nsight Compute to profile.

    ncu --clock-control none --nvtx --nvtx-include "L32k_b1.built/" --section ... \
        python3 bench/profile_decode.py [SHAPE ...]

A shape is "L32k_b1" style: cache length in k, batch; 32 query / 8 KV heads, d 128, bf16, one query
token, contiguous cache, num_splits = 0 (the library's split rule), as in bench/gpu_decode.py; a
"p" suffix ("L32k_b1p") reads a pool of 16-row pages instead. Each shape runs ours as the planner
chooses ("built") and with each inference kernel forced ("tile64", "split_keys": overrides
inference_kernel=...), those named in FLASHATTN_PROFILE_DECODE_VARIANTS (default: all three), and,
for contiguous caches, torch SDPA's cuDNN backend, once each after an unprofiled warm-up, inside NVTX
ranges named after the shape and the implementation. Our ranges hold the forward kernel and, when
the call splits, the combine kernel. `scripts/gpu.py profile decode` runs it.
"""
import os
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
import abi  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_forward import run_in_nvtx_ranges  # noqa: E402

HEADS, HEADS_K, HDIM, PAGE = 32, 8, 128, 16
DEFAULT_SHAPES = ["L32k_b1", "L8k_b64", "L8k_b64p", "L128k_b16"]


def parse(shape):
    m = re.fullmatch(r"L(\d+)k_b(\d+)(p?)", shape)
    if not m:
        raise SystemExit(f"shape {shape!r}: expected e.g. L32k_b1 or L8k_b64p (cache length in k, batch, paged)")
    return int(m.group(1)) * 1024, int(m.group(2)), m.group(3) == "p"


def main():
    shapes = sys.argv[1:] or DEFAULT_SHAPES
    variants = os.environ.get("FLASHATTN_PROFILE_DECODE_VARIANTS", "built tile64 split_keys").split()
    for shape in shapes:
        cache_len, batch, paged = parse(shape)
        q = torch.randn(batch, 1, HEADS, HDIM, device="cuda", dtype=torch.bfloat16)
        lengths = torch.full((batch,), cache_len, dtype=torch.int32, device="cuda")
        table = None
        if paged:
            blocks = batch * cache_len // PAGE
            k = torch.randn(blocks, PAGE, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16)
            table = torch.randperm(blocks, device="cuda").to(torch.int32).view(batch, cache_len // PAGE)
        else:
            k = torch.randn(batch, cache_len, HEADS_K, HDIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        params, out, lse = abi.make_kvcache_params(q, k, v, lengths, block_table=table, num_splits=0,
                                                   backend=abi.BACKEND_CUDA,
                                                   stream=torch.cuda.current_stream().cuda_stream)
        runs = {}
        for variant in variants:
            def ours(variant=variant):
                with abi.overrides("" if variant == "built" else f"inference_kernel={variant}"):
                    abi.lib.check(abi.lib.kvcache_forward(params))
            runs[variant] = ours
        if not paged:
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

            def cudnn():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
            runs["cudnn"] = cudnn
        run_in_nvtx_ranges(shape, runs)
        print(f"{shape}: L={cache_len} batch={batch} paged={paged}: ran {', '.join(runs)}", flush=True)
        del k, v, table, params, out, lse
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
