//! CUDA launch of ragged paged attention: kernel choice, split-KV sizing, scratch for partials.

use std::ffi::c_void;

use kernels_gpu::kernels::paged_attention::{rpa_shared_bytes, HEADS_PER_BLOCK, RPA_THREADS, RPA_WARPS};
use kernels_gpu::kernels::paged_attention_mma::{mma_shared_bytes, mma_supports_head_dim, MMA_HEADS_PER_BLOCK};

use super::PagedAttention;
use crate::dtype::DType;
use crate::ensure;
use crate::error::Result;
use crate::ops::aligned;
use crate::runtime::{KernelArgs, KernelModule, LaunchConfig, Stream};

/// Device pointers of one call, in the contract's order, plus the output.
#[derive(Clone, Copy, Debug)]
pub struct DeviceBuffers {
    pub q: *const c_void,
    pub kv_pages: *const c_void,
    pub kv_lens: *const c_void,
    pub page_indices: *const c_void,
    pub cu_q_lens: *const c_void,
    pub num_seqs: *const c_void,
    pub out: *mut c_void,
}

/// Fewest keys a split should hold: below this the merge costs more than the parallelism gains.
const MIN_KEYS_PER_SPLIT: u32 = 128;
/// Upper bound on splits (bounds the scratch buffer).
const MAX_SPLITS: u32 = 256;

/// Resident attention blocks per multiprocessor worth aiming for (128 threads and ~56 registers
/// each: about 8 fit), so loads from enough warps are in flight to cover memory latency.
const TARGET_BLOCKS_PER_SM: u64 = 8;

/// Splits per (row, KV head) and keys per split, from static shapes only (the device metadata is
/// not readable without a sync). Split when the row × head blocks are too few to fill the GPU.
pub fn choose_splits(blocks_per_split: u64, max_keys: u32, multiprocessors: u32) -> (u32, u32) {
    let target = TARGET_BLOCKS_PER_SM * multiprocessors.max(1) as u64;
    let max_keys = max_keys.max(1);
    let splits = if blocks_per_split >= target {
        1
    } else {
        let wanted = target.div_ceil(blocks_per_split.max(1)) as u32;
        wanted.min(max_keys.div_ceil(MIN_KEYS_PER_SPLIT)).clamp(1, MAX_SPLITS)
    };
    let split_len = max_keys.div_ceil(splits).next_multiple_of(RPA_WARPS);
    (max_keys.div_ceil(split_len), split_len)
}

fn dtype_tag(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F8E4M3FN => "e4m3",
        DType::F8E5M2 => "e5m2",
        _ => unreachable!("validated"),
    }
}

/// Which attention kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelChoice {
    /// Tensor cores where they apply (f16/bf16 q, head_dim <= 128, sm_80+), else the general kernel.
    #[default]
    Auto,
    /// The general (CUDA-core) kernel: every dtype and head_dim.
    General,
    /// The tensor-core kernel; an error where it does not apply.
    TensorCore,
}

/// Whether the tensor-core kernel covers `spec` on a device of compute capability `cc`.
pub fn tensor_core_applies(spec: &PagedAttention, cc: u32) -> bool {
    matches!(spec.q_dtype, DType::F16 | DType::BF16) && mma_supports_head_dim(spec.head_dim) && cc >= 80
}

/// Name of the attention kernel for a problem, as exported by the PTX: `rpa_mma_<q>_<kv>_d<D>`
/// (tensor cores) or `rpa_<q>_<kv>_dpl<N>` (general).
pub fn kernel_name(spec: &PagedAttention, tensor_core: bool) -> &'static str {
    let (q, kv) = (dtype_tag(spec.q_dtype), dtype_tag(spec.kv_dtype));
    let name = if tensor_core {
        format!("rpa_mma_{q}_{kv}_d{}", spec.head_dim)
    } else {
        format!("rpa_{q}_{kv}_dpl{}", spec.dims_per_lane())
    };
    // 27 possible names; leaking each once keeps the function cache keyed by &'static str.
    intern(name)
}

fn intern(name: String) -> &'static str {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(&s) = set.get(name.as_str()) {
        return s;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    set.insert(leaked);
    leaked
}

/// Enqueues the op on `stream` (one kernel, or two with a split-KV merge).
///
/// # Safety
/// Every pointer in `bufs` must be a device allocation in the stream's context holding the
/// shape and dtype `spec` was validated against.
pub unsafe fn launch_cuda(
    kernels: &KernelModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
) -> Result<()> {
    launch_cuda_with(kernels, stream, spec, bufs, KernelChoice::Auto)
}

