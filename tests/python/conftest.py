"""pytest setup: import the in-tree package (or, with XGK_TEST_INSTALLED=1, the installed wheel:
its own library, no XLA_GPU_KERNELS_LIB); GPU tests are marked `gpu` and deselected in CI
(`-m "not gpu"`), never silently skipped."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = os.environ.get("XGK_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))
if INSTALLED:
    import xla_gpu_kernels

    assert "XLA_GPU_KERNELS_LIB" not in os.environ, "XGK_TEST_INSTALLED tests the wheel's own library"
    assert Path(xla_gpu_kernels.__file__).resolve().parent != ROOT / "python" / "xla_gpu_kernels", (
        "XGK_TEST_INSTALLED=1 but the in-tree package was imported"
    )
    print(f"testing the installed package {xla_gpu_kernels.__file__}: {xla_gpu_kernels.version()}")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (run with -m gpu on the GPU machine)")
    # scripts/mutation_check.sh: XGK_MUTANT=<fault> makes the op wrong on purpose (tests/python/mutants.py).
    if os.environ.get("XGK_MUTANT"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import mutants
        print(f"XGK_MUTANT={mutants.install_from_env()}: the op is wrong on purpose")
