//! Which kernels cover a problem (dtypes, head sizes, device), and the kernel a [`KernelChoice`]
//! resolves to: the static facts the plan choice starts from.

use kernels_gpu::attention::planner::plan_capacity;
use kernels_gpu::kernels::decode::key_rows::KEY_ROWS_MAX_HEADS;
use kernels_gpu::kernels::decode::mma::mma_supports_head_dim;
use kernels_gpu::kernels::decode::pipelined::layout::pipelined_supports;
use kernels_gpu::kernels::prefill::hopper::{ws_supports, ws_supports_fp8, ws_tile_rows, MIN_CONSUMERS, WS_BLOCK_KEYS};
use kernels_gpu::kernels::prefill::tiled::tiled_supports;

use super::settings::KernelChoice;
use super::PagedAttention;
use crate::dtype::DType;
use crate::ensure;
use crate::error::Result;

/// Whether the pipelined kernel's key-rows layout covers a problem: a GQA group that fits its
/// columns, head_dim 64 or 128.
pub fn key_rows_applies(spec: &PagedAttention) -> bool {
    spec.group() <= KEY_ROWS_MAX_HEADS && matches!(spec.head_dim, 64 | 128)
}

/// Whether the tensor-core kernel covers `spec` on a device of compute capability `cc`.
pub fn tensor_core_applies(spec: &PagedAttention, cc: u32) -> bool {
    matches!(spec.q_dtype, DType::F16 | DType::BF16) && mma_supports_head_dim(spec.head_dim) && cc >= 80
}

/// Whether the pipelined kernel covers `spec`: f16/bf16 q with unscaled KV of the same dtype (head
/// dim 64, 128 or 256) or fp8 KV, scaled or not (head dim 64 or 128); sm_80+ (`cp.async`,
/// `ldmatrix`).
pub fn pipelined_applies(spec: &PagedAttention, cc: u32) -> bool {
    let fp8 = matches!(spec.kv_dtype, DType::F8E4M3FN | DType::F8E5M2);
    matches!(spec.q_dtype, DType::F16 | DType::BF16)
        && (fp8 || (spec.kv_dtype == spec.q_dtype && !spec.kv_scaled()))
        && pipelined_supports(spec.head_dim, if fp8 { 1 } else { 2 })
        && cc >= 80
}

/// Whether the tiled kernel covers `spec`: f16/bf16 q with unscaled KV of the same dtype, head dim
/// 64 or 128, a GQA group of at most 64; sm_80+.
pub fn tiled_applies(spec: &PagedAttention, cc: u32) -> bool {
    tile_dtypes_apply(spec) && tiled_supports(spec.head_dim, spec.group()) && cc >= 80
}

/// The tile kernels' dtypes: f16/bf16 q with unscaled KV of the same dtype.
fn tile_dtypes_apply(spec: &PagedAttention) -> bool {
    matches!(spec.q_dtype, DType::F16 | DType::BF16) && spec.kv_dtype == spec.q_dtype && !spec.kv_scaled()
}

/// Whether the warp-specialized tile kernel applies (on the sm_90a image): f16/bf16 q with
/// unscaled KV of q's dtype (head_dim 64, 128 or 256) or fp8 KV, scaled or not (head_dim 64 or
/// 128), GQA groups up to 64, pages of whole 16-key blocks (its bulk copies move 16 keys of one
/// page) and a pool of at most 2^31 tokens (the copies' token coordinate is an int32), for
/// shapes whose work indices fit in 32 bits (`ws_work_indices_fit`: about 2^30 query rows times
/// KV heads).
pub fn tiled_ws_applies(spec: &PagedAttention, cc: u32) -> bool {
    let fp8 = matches!(spec.kv_dtype, DType::F8E4M3FN | DType::F8E5M2);
    let dtypes = if fp8 {
        matches!(spec.q_dtype, DType::F16 | DType::BF16) && ws_supports_fp8(spec.head_dim)
    } else {
        tile_dtypes_apply(spec)
    };
    dtypes
        && ws_supports(spec.head_dim, spec.group())
        && cc >= 90
        && spec.page_size.is_multiple_of(WS_BLOCK_KEYS)
        && spec.total_pages as u64 * spec.page_size as u64 <= i32::MAX as u64
        && ws_work_indices_fit(spec)
}

/// Whether [`KernelChoice::Auto`] takes the tiled kernel: where it applies and the static shapes
/// leave room for more query rows than sequences (some sequence may have several rows: a prefill
/// or a mixed batch). With at most one row per sequence possible, the batch is decode only, and
/// the pipelined kernel's key splits serve it better.
pub fn tiled_preferred(spec: &PagedAttention, cc: u32) -> bool {
    tiled_applies(spec, cc) && spec.max_tokens > spec.max_num_seqs
}

