"""The Rust part of the package build (pyproject.toml holds the rest).

setuptools-rust runs ``cargo`` on the root crate (``Cargo.toml``: the ``cdylib`` whose build.rs
compiles the kernels to PTX and cubins) and puts ``libxla_gpu_kernels.so`` into the
``xla_gpu_kernels`` package. The library has no Python bindings (``Binding.NoBinding``):
``xla_gpu_kernels._library`` loads it with ctypes, so its file name carries no Python version and
the wheel is tagged ``py3-none-<platform>``.
"""

import os
from pathlib import Path

from setuptools import setup
from setuptools_rust import Binding, RustExtension, Strip, build_rust
from wheel.bdist_wheel import bdist_wheel

LIBRARY_NAME = "libxla_gpu_kernels.so"


def pinned_ptxas() -> str | None:
    """The ptxas of the ``nvidia-cuda-nvcc`` build requirement (build.rs checks its release)."""
    try:
        import nvidia.cu13  # noqa: PLC0415 (a build requirement, present only while building)
    except ImportError:
        return None
    for root in nvidia.cu13.__path__:
        candidate = Path(root) / "bin" / "ptxas"
        if candidate.is_file():
            return str(candidate)
    return None


class BuildRust(build_rust):
    """Names the library ``libxla_gpu_kernels.so`` (not ``*.cpython-3XX-*.so``): it is no
    extension module, and one file serves every Python."""

    def get_dylib_ext_path(self, ext, target_fname):
        return str(Path(super().get_dylib_ext_path(ext, target_fname)).with_name(LIBRARY_NAME))


class BdistWheel(bdist_wheel):
    """``py3-none-<platform>``: any Python 3 (``requires-python`` says 3.10+), no Python ABI."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


if "XGK_BUILD_PTXAS" not in os.environ and (ptxas := pinned_ptxas()):
    os.environ["XGK_BUILD_PTXAS"] = ptxas

setup(
    rust_extensions=[
        RustExtension(
            "xla_gpu_kernels.libxla_gpu_kernels",
            path="Cargo.toml",
            binding=Binding.NoBinding,
            strip=Strip.All,
        )
    ],
    cmdclass={"build_rust": BuildRust, "bdist_wheel": BdistWheel},
)
