"""The paged KV cache and its page allocator.

One array per layer, ``[num_pages, page_size, 2 * num_kv_heads, head_dim]`` in the model dtype, K
and V interleaved on axis 2 (K of head h at ``2h``, V at ``2h + 1``: the torch_xla / JAX TPU layout
our op reads). A sequence owns a list of pages; its token ``t`` lives in page ``pages[t //
page_size]``, slot ``t % page_size``. New rows go in with XLA's scatter inside the jitted step,
whose cache argument is donated, so the write is in place.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .model import Config

__all__ = ["init_cache", "cache_sharding", "write_kv", "PageAllocator", "pages_needed"]


def init_cache(cfg: Config, num_pages: int, page_size: int, sharding: NamedSharding | None = None) -> list:
    """Zeroed caches, one per layer (each laid out with ``sharding`` when given)."""
    shape = (num_pages, page_size, 2 * cfg.num_kv_heads, cfg.head_dim)
    make = jax.jit(lambda: jnp.zeros(shape, cfg.dtype), out_shardings=sharding)
    return [make() for _ in range(cfg.num_layers)]


def cache_sharding(mesh: Mesh, axis: str = "tp") -> NamedSharding:
    """Split on the combined K/V head axis: device i of n holds KV heads ``[i*Hkv/n, (i+1)*Hkv/n)``
    with their K and V, the heads its q/k/v column block produces."""
    return NamedSharding(mesh, P(None, None, axis, None))


def write_kv(cache: jax.Array, k: jax.Array, v: jax.Array, pages: jax.Array, slots: jax.Array) -> jax.Array:
    """Scatters token i's K/V (``k``, ``v``: ``[tokens, Hkv, D]``) into ``cache[pages[i], slots[i]]``.
    Rows with an out-of-range page (padding rows use ``num_pages``) are dropped."""
    kv = jnp.stack([k, v], axis=2).reshape(k.shape[0], 2 * k.shape[1], k.shape[2])  # K0 V0 K1 V1 ...
    return cache.at[pages, slots].set(kv.astype(cache.dtype), mode="drop")


def pages_needed(num_tokens: int, page_size: int) -> int:
    return math.ceil(num_tokens / page_size)


class PageAllocator:
    """A free list of page ids ``[0, num_pages)``. ``allocate`` hands out the lowest free ids
    first (so freed pages are reused at once), ``free`` takes them back."""

    def __init__(self, num_pages: int):
        self.num_pages = num_pages
        self._free = list(range(num_pages - 1, -1, -1))  # a stack: pop() gives the lowest id
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise MemoryError(f"asked for {n} pages, {len(self._free)} free of {self.num_pages}")
        pages = [self._free.pop() for _ in range(n)]
        self._used.update(pages)
        return pages

    def free(self, pages: list[int]) -> None:
        for p in pages:
            if p not in self._used:
                raise ValueError(f"page {p} is not allocated")
            self._used.remove(p)
        self._free.extend(sorted(pages, reverse=True))
        self._free.sort(reverse=True)
