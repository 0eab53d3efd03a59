//! Ragged paged attention with K/V staged through shared memory by a multi-stage `cp.async`
//! pipeline, on tensor cores: the decode kernel. f16/bf16 q with KV of the same dtype (unscaled)
//! or fp8 (e4m3fn / e5m2, scaled), head dims 64 and 128. Same contract, blocks, splits and merge
//! as the other two kernels.
//!
//! Why: decode is memory bound, and the direct-load kernels left the memory system three quarters
//! idle (benchmarks/NOTES.md, profile): every warp waited on its own dependent global loads. Here
//! a block (query row `t`, KV head `g`, up to 16 query heads of `g`, key split) walks its keys in
//! tiles of [`PIPE_TILE_KEYS`] keys:
//! - all 128 threads copy a tile's K and V rows (page-gathered: one token's K and V for head `g`
//!   are `2 * head_dim` contiguous elements) into one of [`PIPE_STAGES`] shared-memory stages
//!   with 16-byte `cp.async` (256-byte L2 prefetch by default, `RpaParams::copy_hint`), `PIPE_STAGES - 1` tiles ahead of the math, so about 64 KiB per block
//!   is in flight while a tile is consumed; keys past the split or on an invalid page are
//!   zero-filled (and masked below);
//! - each warp takes 16 keys of the tile: `S = Q Kᵀ` with K fragments from `ldmatrix`, online
//!   softmax on the accumulators, `O += P V` with V fragments from `ldmatrix.trans`;
//! - rows in shared memory are 16-byte chunks permuted by `chunk ^ (row % 8)`, so the eight rows an
//!   `ldmatrix` reads hit eight different bank groups;
//! - one block barrier per tile: after it, the tile's copies from every thread are visible and
//!   every warp is done with the stage the next copies overwrite;
//! - fp8 KV moves half the bytes: the stage holds the raw bytes, and each warp widens its 16 keys
//!   (exactly: every fp8 value is a bf16 and an f16) into its own permuted 16-bit area before the
//!   `ldmatrix` reads. `k_scale` multiplies the logits and `v_scale` the output, in f32, instead of
//!   rounding scaled K and V to q's dtype first as the reference does: the same function with one
//!   rounding fewer (within the reference's own bf16 rounding, see the GPU tests).

use crate::attention::{page_is_valid, RpaParams};
use crate::copy::{commit_group, cp_async_16, evict_first_policy, wait_all, wait_group, CopyHint};
use crate::fp8::Fp8;
use crate::math::FastDiv;
use crate::mma::{ldmatrix_x4, ldmatrix_x4_trans, MmaElement};
use crate::num::{Bf16, KvElement, F8E4M3, F8E5M2};
use crate::shared::{dynamic_shared_mem, shared_address};
use crate::thread::{sync_threads, thread_idx_x};
use crate::warp::{lane_id, sync_warp, warp_ballot, WARP_SIZE};

use super::paged_attention::{attention_kernels, merge_warps_and_store, resolve_block, RpaPointers, RPA_THREADS};
use super::paged_attention_mma::{
    finish_logit, load_q_fragments, online_softmax_step, store_warp_state, MMA_HEADS_PER_BLOCK,
};
use super::unroll;

/// Keys per pipeline stage: 16 per warp (two mma n-tiles), 4 warps.
pub const PIPE_TILE_KEYS: u32 = 64;
/// Shared-memory stages of the K/V pipeline (tiles in flight = stages - 1).
pub const PIPE_STAGES: u32 = 3;
/// 16-key groups of a tile, one per warp (or per `DSPLIT` warps).
const PIPE_KEY_GROUPS: u32 = PIPE_TILE_KEYS / 16;

/// Warps that split one key group's head dims: 2 for head_dim 256 (the accumulators of a full
/// 256-dim row would not fit one warp's registers), else 1.
pub const fn pipelined_dim_split(head_dim: u32) -> u32 {
    if head_dim > 128 {
        2
    } else {
        1
    }
}

/// Threads per block of the pipelined kernel.
pub const fn pipelined_threads(dim_split: u32) -> u32 {
    RPA_THREADS * dim_split
}

