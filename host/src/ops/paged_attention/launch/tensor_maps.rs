//! The warp-specialized kernel's tensor maps (bulk tensor copies: TMA).

use kernels_gpu::kernels::prefill::hopper::{ws_q_box, ws_q_by_tma, WS_BLOCK_KEYS};

use super::super::PagedAttention;
use crate::dtype::DType;
use crate::error::Result;
use crate::runtime::{MapElement, TiledTensorMap};

/// The tensor map of the KV pool for the warp-specialized kernel's bulk copies: tokens × (2
/// num_kv_heads K and V rows) × head_dim, boxes of 16 tokens (a page's 16-key block) × one row ×
/// 64 dims (a 128-byte swizzled column block); for fp8 KV, bytes, boxes of whole unswizzled rows
/// (the kernel's converters widen them).
pub fn kv_tensor_map(spec: &PagedAttention, kv: u64) -> Result<[u64; 16]> {
    let (d, rows) = (spec.head_dim as u64, 2 * spec.num_kv_heads as u64);
    let fp8 = matches!(spec.kv_dtype, DType::F8E4M3FN | DType::F8E5M2);
    let bytes = if fp8 { 1 } else { 2 };
    TiledTensorMap {
        address: kv,
        dims: [d, rows, spec.total_pages as u64 * spec.page_size as u64],
        strides: [d * bytes, rows * d * bytes],
        boxes: [if fp8 { spec.head_dim } else { 64 }, 1, WS_BLOCK_KEYS],
        element: if fp8 {
            MapElement::Bytes
        } else if spec.q_dtype == DType::BF16 {
            MapElement::Bf16
        } else {
            MapElement::F16
        },
    }
    .encode()
}

/// The tensor map of a tensor of the queries' shape (the queries at `q` for the warp-specialized
/// kernel's Q loads, the output at `out` for its bulk stores of output tiles): `max_tokens` tokens ×
/// query heads × head_dim, boxes of one consumer's 64 M rows (`ws_q_box`: a GQA group's heads of
/// `64 / group` tokens) × 64 dims (a 128-byte swizzled column block); zeros, never read, where the
/// kernel loads Q with `cp.async` instead (not `ws_q_by_tma`).
pub fn ws_token_tensor_map(spec: &PagedAttention, address: u64) -> Result<[u64; 16]> {
    let group = spec.group();
    if !ws_q_by_tma(spec.head_dim, group) {
        return Ok([0; 16]);
    }
    let (d, heads) = (spec.head_dim as u64, spec.num_q_heads as u64);
    TiledTensorMap {
        address,
        dims: [d, heads, spec.max_tokens as u64],
        strides: [d * 2, heads * d * 2],
        boxes: ws_q_box(group),
        element: if spec.q_dtype == DType::BF16 { MapElement::Bf16 } else { MapElement::F16 },
    }
    .encode()
}
