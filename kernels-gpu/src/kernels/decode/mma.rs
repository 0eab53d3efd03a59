//! Ragged paged attention on tensor cores (`mma.sync.m16n8k16`), for f16/bf16 queries and head
//! dims up to 128 (multiples of 16). Same contract, blocks and splits as [`super::general`], which
//! stays the general kernel (f32 queries, head_dim > 128).
//!
//! Per block (query row `t`, KV head `g`, up to 16 query heads of `g`, key split): the query heads
//! are the 16 rows of the mma tile (a GQA group of 4 fills 4 of them: tensor cores have throughput
//! to spare, and no warp shuffle is spent on dot products). Each warp takes runs of 16 keys:
//! `S = Q · Kᵀ` (16 heads x 16 keys, f32), online softmax on the accumulator fragments (row
//! statistics reduced over the 4 lanes of a quad), `O += P · V` with P rounded to q's dtype (as the
//! reference rounds probabilities to the value dtype). K and V fragments are read straight from
//! the pages: a K fragment register is two adjacent dims of one key (4 bytes); a V fragment
//! register is one dim of two adjacent keys. Warps merge through shared memory as every decode
//! kernel's do ([`super::merge::merge_warps_and_store`]).

use crate::attention::RpaParams;
use crate::math::{tanh_fast, LOG2_E};
use crate::mma::MmaElement;
use crate::num::{Bf16, KvElement, F8E4M3, F8E5M2};
use crate::shared::dynamic_shared_mem;
use crate::thread::{sync_threads, thread_idx_x};
use crate::warp::{lane_id, WARP_SIZE};

use crate::attention::softmax::{online_softmax_step, quad_sum};
use crate::kernels::decode::general::{
    attention_kernels, key_row, resolve_block, Block, RpaPointers, RPA_THREADS, RPA_WARPS,
};
use crate::kernels::decode::merge::{merge_warps_and_store, WarpStates};
use crate::kernels::unroll;

/// Query heads per block: the M of the mma tile.
pub const MMA_HEADS_PER_BLOCK: u32 = 16;
/// Keys per warp step: two n-tiles of 8.
const KEYS_PER_WARP_STEP: u32 = 16;

/// Whether the tensor-core kernel covers a problem (q f16/bf16 is checked by the caller).
pub const fn mma_supports_head_dim(head_dim: u32) -> bool {
    head_dim.is_multiple_of(16) && head_dim >= 16 && head_dim <= 128
}

/// Dynamic shared memory of the tensor-core kernel, in bytes.
pub const fn mma_shared_bytes(head_dim: u32) -> u32 {
    RPA_WARPS * MMA_HEADS_PER_BLOCK * (2 + head_dim) * 4
}

/// Two adjacent elements `dim, dim + 1` of a K row as a packed pair of `Q`, scaled and rounded to
/// q's dtype when the call has scales (the contract's cast).
///
/// # Safety
/// `row` is a K row of the call's pool (`p.head_dim` elements) and `dim + 1` below `p.head_dim`;
/// for 16-bit unscaled KV, `dim` even (the pair is read as one 4-byte word).
#[inline(always)]
unsafe fn k_pair<Q: MmaElement, KV: KvElement>(row: *const KV, dim: usize, p: &RpaParams) -> u32 {
    if core::mem::size_of::<KV>() == 2 && p.kv_scaled == 0 {
        // KV is q's own type (the host allows only that or fp8): the bits are the packed pair.
        return *(row.add(dim) as *const u32);
    }
    let scale = if p.kv_scaled != 0 { p.k_scale } else { 1.0 };
    Q::pack2((*row.add(dim)).widen() * scale, (*row.add(dim + 1)).widen() * scale)
}

/// One V element as f32, scaled when the call has scales (rounded to q's dtype by the packing).
///
/// # Safety
/// A `Some(row)` is a V row of the call's pool (`p.head_dim` elements), `dim` below `p.head_dim`.
#[inline(always)]
unsafe fn v_elem<KV: KvElement>(row: Option<*const KV>, dim: usize, p: &RpaParams) -> f32 {
    match row {
        Some(r) => {
            let v = (*r.add(dim)).widen();
            if p.kv_scaled != 0 {
                v * p.v_scale
            } else {
                v
            }
        }
        None => 0.0,
    }
}