/// Whether the pipelined kernel covers a head size and KV element size: its shared rows must be
/// whole groups of eight 16-byte chunks for the permutation; fp8 only up to 128 (the per-warp
/// widening is not split over warps).
pub const fn pipelined_supports(head_dim: u32, kv_bytes: u32) -> bool {
    head_dim == 64 || head_dim == 128 || (head_dim == 256 && kv_bytes == 2)
}

/// Shared memory of one stage: K and V rows of a tile, `kv_bytes` bytes per element.
pub const fn pipelined_stage_bytes(head_dim: u32, kv_bytes: u32) -> u32 {
    2 * PIPE_TILE_KEYS * head_dim * kv_bytes
}

/// Per-warp area where 1-byte KV is widened to 16-bit K and V rows of the warp's 16 keys.
pub const fn pipelined_widen_bytes(head_dim: u32, kv_bytes: u32) -> u32 {
    if kv_bytes == 1 {
        2 * 16 * head_dim * 2
    } else {
        0
    }
}

/// Dynamic shared memory of the pipelined kernel: the stages and widening areas, reused by the
/// final warp merge.
pub const fn pipelined_shared_bytes(head_dim: u32, kv_bytes: u32) -> u32 {
    let warps = PIPE_KEY_GROUPS;
    let pipeline =
        PIPE_STAGES * pipelined_stage_bytes(head_dim, kv_bytes) + warps * pipelined_widen_bytes(head_dim, kv_bytes);
    let merge = super::paged_attention_mma::mma_shared_bytes(head_dim);
    if pipeline > merge {
        pipeline
    } else {
        merge
    }
}

/// How a KV element type enters the pipeline's shared memory.
pub trait StagedKv: KvElement {
    /// 1-byte types are widened to q's type per warp before `ldmatrix`; 16-bit ones are read in
    /// place.
    const WIDENED: bool;
    /// 16 bytes of KV (16 one-byte elements) as 16 elements of q's type, exact and unscaled.
    fn widen16<Q: MmaElement>(raw: [u32; 4]) -> [u32; 8];
}

macro_rules! staged_in_place {
    ($($t:ty),*) => {$(
        impl StagedKv for $t {
            const WIDENED: bool = false;
            fn widen16<Q: MmaElement>(_: [u32; 4]) -> [u32; 8] {
                unreachable!("16-bit KV is read in place (WIDENED is false)")
            }
        }
    )*};
}
staged_in_place!(f16, Bf16);

macro_rules! staged_widened {
    ($($t:ty),*) => {$(
        impl StagedKv for $t {
            const WIDENED: bool = true;
            #[inline(always)]
            fn widen16<Q: MmaElement>(raw: [u32; 4]) -> [u32; 8] {
                widen16_fp8::<Q, $t>(raw)
            }
        }
    )*};
}
staged_widened!(F8E4M3, F8E5M2);

/// Packed conversion of 16 fp8 bytes; chunks holding NaN or infinity take the exact per-element
/// path (rare: a finite cache never does).
#[inline(always)]
fn widen16_fp8<Q: MmaElement, KV: Fp8>(raw: [u32; 4]) -> [u32; 8] {
    let mut out = [0u32; 8];
    if KV::has_special(raw[0]) || KV::has_special(raw[1]) || KV::has_special(raw[2]) || KV::has_special(raw[3]) {
        unroll::<8>(|i| {
            let pair = raw[i / 2] >> (16 * (i % 2));
            // SAFETY: KV is a 1-byte transparent wrapper over its bits.
            let lo: KV = unsafe { core::mem::transmute_copy(&(pair as u8)) };
            let hi: KV = unsafe { core::mem::transmute_copy(&((pair >> 8) as u8)) };
            out[i] = Q::pack2(lo.widen(), hi.widen());
        });
    } else {
        unroll::<8>(|i| out[i] = KV::pair_to::<Q>(raw[i / 2], i % 2));
    }
    out
}

#[inline(always)]
unsafe fn rpa_pipelined<
    Q: MmaElement,
    KV: StagedKv,
    const D: usize,
    const KSTEPS: usize,
    const NTILES: usize,
    const DSPLIT: usize,
