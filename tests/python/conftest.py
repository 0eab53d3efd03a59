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
