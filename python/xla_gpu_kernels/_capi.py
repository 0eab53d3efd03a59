"""The library's plain C API through ctypes, shared by the front ends: tensor descriptors, the
paged attention attributes, typed function signatures, and the workspace-size query.

Per-call cost matters here (a decode step calls attention once per layer), so what does not
change between calls is built once: signatures at load, attribute structs per attribute values,
descriptor arrays per (thread, shapes and dtypes), of which a call only rewrites the data pointers.
"""

from __future__ import annotations

import ctypes
import functools
import threading

from ._library import load_library

# XLA_FFI_DataType numbers by dtype name (numpy / JAX / torch names agree on these).
XLA_DTYPE = {
    "bool": 1, "int8": 2, "int32": 4, "int64": 5, "uint8": 6, "float16": 10, "float32": 11, "float64": 12,
    "bfloat16": 16, "float8_e5m2": 19, "float8_e4m3fn": 20,
}
PLATFORM_CPU, PLATFORM_CUDA = 0, 1
# `workspace_bytes` value that asks the library to allocate from the driver's pool per call.
ALLOCATE_WORKSPACE = ctypes.c_size_t(-1).value
ERR_LEN = 1024


class Tensor(ctypes.Structure):
    """``XgkTensor``."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class Attrs(ctypes.Structure):
    """``XgkPagedAttentionAttrs`` (``has_*`` = 0: not given)."""
    _fields_ = [("sm_scale", ctypes.c_float), ("has_sliding_window", ctypes.c_int32), ("sliding_window", ctypes.c_int64),
                ("has_soft_cap", ctypes.c_int32), ("soft_cap", ctypes.c_float), ("has_mask_value", ctypes.c_int32),
                ("mask_value", ctypes.c_float), ("has_k_scale", ctypes.c_int32), ("k_scale", ctypes.c_float),
                ("has_v_scale", ctypes.c_int32), ("v_scale", ctypes.c_float)]


_P = ctypes.c_void_p
_signatures_lock = threading.Lock()
_signed: set[int] = set()


def library() -> ctypes.CDLL:
    """The loaded library with the C API's signatures declared (once)."""
    lib = load_library()
    if id(lib) not in _signed:
        with _signatures_lock:
            if id(lib) not in _signed:
                tensors = ctypes.POINTER(Tensor)
                lib.xgk_simple_add.argtypes = [ctypes.c_int32, _P, tensors, ctypes.c_char_p, ctypes.c_size_t]
                lib.xgk_simple_add.restype = ctypes.c_int32
                lib.xgk_paged_attention.argtypes = [ctypes.c_int32, _P, tensors, ctypes.POINTER(Attrs), _P,
                                                    ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
                lib.xgk_paged_attention.restype = ctypes.c_int32
                lib.xgk_paged_attention_workspace_bytes.argtypes = [
                    ctypes.c_int32, tensors, ctypes.POINTER(Attrs), ctypes.POINTER(ctypes.c_uint64),
                    ctypes.c_char_p, ctypes.c_size_t]
                lib.xgk_paged_attention_workspace_bytes.restype = ctypes.c_int32
                lib.xgk_reload_settings.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
                lib.xgk_reload_settings.restype = ctypes.c_int32
                lib.xgk_torch_register.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_char_p,
                                                   ctypes.c_size_t]
                lib.xgk_torch_register.restype = ctypes.c_int32
                lib.xgk_launch_count.argtypes = []
                lib.xgk_launch_count.restype = ctypes.c_uint64
                _signed.add(id(lib))
    return lib


def check(code: int, err) -> None:
    """Raises the library's error: ValueError for invalid arguments, RuntimeError otherwise."""
    if code == 1:
        raise ValueError(err.value.decode())
    if code != 0:
        raise RuntimeError(err.value.decode())


_local = threading.local()


def error_buffer():
    """This thread's error message buffer."""
    buf = getattr(_local, "err", None)
    if buf is None:
        buf = _local.err = ctypes.create_string_buffer(ERR_LEN)
    return buf


def _build_descriptors(signature) -> ctypes.Array:
    """A descriptor array for ``signature`` (a tuple of (dtype code, shape) pairs), data pointers
    NULL; it keeps its dims arrays alive."""
    descs = (Tensor * len(signature))()
    dims_keep = []
    for i, (code, shape) in enumerate(signature):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        dims_keep.append(dims)
        descs[i] = Tensor(None, code, len(shape), dims)
    descs._dims_keep = dims_keep
    return descs


