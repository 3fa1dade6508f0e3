"""One call of each backward implementation on a few benchmark shapes, for Nsight Compute to profile.

    ncu --clock-control none --section ... python3 bench/profile_backward.py [SHAPE ...]

A shape is "d128n16k" style (as bench/profile_forward.py: head dim, 'c' causal or 'n' not, seqlen
in k; batch * seqlen = 16k tokens, hidden 2048, bf16, as bench/gpu_backward.py), or with a value
head dim of its own "d192v128c4k" (16 heads, as bench/gpu_features.py; FA2 has no such shape and is
left out there), or with grouped K/V heads "d256c1kg32x4" (32 query heads, 4 K/V heads; the torch
backends get them through enable_gqa). Each shape runs our
backward with each main kernel forced (overrides backward_kernel=sm80 / sm90; the library's
finishing kernels run too), deterministic mode as the planner picks it (ours_det: the ordered dQ where the
head dim has it, else chunks) and torch SDPA's FA2 and cuDNN backwards, once each after an
unprofiled warm-up, inside NVTX ranges named after the shape and the implementation
(ncu --nvtx --nvtx-include "d128n16k.ours_sm90/" selects one). What the profile should answer for
the Hopper backward: whether its consumers wait on the producer (barrier stalls, the producer's
local-memory spills) or on their own products, at 1k and at 16k.

torch runs the SDPA backwards on its autograd thread, outside the NVTX ranges pushed here (ranges
are per thread): the NVTX filter catches ours only. $FLASHATTN_PROFILE_BWD_ONLY=fa2 runs just the
named implementations (comma-separated), for a second Nsight pass that selects by kernel name
(`--kernel-name regex:flash_bwd`: FA2's dot_do_o, main and convert_dq kernels; warm-up and timed
call both appear), or =cudnn for a pass that profiles every kernel (the set-up's forwards, then
cuDNN's backward kernels, warm-up and timed call). `scripts/gpu.py profile backward` runs the
passes that its --impls name. With FLASHATTN_PROFILE_FA3=SO (the shim bench/fa3/build.sh builds)
FlashAttention-3's backward of its own forward runs too, as "SHAPE.fa3" (MHA and GQA shapes with
equal head dims; its kernels run on this thread, so the NVTX filter catches them).
"""
import os
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import abi  # noqa: E402
from profile_forward import parse, run_in_nvtx_ranges  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "fa3"))
import fa3 as fa3_shim  # noqa: E402

DEFAULT_SHAPES = ["d128n1k", "d128n16k", "d64n1k", "d256n4k"]


class BackwardProblem:
    """One benchmark shape's backward, ready to call: inputs (b, s, h, d) bf16, the forward's out
    and lse, gradient buffers and the fa_bwd_params over them (`params`; `abi.lib.backward`)."""

    def __init__(self, shape):
        value_dim = re.fullmatch(r"d(\d+)v(\d+)([cn]\d+k)", shape)
        grouped = re.fullmatch(r"(d\d+[cn]\d+k)g(\d+)x(\d+)", shape)
        if value_dim:
            self.d, self.causal, self.s = parse(f"d{value_dim.group(1)}{value_dim.group(3)}")
            self.dv, self.h = int(value_dim.group(2)), 16
        else:
            self.d, self.causal, self.s = parse(grouped.group(1) if grouped else shape)
            self.dv, self.h = self.d, 2048 // self.d
        self.h_k = self.h
        if grouped:
            self.h, self.h_k = int(grouped.group(2)), int(grouped.group(3))
        self.b = 16384 // self.s
        def rows(width, heads):
            return torch.randn(self.b, self.s, heads, width, device="cuda", dtype=torch.bfloat16)
        self.q, self.dout = rows(self.d, self.h), rows(self.dv, self.h)
        self.k, self.v = rows(self.d, self.h_k), rows(self.dv, self.h_k)
        self.out, self.lse, _ = abi.forward(self.q, self.k, self.v, causal=self.causal)
        self.grads = [torch.empty_like(t) for t in (self.q, self.k, self.v)]
        kw = dict(causal=self.causal, backend=abi.BACKEND_CUDA, stream=torch.cuda.current_stream().cuda_stream)
        self.params = abi.make_bwd_params(self.q, self.k, self.v, self.out, self.lse, self.dout, *self.grads, **kw)
        self.det_params = abi.make_bwd_params(self.q, self.k, self.v, self.out, self.lse, self.dout, *self.grads,
                                              deterministic=True, **kw)


def main():
    shapes = sys.argv[1:] or DEFAULT_SHAPES
    fa3 = fa3_shim.load(os.environ["FLASHATTN_PROFILE_FA3"]) if os.environ.get("FLASHATTN_PROFILE_FA3") else None
    for shape in shapes:
        problem = BackwardProblem(shape)
        d, causal, s, b, h = problem.d, problem.causal, problem.s, problem.b, problem.h
        q, k, v, dout, params = problem.q, problem.k, problem.v, problem.dout, problem.params
        runs = {}
        for kernel in ("sm80", "sm90"):
            def ours(kernel=kernel):
                with abi.overrides(f"backward_kernel={kernel}"):
                    abi.lib.check(abi.lib.backward(params))
            runs[f"ours_{kernel}"] = ours

        def ours_det(det_params=problem.det_params):  # deterministic mode, the planner's dQ scheme
            with abi.overrides("backward_kernel=sm90"):
                abi.lib.check(abi.lib.backward(det_params))
        runs["ours_det"] = ours_det
        leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
        dout_t = dout.transpose(1, 2)
        sdpa_backends = (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
        for name, backend in sdpa_backends if problem.dv == d else sdpa_backends[1:]:
            with sdpa_kernel([backend]):
                sdpa_out = F.scaled_dot_product_attention(*leaves, is_causal=causal,
                                                          enable_gqa=problem.h_k != h)

            def sdpa(sdpa_out=sdpa_out):
                torch.autograd.grad(sdpa_out, leaves, dout_t, retain_graph=True)
            runs[name] = sdpa
        if fa3 is not None and problem.dv == d:
            runs["fa3"] = fa3_shim.own_backward_fns(fa3, q, k, v, dout, causal)[0][False]
        only = os.environ.get("FLASHATTN_PROFILE_BWD_ONLY")
        if only:  # e.g. "fa2": a pass that filters by kernel name instead of NVTX (see the docstring)
            runs = {name: fn for name, fn in runs.items() if name in only.split(",")}
        run_in_nvtx_ranges(shape, runs)
        print(f"{shape}: b={b} s={s} h={h} h_k={problem.h_k} d={d} d_v={problem.dv} causal={causal}: "
              f"ran {', '.join(runs)}", flush=True)


if __name__ == "__main__":
    main()
