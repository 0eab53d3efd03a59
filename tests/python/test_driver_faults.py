"""Faults stay errors: with a CUDA driver that lacks entry points, or whose cuInit fails, every CUDA
call of the C API (the torch ops' path) returns an error naming the cause, every time, and the
process keeps working (a CPU call right after computes). Each case runs in a fresh process whose
`libcuda.so` is a stand-in built here with the C compiler."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, sys.argv[1])
    from xla_gpu_kernels import _capi
    lib = _capi.library()
    a = (ctypes.c_float * 4)(1, 2, 3, 4)
    out = (ctypes.c_float * 4)()
    dims = (ctypes.c_int64 * 1)(4)
    descs = (_capi.Tensor * 3)()
    for i, p in enumerate((a, a, out)):
        descs[i] = _capi.Tensor(ctypes.cast(p, ctypes.c_void_p), 11, 1, dims)
    err = ctypes.create_string_buffer(1024)
    for _ in range(3):
        print("cuda", lib.xgk_simple_add(1, None, descs, err, 1024), err.value.decode())
    print("cpu", lib.xgk_simple_add(0, None, descs, err, 1024), list(out))
""")

# Every entry point the library checks for, returning success; cuInit's result is CUINIT.
FAKE_DRIVER = textwrap.dedent("""
    #define OK(name) int name(void) { return 0; }
    int cuInit(unsigned int flags) { (void)flags; return CUINIT; }
    int cuGetErrorString(int e, const char **s) { (void)e; *s = "stand-in driver: no device"; return 0; }
    int cuGetErrorName(int e, const char **s) { (void)e; *s = "CUDA_ERROR_NO_DEVICE"; return 0; }
    OK(cuDeviceGet) OK(cuDeviceGetAttribute) OK(cuDevicePrimaryCtxRetain) OK(cuCtxGetCurrent)
    OK(cuCtxGetDevice) OK(cuCtxGetId) OK(cuCtxPushCurrent_v2) OK(cuCtxPopCurrent_v2) OK(cuStreamGetCtx)
    OK(cuPointerGetAttribute)
    OK(cuModuleLoadData) OK(cuModuleGetFunction) OK(cuFuncSetAttribute)
    OK(cuOccupancyMaxActiveBlocksPerMultiprocessor) OK(cuLaunchKernel) OK(cuMemAllocAsync) OK(cuMemFreeAsync)
    OK(cuDriverGetVersion) OK(cuLaunchKernelEx) OK(cuOccupancyMaxActiveClusters)
""")


def build_driver(tmp_path, source, defines=()):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "these tests build a stand-in libcuda.so and need a C compiler (cc)"
    src = tmp_path / "fake.c"
    src.write_text(source)
    subprocess.run([cc, "-shared", "-fPIC", *defines, "-o", str(tmp_path / "libcuda.so"), str(src)], check=True)
    return tmp_path


def run_child(driver_dir):
    env = dict(os.environ, LD_LIBRARY_PATH=str(driver_dir))
    p = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "python")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "panic" not in p.stderr, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "cpu 0 [2.0, 4.0, 6.0, 8.0]", lines
    return lines[:-1]


@pytest.mark.parametrize("case", ["only cuInit", "cuInit fails"])
def test_unusable_driver_gives_errors_and_the_process_goes_on(tmp_path, case):
    if case == "only cuInit":
        driver = build_driver(tmp_path, "int cuInit(unsigned int f) { (void)f; return 0; }\n")
        want = "the CUDA driver cannot be used: libcuda has no entry point cuGetErrorString"
    else:
        driver = build_driver(tmp_path, FAKE_DRIVER, ["-DCUINIT=100"])
        want = "the CUDA driver cannot be used: CUDA error in cuInit"
    lines = run_child(driver)
    assert len(lines) == 3
    for line in lines:
        assert line.startswith("cuda 2 " + want), line
