"""ctypes view of libflashattn's C ABI (include/flashattn/flashattn.h).

We bind the C ABI rather than compiling against torch's C++ headers, so one build of the library
serves every torch version. The structs below mirror the header field for field; `load()` checks
their size against the library's own `sizeof` (the _init functions write it into struct_size), so
a header change that is not mirrored here fails loudly at import instead of corrupting memory.
"""

import ctypes
import os
from pathlib import Path

# fa_dtype
FLOAT16, BFLOAT16, FLOAT32 = 0, 1, 2
# fa_backend
BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2
# fa_status values that mean "the caller passed something wrong" (1) or "not supported here" (2)
STATUS_INVALID_ARGUMENT, STATUS_UNSUPPORTED = 1, 2


class Tensor(ctypes.Structure):
    """fa_tensor: a (batch, seqlen, heads, head_dim) view, strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("batch_stride", ctypes.c_int64),
        ("row_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class FwdParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_heads_k", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("softmax_lse", ctypes.c_void_p),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("total_q", ctypes.c_int64),
        ("total_k", ctypes.c_int64),
        ("seqused_k", ctypes.c_void_p),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", ctypes.c_void_p),
        ("alibi_batch_stride", ctypes.c_int64),
        ("dropout_p", ctypes.c_float),
        ("rng_seed", ctypes.c_uint64),
        ("rng_offset", ctypes.c_uint64),
        ("attn_probs", ctypes.c_void_p),
        ("num_splits", ctypes.c_int32),
        ("backend", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        # appended after 0.1.0: paged K/V
        ("block_table", ctypes.c_void_p),
        ("block_table_batch_stride", ctypes.c_int64),
        ("max_blocks_per_seq", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("num_blocks", ctypes.c_int32),
        # appended after the block table: dropout's {seed, offset} read from memory when the work runs
        ("rng_state", ctypes.c_void_p),
        # appended after rng_state: a value head dim unlike the query's (0 = head_dim), learnable sinks
        ("head_dim_v", ctypes.c_int32),
        ("learnable_sink", ctypes.c_void_p),
    ]


class BwdParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("fwd", FwdParams),
        ("dout", Tensor),
        ("dq", Tensor),
        ("dk", Tensor),
        ("dv", Tensor),
        ("deterministic", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        # appended with head_dim_v and learnable_sink: the sinks' gradient (fp32, nheads)
        ("dsink", ctypes.c_void_p),
    ]


class KvCacheParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("fwd", FwdParams),
        ("batch_cache", ctypes.c_int32),
        ("cache_seqlens", ctypes.c_void_p),
        ("cache_batch_idx", ctypes.c_void_p),
        ("cache_leftpad", ctypes.c_void_p),
        ("k_new", Tensor),
        ("v_new", Tensor),
        ("seqlen_new", ctypes.c_int32),
        ("rotary_cos", ctypes.c_void_p),
        ("rotary_sin", ctypes.c_void_p),
        ("rotary_dim", ctypes.c_int32),
        ("seqlen_rotary", ctypes.c_int32),
        ("rotary_interleaved", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
    ]


class LseView(ctypes.Structure):
    """fa_lse_view: a strided fp32 (batch, heads, rows) array."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("batch_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
        ("row_stride", ctypes.c_int64),
    ]


class CombineParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_splits", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("out_partial", Tensor),
        ("out_partial_split_stride", ctypes.c_int64),
        ("lse_partial", LseView),
        ("lse_partial_split_stride", ctypes.c_int64),
        ("dtype", ctypes.c_int),
        ("out", Tensor),
        ("lse", LseView),
        ("backend", ctypes.c_int),
        ("stream", ctypes.c_void_p),
    ]


class FlashAttnError(RuntimeError):
    """A call into libflashattn failed; `status` is the fa_status name, the message is fa_last_error()."""

    def __init__(self, status, message):
        super().__init__(f"flashattn: {message} ({status})")
        self.status, self.message = status, message


class FlashAttnArgumentError(FlashAttnError, ValueError):
    """The library rejected an argument (FA_ERROR_INVALID_ARGUMENT), e.g. the contents of cu_seqlens:
    a RuntimeError like every library error, and a ValueError like every other bad input."""


def _candidate_paths():
    override = os.environ.get("FLASHATTN_LIBRARY")
    if override:
        return [Path(override)]
    here = Path(__file__).resolve().parent
    return [here / "lib" / "libflashattn.so", here / "libflashattn.so"]