/// The block's query heads as the A operand of `S = Q Kᵀ` (tile rows are heads `h0 + row`; rows
/// at or past `hc` stay zero), `KSTEPS` k-steps of 16 head dims. With `PAIRED`, the k-step's
/// dims are permuted as the pipelined kernel's 1-byte K operands are (`StagedKv::k_operand`):
/// the mma's k `2c, 2c + 1` are dims `4c, 4c + 1` and its k `2c + 8, 2c + 9` dims `4c + 2, 4c + 3`.
///
/// # Safety
/// `ptr` and `p` as the attention kernels take them and `blk` a block resolved from them (its
/// query row `blk.t` inside `ptr.q`), `16 * KSTEPS` at most `p.head_dim`; every lane of the warp
/// calls it.
#[inline(always)]
pub(crate) unsafe fn load_q_fragments<Q: MmaElement, KV, const KSTEPS: usize, const PAIRED: bool>(
    ptr: &RpaPointers<Q, KV>,
    p: &RpaParams,
    blk: &Block,
) -> [[u32; 4]; KSTEPS] {
    let lane = lane_id() as usize;
    let (gq, cq) = (lane / 4, lane % 4);
    let d = p.head_dim as usize;
    let mut qa = [[0u32; 4]; KSTEPS];
    let q_row = |r: usize| ptr.q.add((blk.t as usize * p.num_q_heads as usize + blk.h0 as usize + r) * d);
    let (first, second) = if PAIRED { (4 * cq, 4 * cq + 2) } else { (2 * cq, 2 * cq + 8) };
    unroll::<KSTEPS>(|k| {
        let (col, col2) = (k * 16 + first, k * 16 + second);
        if gq < blk.hc {
            qa[k][0] = *(q_row(gq).add(col) as *const u32);
            qa[k][2] = *(q_row(gq).add(col2) as *const u32);
        }
        if gq + 8 < blk.hc {
            qa[k][1] = *(q_row(gq + 8).add(col) as *const u32);
            qa[k][3] = *(q_row(gq + 8).add(col2) as *const u32);
        }
    });
    qa
}

/// A raw `q · k` accumulator element turned into the contract's logit for key `j`: scaled, soft
/// capped, and offset by `mask_value` when masked keys are visited and `j` is masked.
#[inline(always)]
pub(crate) fn finish_logit(raw: f32, j: u32, blk: &Block, p: &RpaParams) -> f32 {
    let mut x = raw * p.sm_scale;
    if p.soft_cap != 0.0 {
        // `sm_scale / soft_cap` is loop-invariant (hoisted): no IEEE division per logit, whose
        // slow path ran once per logit at head_dim 256 with soft cap 50 (benchmarks/NOTES.md v8).
        x = p.soft_cap * tanh_fast(raw * (p.sm_scale / p.soft_cap));
    }
    if p.include_masked != 0 && !blk.window.visible(j) {
        x += p.mask_value;
    }
    x
}