/// Query rows per sequence slot from which Auto takes the warpgroup-MMA tiles on Hopper.
const WGMMA_MIN_ROWS_PER_SEQUENCE: u64 = 64;

/// Whether Auto takes the warpgroup-MMA tile kernel (on the sm_90a image) rather than the
/// mma.sync one, from the static shapes. On an H100 (benchmarks/NOTES.md "v4b") the wgmma tiles
/// ran pure prefill 1.16-1.29x as fast, but mixed batches 11-13 % slower: their decode rows are
/// short items, which the mma.sync kernel computes on one warp and the wgmma kernel on the whole
/// warpgroup. A call's static shapes allow at most `max_num_seqs` short items; with at least
/// [`WGMMA_MIN_ROWS_PER_SEQUENCE`] query rows per sequence slot the call is prefill-shaped (the
/// peers' prefill cases: 256 to 32768 rows per slot; the mixes: 9), with fewer it may be mostly
/// decode rows, as in a serving engine's steps (max_num_seqs 256 over 8192 tokens: 32).
pub fn wgmma_tiles_preferred(spec: &PagedAttention) -> bool {
    spec.max_tokens as u64 >= WGMMA_MIN_ROWS_PER_SEQUENCE * spec.max_num_seqs.max(1) as u64
}

/// Whether the warp-specialized kernel's work indices ((item, KV head) pairs and, in the plan's
/// fallback, rows times heads, with a grid's width of slack) stay below 2^32 (with the fewest
/// rows per item of any block's consumers: the most items).
fn ws_work_indices_fit(spec: &PagedAttention) -> bool {
    let group = spec.group();
    let rows = ws_tile_rows(group.max(1), MIN_CONSUMERS).max(1) as u64;
    let capacity = plan_capacity(spec.max_tokens as u64, spec.max_num_seqs as u64, rows);
    3 * capacity.max(spec.max_tokens as u64) * spec.num_kv_heads as u64 <= u32::MAX as u64
}

