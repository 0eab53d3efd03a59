"""A serving step around ``xla_gpu_kernels.jax.ragged_paged_attention``: a Llama-3-style decoder
(``model``), its paged KV cache and page allocator (``cache``), one jitted engine step with a
continuous-batching scheduler (``engine``), and a dense f32-attention reference (``reference``).

    from xla_gpu_kernels.serving import Engine, init_params, tiny
    cfg = tiny()
    engine = Engine(cfg, init_params(cfg, seed=0), max_num_seqs=4, token_budget=32)
    req = engine.add_request([1, 2, 3], max_new_tokens=8)
    engine.run(); print(req.output)
"""

from .cache import PageAllocator, cache_sharding, init_cache, write_kv
from .engine import Batch, Engine, Request, make_step
from .model import CONFIGS, Config, forward_paged, init_params, llama3_8b, llama3_70b, param_shardings, tiny
from .reference import compare_greedy, dense_greedy, dense_logits, teacher_forced_logits

__all__ = ["Batch", "CONFIGS", "Config", "Engine", "PageAllocator", "Request", "cache_sharding", "compare_greedy",
           "dense_greedy", "dense_logits", "forward_paged", "init_cache", "init_params", "llama3_8b", "llama3_70b",
           "make_step", "param_shardings", "teacher_forced_logits", "tiny", "write_kv"]
