"""The GPU's DRAM ceilings for a kernel that only reads, against the copy bandwidth that
`peers.py` reports fractions of.

Decode reads its KV once and writes next to nothing, so its ceiling is the read bandwidth, not the
copy bandwidth (a copy turns the bus around between reads and writes). This script measures both
on one GPU, in one process: a 1 GiB device-to-device copy (bytes read + written, as `peers.py`),
and a read-only kernel over 0.5-4 GiB (CuPy raw kernel: 16-byte loads, a grid-stride loop over a
grid of 4-16 blocks per multiprocessor, the largest more than fit at once; one word stored per
thread), medians of CUDA-event timings. The ratio read/copy bounds what any decode kernel (ours or
FlashInfer's) can reach on the large cells, where both already read at 100-105 % of the copy
bandwidth.

    python3 benchmarks/read_ceiling.py [--out FILE.json]
"""

import argparse
import json
import statistics

import cupy as cp

READ_KERNEL = cp.RawKernel(
    r"""
extern "C" __global__ void read_all(const uint4* __restrict__ src, unsigned long long n, unsigned* out) {
    unsigned acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint4 v = __ldcs(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    out[(unsigned long long)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
""",
    "read_all",
)


def time_ms(fn, iters=30, warmup=5):
    for _ in range(warmup):
        fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON result file")
    args = ap.parse_args()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    sms = props["multiProcessorCount"]
    n = 1 << 30
    a = cp.random.randint(0, 255, n, dtype=cp.uint8)
    b = cp.empty_like(a)
    copy_gbs = 2 * n / (time_ms(lambda: b.data.copy_from_device_async(a.data, n)) * 1e-3) / 1e9
    del a, b
    result = {"gpu": props["name"].decode(), "multiprocessors": sms, "copy_gbs": copy_gbs, "read": []}
    print(f"{result['gpu']}: copy {copy_gbs:.0f} GB/s")
    for gib in (0.5, 1, 2, 4):
        nbytes = int(gib * (1 << 30))
        src = cp.random.randint(0, 1 << 31, nbytes // 4, dtype=cp.int32)
        for blocks_per_sm, threads in ((4, 512), (8, 256), (16, 256)):
            grid = blocks_per_sm * sms
            out = cp.empty(grid * threads, dtype=cp.uint32)
            ms = time_ms(lambda: READ_KERNEL((grid,), (threads,), (src, cp.uint64(nbytes // 16), out)))
            gbs = nbytes / (ms * 1e-3) / 1e9
            row = {"gib": gib, "blocks_per_sm": blocks_per_sm, "threads": threads, "us": ms * 1e3, "gbs": gbs,
                   "of_copy": gbs / copy_gbs}
            result["read"].append(row)
            print(f"read {gib:4} GiB  grid {blocks_per_sm:2} x {threads} threads per SM: {ms * 1e3:8.1f} us "
                  f"{gbs:6.0f} GB/s = {100 * gbs / copy_gbs:5.1f} % of copy")
        del src
    best = max(r["gbs"] for r in result["read"])
    result["read_best_gbs"] = best
    print(f"best read {best:.0f} GB/s = {100 * best / copy_gbs:.1f} % of the copy bandwidth")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
