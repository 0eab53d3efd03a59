//! The epilogue: each consumer's rows of O normalized, staged in its Q tile and written (bulk
//! tensor stores through the output's map, or 16-byte stores).

use super::{CONSUMER_M, WARPGROUP};
use crate::attention::planner::TiledPointers;
use crate::attention::softmax::quad_sum;
use crate::attention::RpaParams;
use crate::barrier::{self, ids};
use crate::kernels::unroll;
use crate::math::inverse_or_zero;
use crate::mma::{stmatrix_x4, MmaElement};
use crate::shared::{self};
use crate::tma::{self};
use crate::warp::{lane_id, sync_warp, WARP_SIZE};
use crate::wgmma;

/// A warp's 16 M rows of O, normalized by their softmax sums `l` and packed, written with
/// `stmatrix` to shared memory: 16-byte chunk `chunk` (8 dims) of the warp's row `row` at
/// `chunk_at(row, chunk)`. Matrices of one `stmatrix`: n-tiles nt and nt + 1, each as rows 0-7 and
/// rows 8-15; lane `l` addresses row `l % 8` of matrix `l / 8`.
///
/// # Safety
/// Every lane of the warp calls it; `chunk_at` gives 16-byte aligned shared addresses that no other
/// thread reads or writes meanwhile.
#[inline(always)]
pub(super) unsafe fn stage_rows<Q: MmaElement, const NTILES: usize, const PAIRS: usize>(
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
    chunk_at: impl Fn(u32, u32) -> u32,
) {
    let lane = lane_id();
    let inv = [0, 1].map(|ri| inverse_or_zero(quad_sum(l[ri])));
    let (matrix, matrix_row) = (lane / 8, lane % 8);
    let row = matrix_row + 8 * (matrix % 2);
    unroll::<PAIRS>(|pair| {
        let nt = 2 * pair;
        let half = |t: usize, ri: usize| Q::pack2(o[t][2 * ri] * inv[ri], o[t][2 * ri + 1] * inv[ri]);
        stmatrix_x4(
            chunk_at(row, nt as u32 + matrix / 2),
            [half(nt, 0), half(nt, 1), half(nt + 1, 0), half(nt + 1, 1)],
        );
    });
}

/// A consumer's 64 rows of the output where all are in the item and Q came by the map (head_dim 64
/// and 128): each warp's 16 M rows normalized, packed and stored with `stmatrix` into the
/// consumer's Q tile in the layout the Q map's box has (per 64-dim column block, 64 rows of 128
/// bytes in the 128-byte swizzle), then, once the consumer's four warps are done, one thread
/// writes the tile with one bulk tensor store per column block through the output's map (the
/// Q map's layout at `out`) and waits until the copies have read the tile. The stores leave the
/// warps' load/store pipeline to the TMA unit. `token`: the consumer's first token; `head`: its
/// first query head.
///
/// # Safety
/// Every thread of the consumer calls it, in uniform control flow; `tile` is the consumer's Q
/// tile, which no S product reads any more and no other thread reads or writes until this
/// consumer arrives on its slot's empty barrier (after this returns); `o_map` acquired by the
/// consumer's thread 0 (`wtid` 0), whose tensor's tokens `token..token + 64 / group` of heads
/// `head..head + group` no other thread writes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn store_rows_tma<Q: MmaElement, const D: usize, const NTILES: usize, const PAIRS: usize>(
    tile: u32,
    warp: u32,
    wtid: u32,
    consumer: u32,
    o_map: u64,
    token: u32,
    head: u32,
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    const { assert!(NTILES * 8 == D && PAIRS * 2 == NTILES, "n-tiles of 8 dims, in pairs") };
    // 16-byte chunk `chunk` (8 dims) of M row `m`: column block chunk / 8, swizzled in its row.
    let chunk_at =
        |m: u32, chunk: u32| tile + (chunk / 8) * (CONSUMER_M * 128) + m * 128 + 16 * ((chunk % 8) ^ (m % 8));
    stage_rows::<Q, NTILES, PAIRS>(l, o, |row, chunk| chunk_at(warp * 16 + row, chunk));
    // The tile's generic writes, visible to the bulk copies (the async proxy) after the barrier.
    wgmma::fence_proxy_async_shared();
    barrier::sync_named_id(ids::WS_EPILOGUE.start + consumer, WARPGROUP);
    if wtid == 0 {
        unroll::<4>(|j| {
            if j < D / 64 {
                // < 2^31: max_tokens and the heads are validated on the host.
                tma::store_3d(o_map, tile + j as u32 * CONSUMER_M * 128, 64 * j as i32, head as i32, token as i32);
            }
        });
        tma::bulk_commit_group();
        // The caller's arrival on the slot's empty barrier then frees the tile.
        tma::bulk_wait_group_read::<0>();
    }
}