/// Hands a warp's `(m, l, O)` of rows `g` and `g + 8` to [`merge_warps_and_store`]: shared layout
/// `[logical warp][row][2 + head_dim]` f32, `O` covering dims `[dim0, dim0 + 8 * NTILES)`. Warps
/// that split the head dims of one logical warp share its `(m, l)`; the one with `dim0 == 0`
/// writes them. With `PAIRED`, n-tile `2j + parity` holds dims `16j + 2n + parity` (the
/// pipelined kernel's 1-byte V operands: `StagedKv::v_operands`) instead of `8 nt + n`. The
/// caller synchronizes the block before (nothing else may still use that shared memory) and after.
///
/// # Safety
/// Every lane of the warp calls it, between the caller's block barriers; `smem` is shared memory
/// of at least `(logical_warp + 1) * MMA_HEADS_PER_BLOCK * (2 + head_dim)` f32 that no other logical
/// warp's state overlaps, and `dim0 + 8 * NTILES` is at most `head_dim`.
#[inline(always)]
pub(crate) unsafe fn store_warp_state<const NTILES: usize, const PAIRED: bool>(
    smem: *mut f32,
    head_dim: usize,
    logical_warp: usize,
    dim0: usize,
    m: &[f32; 2],
    l: &[f32; 2],
    o: &[[f32; 4]; NTILES],
) {
    let lane = lane_id() as usize;
    let (gq, cq) = (lane / 4, lane % 4);
    let stride = 2 + head_dim;
    unroll::<2>(|ri| {
        let sum = quad_sum(l[ri]);
        let row = smem.add((logical_warp * MMA_HEADS_PER_BLOCK as usize + gq + 8 * ri) * stride);
        if cq == 0 && dim0 == 0 {
            *row = m[ri];
            *row.add(1) = sum;
        }
        unroll::<NTILES>(|nt| {
            if PAIRED {
                // n-tile 2j + parity holds dims 16j + 2n + parity of its columns n.
                let dim = dim0 + (nt / 2) * 16 + 4 * cq + nt % 2;
                *row.add(2 + dim) = o[nt][2 * ri];
                *row.add(4 + dim) = o[nt][2 * ri + 1];
            } else {
                let dim = dim0 + nt * 8 + 2 * cq;
                *row.add(2 + dim) = o[nt][2 * ri];
                *row.add(3 + dim) = o[nt][2 * ri + 1];
            }
        });
    });
}

/// The tensor-core kernel's body (see the module docs): each warp `S = Q Kᵀ` and `O += P V` with
/// `mma.sync` over its share of the split's keys, then the warps' merge.
///
/// # Safety
/// As the attention kernel that calls it (`attention_kernels`' `# Safety`): its launch (with
/// [`mma_shared_bytes`] of dynamic shared memory), and `ptr` and `p` as it passes them; every
/// thread of the block calls it.
#[inline(always)]
unsafe fn rpa_mma<Q: MmaElement, KV: KvElement, const KSTEPS: usize, const NTILES: usize>(
    ptr: RpaPointers<Q, KV>,
    p: RpaParams,
) {
    let lane = lane_id() as usize;
    // Programmatic dependent launch (sm_90 image; no-ops otherwise): let the next kernel (the
    // split merge, or the next call's) launch during this one's last wave, and touch no memory
    // before the kernel before this one has finished.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    let warp = thread_idx_x() / WARP_SIZE;
    let (gq, cq) = (lane / 4, lane % 4);
    let d = p.head_dim as usize;
    let blk = resolve_block(&ptr, &p, MMA_HEADS_PER_BLOCK);
    let qa = load_q_fragments::<Q, KV, KSTEPS, false>(&ptr, &p, &blk);

    let mut o = [[0.0f32; 4]; NTILES];
    // Running max and (this lane's share of the) sum for rows gq and gq + 8.
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    let key_ok = |j: u32| j < blk.split_hi && key_row(ptr.kv, &blk, &p, j).is_some();

    let mut base = blk.split_lo + warp * KEYS_PER_WARP_STEP;
    while base < blk.split_hi {
        // S = Q Kᵀ for keys base + [0, 16): this lane loads key base + nt*8 + gq.
        let mut s = [[0.0f32; 4]; 2];
        unroll::<2>(|nt| {
            let j = base + (nt * 8 + gq) as u32;
            let row = if j < blk.split_hi { key_row(ptr.kv, &blk, &p, j) } else { None };
            unroll::<KSTEPS>(|k| {
                let b = match row {
                    Some(r) => [k_pair::<Q, KV>(r, k * 16 + 2 * cq, &p), k_pair::<Q, KV>(r, k * 16 + 8 + 2 * cq, &p)],
                    None => [0, 0],
                };
                s[nt] = Q::mma(qa[k], b, s[nt]);
            });
        });

        // Logits: scale, soft cap, mask; absent keys (past the split, invalid page) are -inf.
        // Element e of n-tile nt is row gq + 8*(e/2), key base + nt*8 + 2*cq + e%2.
        unroll::<2>(|nt| {
            unroll::<4>(|e| {
                let j = base + (nt * 8 + 2 * cq + (e & 1)) as u32;
                s[nt][e] = if key_ok(j) { finish_logit(s[nt][e], j, &blk, &p) } else { f32::NEG_INFINITY };
            })
        });

        // Online softmax per row; P packed as the A operand of P·V.
        let pa = online_softmax_step::<Q, NTILES>(&s, LOG2_E, true, &mut m, &mut l, &mut o);

        // O += P V: this lane reads dims nt*8 + gq of keys base + 2cq + {0, 1, 8, 9}.
        let mut v_rows: [Option<*const KV>; 4] = [None; 4];
        unroll::<4>(|i| {
            let j = base + 2 * cq as u32 + [0, 1, 8, 9][i];
            if j < blk.split_hi {
                v_rows[i] = key_row(ptr.kv, &blk, &p, j).map(|r| r.add(d));
            }
        });
        unroll::<NTILES>(|nt| {
            let dim = nt * 8 + gq;
            let b = [
                Q::pack2(v_elem(v_rows[0], dim, &p), v_elem(v_rows[1], dim, &p)),
                Q::pack2(v_elem(v_rows[2], dim, &p), v_elem(v_rows[3], dim, &p)),
            ];
            o[nt] = Q::mma(pa, b, o[nt]);
        });
        base += RPA_WARPS * KEYS_PER_WARP_STEP;
    }

    // Hand (m, l, O) of rows gq and gq + 8 to the shared merge: layout [warp][row][2 + d].
    let smem = dynamic_shared_mem::<f32>();
    store_warp_state::<NTILES, false>(smem, d, warp as usize, 0, &m, &l, &o);
    sync_threads();
    let states = WarpStates {
        smem,
        warps: RPA_WARPS as usize,
        rows: MMA_HEADS_PER_BLOCK as usize,
        stride: 2 + d,
        cluster_area: core::ptr::null_mut(),
        counts_for_merge_blocks: false,
    };
    merge_warps_and_store(&ptr, &p, &blk, states, RPA_THREADS as usize, crate::kernels::block_slot::WholeBlock);
}

