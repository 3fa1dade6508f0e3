"""One call of each forward kernel on a few benchmark shapes, for Nsight Compute to profile.

    ncu --clock-control none --section ... python3 bench/profile_forward.py [SHAPE ...]

A shape is "d64c1k" style: head dim, 'c' for causal or 'n' for not, seqlen in k (batch * seqlen =
16k tokens, hidden 2048, bf16, as in bench/gpu_forward.py). Each shape runs both our kernels forced
(overrides forward_kernel=sm80 / sm90) and torch SDPA's FA2 and cuDNN backends, once each after an
unprofiled warm-up, inside NVTX ranges named after the shape and the implementation
(ncu --nvtx --nvtx-include "d64c1k.ours_sm80/" selects one). `scripts/gpu.py profile forward` runs it.
With FLASHATTN_PROFILE_FA3=SO (the shim bench/fa3/build.sh builds) FlashAttention-3's forward runs
too, as "SHAPE.fa3".
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

sys.path.insert(0, str(Path(__file__).resolve().parent / "fa3"))
import fa3 as fa3_shim  # noqa: E402

DEFAULT_SHAPES = ["d64c1k", "d64n4k", "d128c1k", "d256c1k"]


def parse(shape):
    m = re.fullmatch(r"d(\d+)([cn])(\d+)k", shape)
    if not m:
        raise SystemExit(f"shape {shape!r}: expected e.g. d64c1k (head dim, c|n, seqlen in k)")
    return int(m.group(1)), m.group(2) == "c", int(m.group(3)) * 1024


def run_in_nvtx_ranges(shape, runs):
    """Each of `runs` (name -> callable) once unprofiled (the warm-up: cuDNN builds its plan there),
    then once inside the NVTX range "SHAPE.NAME" that Nsight's --nvtx-include selects."""
    for name, fn in runs.items():
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(f"{shape}.{name}")
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def main():
    shapes = sys.argv[1:] or DEFAULT_SHAPES
    fa3 = fa3_shim.load(os.environ["FLASHATTN_PROFILE_FA3"]) if os.environ.get("FLASHATTN_PROFILE_FA3") else None
    for shape in shapes:
        d, causal, s = parse(shape)
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out = torch.empty_like(q)
        runs = {}
        for kernel in ("sm80", "sm90"):
            def ours(kernel=kernel):
                with abi.overrides(f"forward_kernel={kernel}"):
                    abi.call_forward(abi.make_fwd_params(q, k, v, out, causal=causal, backend=abi.BACKEND_CUDA,
                                                         stream=torch.cuda.current_stream().cuda_stream))
            runs[f"ours_{kernel}"] = ours
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            runs[name] = sdpa
        if fa3 is not None:
            out3 = torch.empty_like(q)
            runs["fa3"] = fa3_shim.forward_fn(fa3, q, k, v, out3, causal)[0]
        run_in_nvtx_ranges(shape, runs)
        print(f"{shape}: b={b} s={s} h={h} d={d} causal={causal}: ran {', '.join(runs)}", flush=True)


if __name__ == "__main__":
    main()
