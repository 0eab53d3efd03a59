//! The pipelined decode kernel's tiles, threads and shared memory: the sizes the host plans its
//! launches with, and where a stage's rows keep their 16-byte chunks.

use crate::kernels::decode::mma::MMA_HEADS_PER_BLOCK;
use crate::warp::WARP_SIZE;

/// Most keys per pipeline stage (16 per key group, two mma n-tiles; 4 groups), and the granule of
/// the key splits (a multiple of every tile size).
pub const PIPE_TILE_KEYS: u32 = 64;
/// Most shared-memory stages of the K/V ring (tiles in flight = stages - 1); the kernel takes the
/// count at run time (`RpaParams::pipe_stages`).
pub const PIPE_MAX_STAGES: u32 = 8;

/// Keys per tile: 64 (four 16-key groups, one warp each), 32 at head_dim 256, where two warps
/// share each group: 4 warps and 32 KiB stages, so that two blocks fit an SM (with 64-key tiles,
/// 64 KiB stages and 8 warps, one block per SM stalled at every tile's barrier: 770 against 745
/// µs at G4 64 x 8k, benchmarks/NOTES.md v8). A compile-time constant of the kernel: taken at run
/// time it cost the smallest decode cells about 1 µs.
pub const fn pipelined_tile_keys(head_dim: u32) -> u32 {
    if head_dim > 128 {
        32
    } else {
        64
    }
}

/// Warps that split one key group's head dims: 2 for head_dim 256 (the accumulators of a full
/// 256-dim row would not fit one warp's registers), else 1.
pub const fn pipelined_dim_split(head_dim: u32) -> u32 {
    if head_dim > 128 {
        2
    } else {
        1
    }
}

/// Threads per block of the pipelined kernel: `dim_split` warps per 16-key group of a tile.
pub const fn pipelined_threads(tile_keys: u32, dim_split: u32) -> u32 {
    tile_keys / 16 * WARP_SIZE * dim_split
}

/// Whether the pipelined kernel covers a head size and KV element size: its shared rows must be
/// whole 16-byte chunks for the `ldmatrix` swizzle (four at least); fp8 only up to 128 (its
/// permuted output dims are not split over warps).
pub const fn pipelined_supports(head_dim: u32, kv_bytes: u32) -> bool {
    head_dim == 64 || head_dim == 128 || (head_dim == 256 && kv_bytes == 2)
}

/// Shared memory of one stage: K and V rows of a tile, `kv_bytes` bytes per element.
pub const fn pipelined_stage_bytes(head_dim: u32, kv_bytes: u32, tile_keys: u32) -> u32 {
    2 * tile_keys * head_dim * kv_bytes
}

/// Floats of the final warp merge's states (one `(m, l, acc)` row per key group and head), at
/// the start of the shared memory; the split's partial for a cluster merge follows them.
pub(super) const fn pipelined_warp_state_floats(head_dim: u32, tile_keys: u32) -> u32 {
    tile_keys / 16 * MMA_HEADS_PER_BLOCK * (2 + head_dim)
}

/// Dynamic shared memory of the pipelined kernel with `stages` stages of `tile_keys` keys,
/// reused at the end by the warp merge's states and the split's partial for a cluster merge
/// (`head_dim + 1` floats per head).
pub const fn pipelined_shared_bytes(head_dim: u32, kv_bytes: u32, tile_keys: u32, stages: u32) -> u32 {
    let pipeline = stages * pipelined_stage_bytes(head_dim, kv_bytes, tile_keys);
    let merge = (pipelined_warp_state_floats(head_dim, tile_keys) + MMA_HEADS_PER_BLOCK * (head_dim + 1)) * 4;
    if pipeline > merge {
        pipeline
    } else {
        merge
    }
}

/// The 16-byte chunk where chunk `col` of shared row `row` (rows of `row_chunks` chunks, 4 at
/// least) is stored: the eight rows an `ldmatrix` reads land in eight different bank groups.
/// Rows of 8 chunks or more XOR the chunk with `row % 8`; 4-chunk rows (fp8 at head_dim 64: two
/// rows per 128 bytes) with `(row / 2) % 4`.
#[inline(always)]
pub(super) fn swizzled_chunk(col: u32, row: u32, row_chunks: u32) -> u32 {
    col ^ chunk_swizzle(row, row_chunks)
}

/// What [`swizzled_chunk`] XORs into the chunks of row `row`.
#[inline(always)]
pub(super) fn chunk_swizzle(row: u32, row_chunks: u32) -> u32 {
    if row_chunks >= 8 {
        row & 7
    } else {
        (row >> 1) & 3
    }
}
