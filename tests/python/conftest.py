"""pytest setup: import the in-tree package; GPU tests are marked `gpu` and deselected in CI
(`-m "not gpu"`), never silently skipped."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (run with -m gpu on the GPU machine)")
    # scripts/mutation_check.sh: XGK_MUTANT=<fault> makes the op wrong on purpose (tests/python/mutants.py).
    if os.environ.get("XGK_MUTANT"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import mutants
        print(f"XGK_MUTANT={mutants.install_from_env()}: the op is wrong on purpose")
