"""FlashAttention-3 through bench/fa3/fa3_shim.cu (built by bench/fa3/build.sh): calls on torch
tensors in the library's layout, (batch, seqlen, heads, d) with a contiguous last dim, bf16."""
import ctypes

import torch


def load(path):
    lib = ctypes.CDLL(path)
    lib.fa3_forward.restype = lib.fa3_backward.restype = ctypes.c_int
    return lib


def _strides(*tensors):
    values = [t.stride(i) for t in tensors for i in (0, 1, 2)]
    return (ctypes.c_longlong * len(values))(*values)


def _once(run, name):
    err = run()
    torch.cuda.synchronize()
    if err:
        raise RuntimeError(f"{name}: " + ("head dim not built" if err == -1 else f"CUDA error {err}"))
    return run


def forward_fn(lib, q, k, v, out, causal):
    """FlashAttention-3's forward into out; returns (run, lse), run once (an error raises here)."""
    b, sq, h, d = q.shape
    lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
    counter = torch.zeros(1, device="cuda", dtype=torch.int32)
    strides = _strides(q, k, v, out)
    args = [ctypes.c_void_p(t.data_ptr()) for t in (q, k, v, out, lse, counter)]
    args += [ctypes.c_int(x) for x in (b, sq, k.shape[1], h, k.shape[2], d)]
    args += [strides, ctypes.c_int(int(causal)), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)]
    forward = lib.fa3_forward
    # args hold addresses only: the closure keeps lse and the counter alive as long as the call lives
    # (the caller may drop lse; the kernel still writes it).
    run = _once(lambda keep=(lse, counter): forward(*args), "fa3_forward")
    return run, lse


def backward_fn(lib, q, k, v, out, lse, dout, grads, causal, deterministic):
    """FlashAttention-3's backward of its own forward (out, lse) into grads (dq, dk, dv); run once. run
    holds every tensor it reads or writes (args are addresses only)."""
    b, sq, h, d = q.shape
    dq, dk, dv = grads
    strides = _strides(q, k, v, out, dout, dq, dk, dv)
    args = [ctypes.c_void_p(t.data_ptr()) for t in (dout, q, k, v, out, lse, dq, dk, dv)]
    args += [ctypes.c_int(x) for x in (b, sq, k.shape[1], h, k.shape[2], d)]
    args += [strides, ctypes.c_int(int(causal)), ctypes.c_int(int(deterministic)),
             ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)]
    backward = lib.fa3_backward
    return _once(lambda keep=(dout, q, k, v, out, lse, *grads): backward(*args), "fa3_backward")


def own_backward_fns(lib, q, k, v, dout, causal, modes=(False,)):
    """FlashAttention-3's backward of its own forward on (q, k, v): {deterministic: run} for each of
    modes, each run once here in that order, and the gradients (dq, dk, dv) they all write, which
    then hold the last mode's."""
    out = torch.empty_like(q)
    lse = forward_fn(lib, q, k, v, out, causal)[1]
    grads = [torch.empty_like(t) for t in (q, k, v)]
    return {det: backward_fn(lib, q, k, v, out, lse, dout, grads, causal, det) for det in modes}, grads
