#!/usr/bin/env bash
# The wheel as a user gets it: builds it (scripts/build_wheel.sh), installs it into a fresh
# virtual environment with JAX (CPU) and torch, and runs the README's JAX and torch quick starts
# from a folder outside the checkout with no variable of ours set (no XLA_GPU_KERNELS_LIB, no
# PYTHONPATH): the package must find its own library.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build_wheel.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q dist/xla_gpu_kernels-*.whl "jax[cpu]==0.10.2" "jaxlib==0.10.2" "torch==2.11.0"
# The quick starts and the main example, as the README shows them: the first python block under
# each heading.
for section in "Quick start: JAX" "Quick start: torch" "Main example: a serving step"; do
  file="$work/snippet_${section//[^A-Za-z]/_}.py"
  python3 - "$section" "$file" <<'PYEOF'
import re, sys
readme = open("README.md").read()
section, out = sys.argv[1], sys.argv[2]
body = readme.split(f"## {section}\n", 1)[1]
code = re.search(r"```python\n(.*?)```", body, re.S).group(1)
open(out, "w").write(code + "\nprint('snippet ok:', __import__('xla_gpu_kernels').version())\n")
PYEOF
  echo "== README, $section (fresh venv, from $work)"
  (cd "$work" && env -u XLA_GPU_KERNELS_LIB -u PYTHONPATH -u JAX_PLATFORMS -u XGK_TORCH_KERNELS \
     "$work/venv/bin/python" "$file")
done
# The library the package loaded is the wheel's own copy.
(cd "$work" && env -u XLA_GPU_KERNELS_LIB -u PYTHONPATH "$work/venv/bin/python" -c '
import xla_gpu_kernels, sys
path = xla_gpu_kernels.library_path()
assert "site-packages" in str(path), path
print("library:", path)')
