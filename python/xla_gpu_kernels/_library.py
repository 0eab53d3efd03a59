"""Finding and loading the shared library (once per process)."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

LIBRARY_ENV_VAR = "XLA_GPU_KERNELS_LIB"
LIBRARY_NAME = "libxla_gpu_kernels.so"

_lock = threading.Lock()
_loaded: tuple[Path, ctypes.CDLL] | None = None


def library_path(path: str | os.PathLike | None = None) -> Path:
    """Where the shared library is: ``path``, ``$XLA_GPU_KERNELS_LIB``, the packaged copy, or a
    development checkout's ``target/release`` / ``target/debug`` (in that order)."""
    candidates: list[Path] = []
    if path is not None:
        candidates.append(Path(path))
    elif os.environ.get(LIBRARY_ENV_VAR):
        candidates.append(Path(os.environ[LIBRARY_ENV_VAR]))
    else:
        here = Path(__file__).resolve().parent
        candidates.append(here / LIBRARY_NAME)
        repo = here.parent.parent
        candidates += [repo / "target" / "release" / LIBRARY_NAME, repo / "target" / "debug" / LIBRARY_NAME]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"xla_gpu_kernels: shared library not found (tried {tried}). Build it with "
        f"`cargo build --release`, or set {LIBRARY_ENV_VAR} to its path."
    )


def load_library(path: str | os.PathLike | None = None) -> ctypes.CDLL:
    """Loads the library once; later calls return the same handle (a different explicit path
    after the first load is an error, since XLA keeps the first one's function pointers)."""
    global _loaded
    with _lock:
        if _loaded is not None:
            if path is not None and Path(path).resolve() != _loaded[0]:
                raise RuntimeError(f"xla_gpu_kernels: already loaded from {_loaded[0]}, cannot switch to {path}")
            return _loaded[1]
        resolved = library_path(path)
        lib = ctypes.CDLL(str(resolved))
        lib.xgk_version.restype = ctypes.c_char_p
        _loaded = (resolved, lib)
        return lib


def version() -> str:
    """``xla-gpu-kernels X.Y.Z (ptx sm_XX)`` of the loaded library."""
    return load_library().xgk_version().decode()