class Library:
    """The loaded shared library with typed entry points, looked up once."""

    def __init__(self, path):
        self.path = str(path)
        lib = ctypes.CDLL(self.path)  # CDLL releases the GIL during calls: the CPU backend threads freely
        fwd_ptr, bwd_ptr = ctypes.POINTER(FwdParams), ctypes.POINTER(BwdParams)
        kv_ptr, combine_ptr = ctypes.POINTER(KvCacheParams), ctypes.POINTER(CombineParams)

        def bind(name, restype, *argtypes, optional=False):
            # optional: a function a library built from an earlier commit may lack (A/B benchmarks
            # load such builds); calling it then raises.
            if optional and not hasattr(lib, name):
                return _missing(name, self.path)
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, list(argtypes)
            return fn

        self.forward = bind("fa_forward", ctypes.c_int, fwd_ptr)
        self.varlen_forward = bind("fa_varlen_forward", ctypes.c_int, fwd_ptr)
        self.backward = bind("fa_backward", ctypes.c_int, bwd_ptr)
        self.varlen_backward = bind("fa_varlen_backward", ctypes.c_int, bwd_ptr)
        self.bwd_workspace_size = bind("fa_bwd_workspace_size", ctypes.c_size_t, bwd_ptr)
        self.forward_workspace_size = bind("fa_forward_workspace_size", ctypes.c_size_t, fwd_ptr)
        self.forward_with_workspace = bind("fa_forward_with_workspace", ctypes.c_int, fwd_ptr, ctypes.c_void_p,
                                           ctypes.c_size_t)
        self.varlen_forward_with_workspace = bind("fa_varlen_forward_with_workspace", ctypes.c_int, fwd_ptr,
                                                  ctypes.c_void_p, ctypes.c_size_t)
        self.last_error = bind("fa_last_error", ctypes.c_char_p)
        self.status_name = bind("fa_status_name", ctypes.c_char_p, ctypes.c_int)
        self.version_string = bind("fa_version_string", ctypes.c_char_p)
        self.cuda_available = bind("fa_cuda_available", ctypes.c_int)
        self.set_num_threads = bind("fa_set_num_threads", None, ctypes.c_int)
        self.get_num_threads = bind("fa_get_num_threads", ctypes.c_int)
        self.kvcache_forward = bind("fa_kvcache_forward", ctypes.c_int, kv_ptr)
        self.kvcache_workspace_size = bind("fa_kvcache_workspace_size", ctypes.c_size_t, kv_ptr)
        self.combine = bind("fa_combine", ctypes.c_int, combine_ptr)
        self.check_device_faults = bind("fa_check_device_faults", ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                        optional=True)
        # Tests and benchmarks only: force the library's own choices (FLASHATTN_OVERRIDES's syntax, b"" = none).
        self.set_overrides = bind("fa_set_overrides", ctypes.c_int, ctypes.c_char_p, optional=True)
        # The _sized initialisers: the plain fa_*_params_init symbols initialise earlier layouts.
        fwd_init = bind("fa_fwd_params_init_sized", None, fwd_ptr, ctypes.c_size_t)
        bwd_init = bind("fa_bwd_params_init_sized", None, bwd_ptr, ctypes.c_size_t)
        kv_init = bind("fa_kvcache_params_init_sized", None, kv_ptr, ctypes.c_size_t)
        combine_init = bind("fa_combine_params_init", None, combine_ptr)

        # Defaults exactly as the library sets them; the layout check guards everything below.
        self.fwd_defaults, self.bwd_defaults = FwdParams(), BwdParams()
        self.kv_defaults, self.combine_defaults = KvCacheParams(), CombineParams()
        fwd_init(ctypes.byref(self.fwd_defaults), ctypes.sizeof(FwdParams))
        bwd_init(ctypes.byref(self.bwd_defaults), ctypes.sizeof(BwdParams))
        kv_init(ctypes.byref(self.kv_defaults), ctypes.sizeof(KvCacheParams))
        combine_init(ctypes.byref(self.combine_defaults))
        for struct, name in ((self.fwd_defaults, "fa_fwd_params"), (self.bwd_defaults, "fa_bwd_params"),
                             (self.kv_defaults, "fa_kvcache_params"), (self.combine_defaults, "fa_combine_params")):
            if struct.struct_size != ctypes.sizeof(struct):
                raise ImportError(
                    f"flashattn: {self.path} has sizeof({name}) = {struct.struct_size} but the Python "
                    f"binding expects {ctypes.sizeof(struct)}: the package and the library are out of sync"
                )
        # Same size but shuffled fields would pass the check above: spot-check where the defaults land.
        d = self.fwd_defaults
        if (d.window_left, d.window_right, d.num_splits, d.backend, d.dtype) != (-1, -1, 1, BACKEND_AUTO, BFLOAT16):
            raise ImportError(f"flashattn: {self.path}: fa_fwd_params field layout differs from the Python binding")
        self.fwd_struct_size = self.fwd_defaults.struct_size
        self.bwd_struct_size = self.bwd_defaults.struct_size
        self.kv_struct_size = self.kv_defaults.struct_size
        self.combine_struct_size = self.combine_defaults.struct_size

    def check(self, status):
        """Raise FlashAttnError for a failed call (status != FA_OK)."""
        if status != 0:
            message = self.last_error().decode(errors="replace")
            error = FlashAttnArgumentError if status == STATUS_INVALID_ARGUMENT else FlashAttnError
            raise error(self.status_name(status).decode(), message)


def _missing(name, path):
    def call(*_args):
        raise FlashAttnError("FA_ERROR_UNSUPPORTED", f"{path} has no {name} (a build of an earlier commit)")
    return call


def load():
    tried = []
    for path in _candidate_paths():
        if path.is_file():
            return Library(path)
        tried.append(str(path))
    raise ImportError(
        "flashattn: libflashattn.so not found (looked in " + ", ".join(tried) + "). Install the package "
        "with `pip install .` from the repository, or point FLASHATTN_LIBRARY at a built libflashattn.so."
    )