def descriptors(signature) -> ctypes.Array:
    """This thread's descriptor array for ``signature``, built once; callers set the ``data``
    fields before each call. Per thread, so concurrent calls never share one."""
    cache = getattr(_local, "descs", None)
    if cache is None:
        cache = _local.descs = {}
    descs = cache.get(signature)
    if descs is None:
        descs = cache[signature] = _build_descriptors(signature)
    return descs


@functools.lru_cache(maxsize=256)
def attrs(sm_scale=1.0, sliding_window=None, soft_cap=None, mask_value=None, k_scale=None, v_scale=None) -> Attrs:
    """The attribute struct for these values (shared, never mutated after creation)."""
    a = Attrs(sm_scale=float(sm_scale))
    if sliding_window is not None:
        a.has_sliding_window, a.sliding_window = 1, int(sliding_window)
    for name, value in (("soft_cap", soft_cap), ("mask_value", mask_value), ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None:
            setattr(a, "has_" + name, 1)
            setattr(a, name, float(value))
    return a


def paged_attention_signature(q_shape, q_dtype, kv_shape, kv_dtype, max_num_seqs, pages_per_seq):
    """The 7 (dtype code, shape) pairs of a paged attention call (inputs, then the output)."""
    q = (XLA_DTYPE[str(q_dtype)], tuple(int(d) for d in q_shape))
    s = int(max_num_seqs)
    meta = XLA_DTYPE["int32"]
    return (q, (XLA_DTYPE[str(kv_dtype)], tuple(int(d) for d in kv_shape)), (meta, (s,)),
            (meta, (s, int(pages_per_seq))), (meta, (s + 1,)), (meta, (1,)), q)


def paged_attention_workspace_bytes(device: int, signature, attributes: Attrs) -> int:
    """Bytes of workspace a call needs on CUDA device ``device`` (the library's own launch plan,
    for the device and its configured kernel choice); 0 for the CPU (``device`` < 0). Cached until
    the next `reload_settings`, when the library's choice may change."""
    return _workspace_bytes(device, signature, _attrs_key(attributes), _generation[0])


def _attrs_key(a: Attrs):
    return tuple(getattr(a, name) for name, _ in Attrs._fields_)


@functools.lru_cache(maxsize=1024)
def _workspace_bytes(device, signature, attrs_key, generation):
    del generation  # part of the cache key only
    if device < 0:
        return 0
    a = Attrs(*attrs_key)
    descs = _build_descriptors(signature)
    out = ctypes.c_uint64(0)
    err = ctypes.create_string_buffer(ERR_LEN)
    check(library().xgk_paged_attention_workspace_bytes(device, descs, ctypes.byref(a), ctypes.byref(out), err,
                                                        ERR_LEN), err)
    return int(out.value)


TORCH_KEYS = {1: "CPU", 2: "CUDA"}


def register_torch_kernels(torch_lib_dir: str) -> set:
    """Registers the library's native kernels of ``torch.ops.xla_gpu.*`` with the libtorch loaded
    from ``torch_lib_dir``; returns the dispatch keys registered ({"CPU", "CUDA"} or {"CPU"})."""
    keys = ctypes.c_uint32(0)
    err = ctypes.create_string_buffer(ERR_LEN)
    check(library().xgk_torch_register(torch_lib_dir.encode(), ctypes.byref(keys), err, ERR_LEN), err)
    return {name for bit, name in TORCH_KEYS.items() if keys.value & bit}


def launch_count() -> int:
    """Kernels the library has enqueued in this process (calls replayed from a CUDA graph or an XLA
    command buffer launch none)."""
    return int(library().xgk_launch_count())


_generation = [0]


def settings_generation() -> int:
    """Bumped by every `reload_settings` (keys per-call caches that depend on the settings)."""
    return _generation[0]


def reload_settings() -> None:
    """Makes the library re-read ``XGK_RPA_KERNEL`` / ``XGK_RPA_COPY_HINT`` (read once per process
    otherwise): for benchmarks that compare kernels in one process."""
    err = ctypes.create_string_buffer(ERR_LEN)
    check(library().xgk_reload_settings(err, ERR_LEN), err)
    _generation[0] += 1
