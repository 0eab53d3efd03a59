#!/usr/bin/env bash
# Installs what building and testing need, idempotently: the pinned nightly with its components
# (rust-toolchain.toml) and a Python venv (.venv) with python/requirements-ci.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain install >/dev/null   # no argument: reads rust-toolchain.toml
rustc --version
if [ ! -x .venv/bin/python ] || ! cmp -s python/requirements-ci.txt .venv/requirements-ci.txt; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r python/requirements-ci.txt
  cp python/requirements-ci.txt .venv/requirements-ci.txt
fi