/// 16 bytes, aligned for one vector store.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub(super) struct Chunk([u32; 4]);

/// A consumer warp's rows of the output (head_dim 64 and 128, where the Q ring has two slots):
/// its 16 M rows of O normalized, packed and stored with `stmatrix` into its quarter of the
/// consumer's Q tile `tile` (16 rows of `2 D` bytes; 16-byte chunk `c` of row `r` at chunk
/// `c ^ (r % 8)`: no bank conflicts for the matrix stores or for the row reads), then read back
/// 16 bytes a lane and written with 16-byte stores, whole rows per half warp. From the
/// accumulator's layout a lane holds 4-byte pieces 16 bytes apart: four times the store
/// instructions, and (at 4 x 1k, where an item averages 4.5 key tiles) those stores held the
/// consumers for a tenth of their time (benchmarks/NOTES.md "v21").
///
/// # Safety
/// Every lane of the warp calls it; `tile` is the consumer's Q tile, which no S product reads any
/// more and no other thread reads or writes until this consumer arrives on its slot's empty
/// barrier.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn store_rows_staged<Q: MmaElement, const D: usize, const NTILES: usize, const PAIRS: usize>(
    ptr: &TiledPointers<Q>,
    p: &RpaParams,
    tile: u32,
    warp: u32,
    c_base: u32,
    r0: u32,
    rc: u32,
    g: u32,
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    // PAIRS: n-tile pairs, and 16-byte chunks a lane reads (16 rows of D / 8 chunks, 32 lanes).
    const { assert!(NTILES * 8 == D && PAIRS * 2 == NTILES, "n-tiles of 8 dims, in pairs") };
    let lane = lane_id();
    let row_bytes = 2 * D as u32;
    let region = tile + warp * 16 * row_bytes;
    let chunk_at = |row: u32, chunk: u32| region + row * row_bytes + 16 * (chunk ^ (row % 8));
    stage_rows::<Q, NTILES, PAIRS>(l, o, chunk_at);
    sync_warp();
    let (group, nq) = (p.num_q_heads / p.num_kv_heads, p.num_q_heads as usize);
    // Lane `l`'s k-th chunk: chunk `l % chunks` of row `(32 k + l) / chunks`. The reads are
    // written first, each into registers of its own: a store holds its source registers until
    // it has read them, and one register set for all would make every read wait for a store.
    let chunks = D as u32 / 8;
    let (chunk, row_of) = (lane % chunks, |k: usize| (k as u32 * WARP_SIZE + lane) / chunks);
    let mut v = [[0u32; 4]; PAIRS];
    unroll::<PAIRS>(|k| v[k] = shared::load_v4(chunk_at(row_of(k), chunk)));
    unroll::<PAIRS>(|k| {
        let m_row = c_base + warp * 16 + row_of(k);
        let r = m_row / group;
        if r < rc {
            let h = g * group + m_row % group;
            let dst = ptr.out.add(((r0 + r) as usize * nq + h as usize) * D + chunk as usize * 8);
            *(dst as *mut Chunk) = Chunk(v[k]);
        }
    });
}