>(
    ptr: RpaPointers<Q, KV>,
    p: RpaParams,
) {
    // Programmatic dependent launch (sm_90 image; no-ops otherwise): let the next kernel (the
    // split merge, or the next call's) launch during this one's last wave, and touch no memory
    // before the kernel before this one has finished.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    // DSPLIT warps share each 16-key group, each accumulating NTILES 8-dim tiles of O (head dims
    // [dim_part * 8 * NTILES, ...)); all compute the group's full S.
    const { assert!(NTILES * 8 * DSPLIT == D && KSTEPS * 16 == D, "tiles cover the head dim") };
    // Warps sharing a key group would widen the same 1-byte rows into the same area.
    const { assert!(!KV::WIDENED || DSPLIT == 1, "1-byte KV needs one warp per key group") };
    let threads = pipelined_threads(DSPLIT as u32);
    // 16-bit KV is read by ldmatrix straight from the stage; 1-byte KV is widened first.
    let kv_bytes = core::mem::size_of::<KV>() as u32;
    let widened = KV::WIDENED;
    // fp8 KV enters the tensor cores exact; its scales apply to the logits (k_scale, folded into
    // sm_scale) and to the output (v_scale), in f32.
    let mut p = p;
    if widened {
        p.sm_scale *= p.k_scale;
    }
    // A stage: K rows then V rows of `tile` keys, `kv_row_bytes` each, as 16-byte chunks.
    let kv_row_bytes: u32 = D as u32 * kv_bytes;
    let row_chunks: u32 = kv_row_bytes / 16;
    let token_chunks: u32 = 2 * row_chunks;
    let tile = PIPE_TILE_KEYS;
    let stage_bytes = pipelined_stage_bytes(D as u32, kv_bytes);
    // Rows that ldmatrix reads hold D 16-bit elements.
    let row_bytes: u32 = D as u32 * 2;
    // Copies per thread and token (a quarter of the token's chunks): 8 for 16-bit KV and D = 128,
    // 16 for D = 256; passes of `threads / 4` tokens cover the tile.
    const COPIES: usize = 16;
    let copies_per_token_thread = token_chunks / 4;
    let tokens_per_pass = threads / 4;
    let passes = tile / tokens_per_pass;

    let tid = thread_idx_x();
    let lane = lane_id();
    let warp = tid / WARP_SIZE;
    // The 16-key group this warp computes, and which part of the head dims it accumulates.
    let (key_group, dim_part) = (warp % PIPE_KEY_GROUPS, warp / PIPE_KEY_GROUPS);
    let cq = (lane % 4) as usize;
    let blk = resolve_block(&ptr, &p, MMA_HEADS_PER_BLOCK);
    let (split_lo, split_hi) = (blk.split_lo, blk.split_hi);
    let qa = load_q_fragments::<Q, KV, KSTEPS>(&ptr, &p, &blk);

    let smem = dynamic_shared_mem::<f32>();
    let smem_bytes = smem as *mut u8;
    let smem_base = shared_address(smem);
    let widen_base = PIPE_STAGES * stage_bytes + key_group * pipelined_widen_bytes(D as u32, kv_bytes);
    let kv = ptr.kv as *const u8;
    let token_stride = 2 * p.num_kv_heads as usize * D * kv_bytes as usize; // bytes per token of the pool
    let head_offset = 2 * blk.g as usize * D * kv_bytes as usize;
    // Page-table entry of key j, when j is inside the split and its page inside the pool.
    let pages = FastDiv::new(p.page_size);
    let page_of = |j: u32| -> Option<(i32, u32)> {
        if j >= split_hi {
            return None;
        }
        let (slot, in_page) = pages.div_rem(j);
        let page = *blk.page_table.add(slot as usize);
        if page_is_valid(page, p.total_pages) {
            Some((page, in_page))
        } else {
            None
        }
    };

    // Copies tile `i` of the split into stage `i % PIPE_STAGES` (one commit group per tile).
    // Four threads share a token: thread q of the four copies chunks q, q + 4, q + 8, ... of its
    // K-then-V span, so each warp instruction reads 64 contiguous bytes of eight tokens, and a
    // thread resolves one page-table entry per 32 tokens. 16-bit rows are stored permuted for
    // ldmatrix; 1-byte rows as they are.
    let quad = tid % 4;
    // Inlined at each of its four call sites below (a closure called four times became a call).
    let issue_with = #[inline(always)]
    |i: u32, hint: CopyHint| {
        let stage_base = smem_base + (i % PIPE_STAGES) * stage_bytes;
        let tile_base = split_lo + i * tile;
        unroll::<2>(|pass| {
            if pass as u32 >= passes {
                return;
            }
            let token = pass as u32 * tokens_per_pass + tid / 4;
            let (src, valid) = match page_of(tile_base + token) {
                Some((page, in_page)) => {
                    let t = page as usize * p.page_size as usize + in_page as usize;
                    (kv.add(t * token_stride + head_offset + quad as usize * 16), true)
                }
                None => (kv, false),
            };
            let row = token * kv_row_bytes;
            unroll::<COPIES>(|c| {
                if (c as u32) < copies_per_token_thread {
                    let part = c as u32 * 4 + quad;
                    let (region, col) = (part / row_chunks, part % row_chunks);
                    let col = if widened { col } else { col ^ (token & 7) };
                    let dst = stage_base + region * tile * kv_row_bytes + row + col * 16;
                    cp_async_16(dst, src.add(c * 64), valid, hint);
                }
            });
        });
        commit_group();
    };
    // The L2 hint (`RpaParams::copy_hint`) is chosen once per tile and each arm's copies are
    // compiled with a constant hint: a hint decided per copy made ptxas emit every copy four ways
    // behind branches (seen in the tile kernel's SASS, benchmarks/NOTES.md "v4").
    let evict_first = if p.copy_hint & 2 != 0 { evict_first_policy() } else { 0 };
    let issue = #[inline(always)]
    |i: u32| match p.copy_hint & 3 {
        1 => issue_with(i, CopyHint { prefetch_256: true, evict_first: None }),
        0 => issue_with(i, CopyHint { prefetch_256: false, evict_first: None }),
        2 => issue_with(i, CopyHint { prefetch_256: false, evict_first: Some(evict_first) }),
        _ => issue_with(i, CopyHint { prefetch_256: true, evict_first: Some(evict_first) }),
    };

    let mut o = [[0.0f32; 4]; NTILES];
    // Running max and (this lane's share of the) sum for rows g and g + 8 of the tile.
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0.0f32; 2];
    let num_tiles = (split_hi - split_lo).div_ceil(tile);

    // This lane's ldmatrix rows among the warp's 16 keys: K for S (non-transposed: matrices are
    // keys 0-7 / 8-15 × dims +0 / +8), V for O (transposed: keys 0-7 / 8-15 × dims +0 / +8).
    let k_token = (lane / 16) * 8 + lane % 8;
    let k_half = (lane / 8) % 2;
    let v_token = ((lane / 8) % 2) * 8 + lane % 8;
    let v_half = lane / 16;

    for i in 0..PIPE_STAGES - 1 {
        if i < num_tiles {
            issue(i);
        } else {
            commit_group();
        }
    }
    for i in 0..num_tiles {
        // Tile i has landed for this thread; after the barrier, for every thread, and every warp
        // is past tile i - 1, whose stage the next copies reuse.
        wait_group::<{ PIPE_STAGES - 2 }>();
        sync_threads();
        if i + PIPE_STAGES - 1 < num_tiles {
            issue(i + PIPE_STAGES - 1);
        } else {
            commit_group();
        }

        let stage = (i % PIPE_STAGES) * stage_bytes;
        let key0 = split_lo + i * tile + key_group * 16;
        // Bit k: key key0 + k is inside the split and on a valid page (else zero-filled above).
        let present = warp_ballot(lane < 16 && page_of(key0 + lane).is_some());

        // Where the warp's 16 K rows (V rows follow `v_offset` later) are in 16-bit form.
        let (k_base, v_offset) = if widened {
            // Lane l widens 16-byte chunks l, l + 32, ... of the warp's K rows then V rows.
            sync_warp(); // the previous tile's ldmatrix reads of the area are done
            let chunks_per_region = 16 * row_chunks;
            unroll::<8>(|c| {
                let chunk = lane + 32 * c as u32;
                if chunk < 2 * chunks_per_region {
                    let region = chunk / chunks_per_region;
                    let (key, col) = ((chunk % chunks_per_region) / row_chunks, chunk % row_chunks);
                    let src = stage + region * tile * kv_row_bytes + (key_group * 16 + key) * kv_row_bytes + col * 16;
                    let raw = *(smem_bytes.add(src as usize) as *const [u32; 4]);
                    let wide = KV::widen16::<Q>(raw);
                    let row = widen_base + region * 16 * row_bytes + key * row_bytes;
                    unroll::<2>(|h| {
                        let c16 = (2 * col + h as u32) ^ (key & 7);
                        let dst = smem_bytes.add((row + c16 * 16) as usize) as *mut [u32; 4];
                        *dst = [wide[4 * h], wide[4 * h + 1], wide[4 * h + 2], wide[4 * h + 3]];
                    });
                }
            });
            sync_warp();
            (smem_base + widen_base, 16 * row_bytes)
        } else {
            (smem_base + stage + key_group * 16 * row_bytes, tile * row_bytes)
        };

        // S = Q Kᵀ over the warp's 16 keys.
        let mut s = [[0.0f32; 4]; 2];
        let k_row = k_base + k_token * row_bytes;
        unroll::<KSTEPS>(|k| {
            let col = k as u32 * 2 + k_half;
            let b = ldmatrix_x4(k_row + ((col ^ (k_token & 7)) * 16));
            s[0] = Q::mma(qa[k], [b[0], b[1]], s[0]);
            s[1] = Q::mma(qa[k], [b[2], b[3]], s[1]);
        });
        // Element e of n-tile nt is row g + 8*(e/2), key key0 + nt*8 + 2*cq + e%2.
        unroll::<2>(|nt| {
            unroll::<4>(|e| {
                let kk = nt * 8 + 2 * cq + (e & 1);
                s[nt][e] = if present & (1 << kk) != 0 {
                    finish_logit(s[nt][e], key0 + kk as u32, &blk, &p)
                } else {
                    f32::NEG_INFINITY
                };
            })
        });
        let pa = online_softmax_step::<Q, NTILES>(&s, &mut m, &mut l, &mut o);

        // O += P V: one ldmatrix.trans gives the B fragments of two 8-dim n-tiles.
        let v_row = k_base + v_offset + v_token * row_bytes;
        unroll::<NTILES>(|nt| {
            if nt % 2 == 0 {
                let col = (dim_part * NTILES as u32) + nt as u32 + v_half;
                let b = ldmatrix_x4_trans(v_row + ((col ^ (v_token & 7)) * 16));
                o[nt] = Q::mma(pa, [b[0], b[1]], o[nt]);
                o[nt + 1] = Q::mma(pa, [b[2], b[3]], o[nt + 1]);
            }
        });
    }
    // Every copy has landed and every warp is done with the stages before they become the merge
    // area.
    wait_all();
    sync_threads();
    if widened {
        unroll::<NTILES>(|nt| unroll::<4>(|e| o[nt][e] *= p.v_scale));
    }
    let dim0 = dim_part as usize * NTILES * 8;
    store_warp_state::<NTILES>(smem, D, key_group as usize, dim0, &m, &l, &o);
    sync_threads();
    merge_warps_and_store(&ptr, &p, &blk, smem, MMA_HEADS_PER_BLOCK as usize, 2 + D, threads as usize);
}

