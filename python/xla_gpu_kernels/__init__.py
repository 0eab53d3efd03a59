"""xla_gpu_kernels: pure-Rust GPU kernels exported as XLA custom calls.

One package for every framework; each submodule imports its framework lazily:

- ``xla_gpu_kernels.jax``: ``register()``, ``simple_add``, ``ragged_paged_attention`` (JAX on CUDA
  and CPU, under ``jax.jit``/``vmap``; partitions itself over heads under ``jax.jit``).
- ``xla_gpu_kernels.sharding``: the JAX op on several devices: ``ragged_paged_attention`` (the same
  op, tensor parallel under ``jax.jit``), ``ragged_paged_attention_sharded`` (shard_map over a
  mesh: ``head_axis`` and/or ``data_axis``), ``head_shardings``.
- ``xla_gpu_kernels.torch``: ``torch.ops.xla_gpu.simple_add`` / ``paged_attention`` (CUDA, CPU,
  XLA and fake implementations).
- ``xla_gpu_kernels.torch_xla``: legacy custom-call registration for torch_xla <= 2.8 on CUDA.

The shared library is found through ``library_path()``: an explicit path, the
``XLA_GPU_KERNELS_LIB`` environment variable, the copy packaged with this module, or a
development checkout's ``target/{release,debug}``.
"""

from ._library import LIBRARY_ENV_VAR, library_path, load_library, version

__all__ = ["LIBRARY_ENV_VAR", "library_path", "load_library", "version"]
