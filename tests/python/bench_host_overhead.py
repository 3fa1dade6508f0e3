"""Per-call host overhead of flashattn's Python binding against torch SDPA on small shapes.

    python tests/python/bench_host_overhead.py [--device cuda]

On shapes this small the attention itself costs next to nothing, so the times are what each call
spends in Python, argument parsing, allocation and dispatch. "C call" is the bare ctypes call of
fa_forward with a prebuilt struct (validation + the kernel), for reference. Reports the best of
several repeats, in microseconds per call. Numbers for docs/python.md come from here.
"""

import argparse
import timeit

import torch
import torch.nn.functional as F

import flashattn
from flashattn import _ops


def best_us(fn, number, repeat=7, synchronize=None):
    def run():
        for _ in range(number):
            fn()
        if synchronize:
            synchronize()

    run()  # warm up
    return min(timeit.repeat(run, number=1, repeat=repeat)) / number * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    device = args.device
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    sync = torch.cuda.synchronize if device == "cuda" else None
    print(f"torch {torch.__version__}, flashattn {flashattn.__version__}, {device} {dtype}, "
          f"CPU threads torch {torch.get_num_threads()} / flashattn {flashattn.get_num_threads()}")
    print(f"{'shape (b, s, h, d)':22s} {'sdpa fwd':>9s} {'fa fwd':>9s} {'C call':>9s} {'sdpa f+b':>9s} {'fa f+b':>9s}")
    for (batch, seqlen, heads, head_dim), scale in (((1, 1, 1, 64), 1), ((1, 16, 8, 64), 4), ((2, 128, 8, 64), 40)):
        number = max(10, args.number // scale)
        q, k, v = (torch.randn(batch, seqlen, heads, head_dim, dtype=dtype, device=device) for _ in range(3))
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # SDPA's (b, h, s, d) view of the same data
        sdpa_fwd = best_us(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), number,
                           synchronize=sync)
        fa_fwd = best_us(lambda: flashattn.flash_attn_func(q, k, v, causal=True), number, synchronize=sync)

        out, lse = _ops._forward_outputs(q, v, None)
        params = _ops._fwd_params(q, k, v, out, lse, None, None, None, None, None, None, 0, 0, 0.0, head_dim ** -0.5,
                                  True, -1, -1, 0.0, None)
        c_call = best_us(lambda: _ops.lib.forward(params), number, synchronize=sync)

        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        qtg, ktg, vtg = (t.transpose(1, 2) for t in (qg, kg, vg))
        grad = torch.ones_like(qt)
        try:
            sdpa_fb = best_us(lambda: F.scaled_dot_product_attention(qtg, ktg, vtg, is_causal=True).backward(grad),
                              max(5, number // 4), synchronize=sync)
            fa_fb = best_us(lambda: flashattn.flash_attn_func(qg, kg, vg, causal=True).backward(grad.transpose(1, 2)),
                            max(5, number // 4), synchronize=sync)
        except flashattn.FlashAttnError:  # e.g. no CUDA backward in this build
            sdpa_fb = fa_fb = float("nan")
        print(f"{str((batch, seqlen, heads, head_dim)):22s} {sdpa_fwd:9.1f} {fa_fwd:9.1f} {c_call:9.1f} "
              f"{sdpa_fb:9.1f} {fa_fb:9.1f}")


if __name__ == "__main__":
    main()