/// The kernel `choice` resolves to for `spec` on a device of compute capability `cc`; an error
/// when an explicitly chosen kernel does not apply.
pub(super) fn resolve_kernel(spec: &PagedAttention, cc: u32, choice: KernelChoice) -> Result<KernelChoice> {
    Ok(match choice {
        KernelChoice::Auto if tiled_preferred(spec, cc) => KernelChoice::Tiled,
        KernelChoice::Auto if pipelined_applies(spec, cc) => KernelChoice::Pipelined,
        KernelChoice::Auto if tensor_core_applies(spec, cc) => KernelChoice::TensorCore,
        KernelChoice::Auto => KernelChoice::General,
        KernelChoice::TensorCore => {
            ensure!(
                tensor_core_applies(spec, cc),
                "the tensor-core kernel needs f16/bf16 q, head_dim <= 128 (multiple of 16) and sm_80+"
            );
            KernelChoice::TensorCore
        }
        KernelChoice::Pipelined => {
            ensure!(
                pipelined_applies(spec, cc),
                "the pipelined kernel needs f16/bf16 q, head_dim 64/128/256 with unscaled KV of q's dtype or 64/128 with fp8 KV, and sm_80+"
            );
            KernelChoice::Pipelined
        }
        KernelChoice::Tiled | KernelChoice::TiledWgmma => {
            ensure!(
                tiled_applies(spec, cc),
                "the tiled kernel needs f16/bf16 q with unscaled KV of q's dtype, head_dim 64/128, num_q_heads / num_kv_heads <= 64 and sm_80+"
            );
            choice
        }
        KernelChoice::TiledWarpSpecialized => {
            ensure!(
                tiled_ws_applies(spec, cc),
                "the tiled-ws kernel needs f16/bf16 q with unscaled KV of q's dtype (head_dim 64/128/256) or fp8 KV (head_dim 64/128), num_q_heads / num_kv_heads <= 64, sm_90, a page_size that is a multiple of {WS_BLOCK_KEYS} (got {}), at most 2^31 tokens in the KV pool and at most about 2^30 query rows times KV heads",
                spec.page_size
            );
            choice
        }
        KernelChoice::General => KernelChoice::General,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgmma_tiles_for_prefill_shaped_calls_only() {
        let spec = |max_tokens, max_num_seqs| PagedAttention {
            q_dtype: DType::BF16,
            kv_dtype: DType::BF16,
            max_tokens,
            num_q_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            total_pages: 4096,
            page_size: 16,
            max_num_seqs,
            pages_per_seq: 512,
            attrs: crate::ops::paged_attention::Attributes::default(),
        };
        // The peers' prefill cases: 1 x 2k, 4 x 1k, chunked 8 x 512.
        assert!(wgmma_tiles_preferred(&spec(2048, 1)));
        assert!(wgmma_tiles_preferred(&spec(4096, 4)));
        assert!(wgmma_tiles_preferred(&spec(4096, 8)));
        // The mixes (4 x 256 + 124 decode rows; 16 x 128 + 240) and a serving engine's steps.
        assert!(!wgmma_tiles_preferred(&spec(1148, 128)));
        assert!(!wgmma_tiles_preferred(&spec(2288, 256)));
        assert!(!wgmma_tiles_preferred(&spec(8192, 256)));
    }

    #[test]
    fn warp_specialized_tiles_need_whole_16_key_blocks_of_a_page() {
        let spec = |page_size, total_pages| PagedAttention {
            q_dtype: DType::BF16,
            kv_dtype: DType::BF16,
            max_tokens: 4096,
            num_q_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            total_pages,
            page_size,
            max_num_seqs: 4,
            pages_per_seq: 64,
            attrs: crate::ops::paged_attention::Attributes::default(),
        };
        for page_size in [16, 32, 48, 128, 256] {
            assert!(tiled_ws_applies(&spec(page_size, 4096), 90), "page {page_size}");
            assert_eq!(
                resolve_kernel(&spec(page_size, 4096), 90, KernelChoice::TiledWarpSpecialized).ok(),
                Some(KernelChoice::TiledWarpSpecialized)
            );
        }
        // head_dim 256 too (64-key tiles), which the other tile kernels lack.
        let d256 = PagedAttention { head_dim: 256, ..spec(16, 4096) };
        assert!(tiled_ws_applies(&d256, 90) && !tiled_applies(&d256, 90));
        assert!(!tiled_ws_applies(&d256, 80), "the sm_90a image only");
        for page_size in [1, 8, 24] {
            assert!(!tiled_ws_applies(&spec(page_size, 4096), 90), "page {page_size}");
            let err = resolve_kernel(&spec(page_size, 4096), 90, KernelChoice::TiledWarpSpecialized).unwrap_err();
            assert!(err.to_string().contains("multiple of 16"), "{err}");
        }
        // The copies' token coordinate is an int32.
        assert!(tiled_ws_applies(&spec(16, (i32::MAX as u32) / 16), 90));
        assert!(!tiled_ws_applies(&spec(16, (i32::MAX as u32) / 16 + 1), 90));
        // The kernel's (item, KV head) work indices are u32: about 2^30 rows times heads.
        let rows = |max_tokens| PagedAttention { max_tokens, ..spec(16, 4096) };
        assert!(tiled_ws_applies(&rows(1 << 20), 90));
        assert!(!tiled_ws_applies(&rows(1 << 28), 90));
        let err = resolve_kernel(&rows(1 << 28), 90, KernelChoice::TiledWarpSpecialized).unwrap_err();
        assert!(err.to_string().contains("query rows times KV heads"), "{err}");
    }

    #[test]
    fn warp_specialized_tiles_take_fp8_kv_at_head_dims_64_and_128() {
        let spec = |q_dtype, kv_dtype, head_dim| PagedAttention {
            q_dtype,
            kv_dtype,
            max_tokens: 4096,
            num_q_heads: 32,
            num_kv_heads: 8,
            head_dim,
            total_pages: 4096,
            page_size: 16,
            max_num_seqs: 4,
            pages_per_seq: 64,
            attrs: crate::ops::paged_attention::Attributes::default(),
        };
        for q in [DType::BF16, DType::F16] {
            for kv in [DType::F8E4M3FN, DType::F8E5M2] {
                for d in [64, 128] {
                    assert!(tiled_ws_applies(&spec(q, kv, d), 90), "{q}/{kv} d{d}");
                    // Not the other tile kernels, and not on the portable image.
                    assert!(!tiled_applies(&spec(q, kv, d), 90) && !tiled_ws_applies(&spec(q, kv, d), 80));
                }
                let err = resolve_kernel(&spec(q, kv, 256), 90, KernelChoice::TiledWarpSpecialized).unwrap_err();
                assert!(err.to_string().contains("fp8 KV (head_dim 64/128)"), "{err}");
            }
        }
        // 16-bit KV of another dtype than q's stays out.
        assert!(!tiled_ws_applies(&spec(DType::BF16, DType::F16, 128), 90));
    }
}