/// [`launch_cuda`] with an explicit kernel choice (tests and benchmarks compare both kernels).
///
/// # Safety
/// As [`launch_cuda`].
pub unsafe fn launch_cuda_with(
    kernels: &KernelModule,
    stream: Stream,
    spec: &PagedAttention,
    bufs: DeviceBuffers,
    choice: KernelChoice,
) -> Result<()> {
    for (name, p) in [("q", bufs.q), ("kv_pages", bufs.kv_pages), ("out", bufs.out as *const c_void)] {
        ensure!(aligned(p, 16), "{name} must be 16-byte aligned on the device");
    }
    for (name, p) in [
        ("kv_lens", bufs.kv_lens),
        ("page_indices", bufs.page_indices),
        ("cu_q_lens", bufs.cu_q_lens),
        ("num_seqs", bufs.num_seqs),
    ] {
        ensure!(aligned(p, 4), "{name} must be 4-byte aligned on the device");
    }
    if spec.max_tokens == 0 {
        return Ok(());
    }
    let module = kernels.for_stream(stream)?;
    let applies = tensor_core_applies(spec, module.compute_capability);
    let tensor_core = match choice {
        KernelChoice::Auto => applies,
        KernelChoice::General => false,
        KernelChoice::TensorCore => {
            ensure!(applies, "the tensor-core kernel needs f16/bf16 q, head_dim <= 128 (multiple of 16) and sm_80+");
            true
        }
    };
    let dpl = spec.dims_per_lane();
    let group = spec.num_q_heads / spec.num_kv_heads;
    let heads_per_block = if tensor_core { MMA_HEADS_PER_BLOCK } else { HEADS_PER_BLOCK };
    let chunks = group.div_ceil(heads_per_block);
    let grid_y = spec.num_kv_heads * chunks;
    ensure!(grid_y <= 65535, "num_kv_heads * head chunks ({grid_y}) exceeds the grid limit");
    let blocks_per_split = spec.max_tokens as u64 * grid_y as u64;
    let (num_splits, split_len) = choose_splits(blocks_per_split, spec.max_visited_keys(), module.multiprocessors);
    let params = spec.kernel_params(num_splits, split_len);

    let scratch = if num_splits > 1 {
        let rows = num_splits as usize * spec.max_tokens as usize * spec.num_q_heads as usize;
        let bytes = rows * (spec.head_dim as usize + 1) * 4;
        Some(module.alloc_scratch(stream, bytes)?)
    } else {
        None
    };
    let (part_o, part_lse) = match &scratch {
        Some(s) => {
            let rows = num_splits as u64 * spec.max_tokens as u64 * spec.num_q_heads as u64;
            (s.ptr(), s.ptr() + rows * spec.head_dim as u64 * 4)
        }
        None => (0, 0),
    };

    let mut args = KernelArgs::new();
    args.push(bufs.q)
        .push(bufs.kv_pages)
        .push(bufs.kv_lens)
        .push(bufs.page_indices)
        .push(bufs.cu_q_lens)
        .push(bufs.num_seqs)
        .push(bufs.out)
        .push(part_o)
        .push(part_lse)
        .push(params);
    let cfg = LaunchConfig {
        grid: (spec.max_tokens, grid_y, num_splits),
        block: (RPA_THREADS, 1, 1),
        shared_bytes: if tensor_core { mma_shared_bytes(spec.head_dim) } else { rpa_shared_bytes(dpl) },
    };
    let launched = module.launch(stream, kernel_name(spec, tensor_core), cfg, &mut args.pointers());
    let combined = launched.and_then(|()| {
        if num_splits <= 1 {
            return Ok(());
        }
        let mut args = KernelArgs::new();
        args.push(part_o).push(part_lse).push(bufs.out).push(params);
        let cfg =
            LaunchConfig { grid: (spec.max_tokens, spec.num_q_heads, 1), block: (RPA_THREADS, 1, 1), shared_bytes: 0 };
        let name = match spec.q_dtype {
            DType::F32 => "rpa_combine_f32",
            DType::F16 => "rpa_combine_f16",
            _ => "rpa_combine_bf16",
        };
        module.launch(stream, name, cfg, &mut args.pointers())
    });
    // Free even when a launch failed, so an error does not leak device memory.
    let freed = scratch.map_or(Ok(()), |s| s.free());
    combined.and(freed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_only_when_the_grid_is_small() {
        // 256 decode rows x 8 KV heads fill 132 SMs: no split.
        assert_eq!(choose_splits(256 * 8, 8192, 132).0, 1);
        // one long sequence: split up to the target, each split >= 128 keys.
        let (s, len) = choose_splits(8, 32768, 132);
        assert!(s > 1 && s <= 132 && len >= 128 && s * len >= 32768);
        // short context: never more splits than 128-key chunks.
        assert_eq!(choose_splits(1, 200, 132).0, 2);
        assert_eq!(choose_splits(1, 0, 132), (1, 4));
    }
}
