#!/usr/bin/env bash
# Session 23 call 1 (H200): simple_add's experiment variants (read-only loads, without L1
# allocation, streaming stores) against jnp.add, each in its own process; XLA's own PTX of the
# add; ncu's duration and DRAM bytes per kernel at 2^24 f32; the library's host cost per call
# with the tensor maps cached (criterion host_overhead).
set -uo pipefail
cd "$(dirname "$0")/.."
tar -xJf .carry/gpu.tar.xz
export XLA_GPU_KERNELS_LIB=$PWD/.gpu/libxla_gpu_kernels.so PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
s() { local name=$1 lim=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
s host-overhead 300 .gpu/bin/host_overhead --bench --noplot
grep -E "^host_overhead|time:" $R/host-overhead.log | paste - - | awk '{print $1, $(NF-4), $(NF-3), $(NF-2)}'
tar -czf $OUT/call1.tgz -C $OUT r
cat > /tmp/xla_add.py <<'PY'
import jax, jax.numpy as jnp
a = jnp.ones(1 << 24, jnp.float32); b = jnp.ones(1 << 24, jnp.float32)
jax.jit(jnp.add)(a, b).block_until_ready()
PY
XLA_FLAGS="--xla_dump_to=/tmp/xla-dump" python3 /tmp/xla_add.py > $R/xla-dump.log 2>&1
for f in /tmp/xla-dump/*.ptx; do [ -f "$f" ] && cp "$f" $R/; done; ls /tmp/xla-dump | head -30 >> $R/xla-dump.log
grep -hE "ld.global|st.global|\.entry|maxntid|reqntid" $R/*.ptx | head -20
for v in x1 nc na cs x1; do
  s sa-$v 200 env XGK_SIMPLE_ADD_KERNEL=$v python3 benchmarks/simple_add_vs_xla.py --min-log2 22 --max-log2 26 --out $R/sa-$v-$SECONDS.json
  grep -E "2\^24|2\^26|2\^22" $R/sa-$v.log | sed "s/^/$v /"
  tar -czf $OUT/call1.tgz -C $OUT r
done
cat > /tmp/sa_ncu.py <<'PY'
import sys, os
sys.path.insert(0, "python")
import jax, jax.numpy as jnp
import xla_gpu_kernels.jax as xk
n = 1 << 24
a = jax.random.uniform(jax.random.PRNGKey(0), (n,), jnp.float32); b = a * 2
ours, xla = jax.jit(xk.simple_add), jax.jit(jnp.add)
for _ in range(3):
    ours(a, b).block_until_ready(); xla(a, b).block_until_ready()
PY
for v in x1 nc; do
  s ncu-$v 120 env XGK_SIMPLE_ADD_KERNEL=$v ncu --clock-control none --kernel-name regex:"add" --launch-skip 2 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    python3 /tmp/sa_ncu.py
  grep -E "simple_add|fusion|add_|gpu__time|dram__bytes|registers|warps_active|hit.sum" $R/ncu-$v.log | sed "s/^/$v /" | head -40
done
tar -czf $OUT/call1.tgz -C $OUT r