/// One pipelined kernel per (q dtype, KV dtype, head_dim): `rpa_pipe_<q>_<kv>_d<D>`.
macro_rules! rpa_pipe_kernels {
    ($( $q:ty, $kv:ty => $($name:ident $d:literal),* ; )*) => {
        attention_kernels! { $( $(
            $name: $q, $kv => rpa_pipelined[$d, $d / 16, $d / 8 / pipelined_dim_split($d) as usize,
                pipelined_dim_split($d) as usize];
        )* )* }
    };
}

rpa_pipe_kernels! {
    f16, f16 => rpa_pipe_f16_f16_d64 64, rpa_pipe_f16_f16_d128 128, rpa_pipe_f16_f16_d256 256;
    f16, F8E4M3 => rpa_pipe_f16_e4m3_d64 64, rpa_pipe_f16_e4m3_d128 128;
    f16, F8E5M2 => rpa_pipe_f16_e5m2_d64 64, rpa_pipe_f16_e5m2_d128 128;
    Bf16, Bf16 => rpa_pipe_bf16_bf16_d64 64, rpa_pipe_bf16_bf16_d128 128, rpa_pipe_bf16_bf16_d256 256;
    Bf16, F8E4M3 => rpa_pipe_bf16_e4m3_d64 64, rpa_pipe_bf16_e4m3_d128 128;
    Bf16, F8E5M2 => rpa_pipe_bf16_e5m2_d64 64, rpa_pipe_bf16_e5m2_d128 128;
}