/// One tensor-core kernel per (q dtype, KV dtype, head_dim): `rpa_mma_<q>_<kv>_d<D>`.
macro_rules! rpa_mma_kernels {
    ($( $name:ident: $q:ty, $kv:ty, $d:literal; )*) => {
        attention_kernels! { $( $name: $q, $kv => rpa_mma[$d / 16, $d / 8]; )* }
    };
}

macro_rules! rpa_mma_dims {
    ($( $q:ty, $kv:ty => $($name:ident $d:literal),* ; )*) => {
        rpa_mma_kernels! { $( $( $name: $q, $kv, $d; )* )* }
    };
}

rpa_mma_dims! {
    f16, f16 => rpa_mma_f16_f16_d64 64, rpa_mma_f16_f16_d80 80, rpa_mma_f16_f16_d96 96, rpa_mma_f16_f16_d112 112, rpa_mma_f16_f16_d128 128;
    f16, F8E4M3 => rpa_mma_f16_e4m3_d64 64, rpa_mma_f16_e4m3_d80 80, rpa_mma_f16_e4m3_d96 96, rpa_mma_f16_e4m3_d112 112, rpa_mma_f16_e4m3_d128 128;
    f16, F8E5M2 => rpa_mma_f16_e5m2_d64 64, rpa_mma_f16_e5m2_d80 80, rpa_mma_f16_e5m2_d96 96, rpa_mma_f16_e5m2_d112 112, rpa_mma_f16_e5m2_d128 128;
    Bf16, Bf16 => rpa_mma_bf16_bf16_d64 64, rpa_mma_bf16_bf16_d80 80, rpa_mma_bf16_bf16_d96 96, rpa_mma_bf16_bf16_d112 112, rpa_mma_bf16_bf16_d128 128;
    Bf16, F8E4M3 => rpa_mma_bf16_e4m3_d64 64, rpa_mma_bf16_e4m3_d80 80, rpa_mma_bf16_e4m3_d96 96, rpa_mma_bf16_e4m3_d112 112, rpa_mma_bf16_e4m3_d128 128;
    Bf16, F8E5M2 => rpa_mma_bf16_e5m2_d64 64, rpa_mma_bf16_e5m2_d80 80, rpa_mma_bf16_e5m2_d96 96, rpa_mma_bf16_e5m2_d112 112, rpa_mma_bf16_e5m2_d128 128;
}
