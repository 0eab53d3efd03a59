//! Ragged paged attention (the torch_xla / JAX `ragged_paged_attention` contract) on the GPU.
//!
//! Work decomposition (flash-decoding style):
//! - one block per (query row `t`, KV head `g`, chunk of up to `HC` query heads of that KV head,
//!   KV split `s`): all query heads of a KV head are handled together so each key and value is
//!   read once per row, whatever the GQA ratio (MQA included, in chunks of `HC` heads);
//! - a block's 4 warps take runs of `KB` consecutive keys of the split, loading a run's K and V
//!   rows together before using them, with one softmax rescale per run; within a warp, lane `l` owns head
//!   dimensions `[l*DPL, (l+1)*DPL)` of q, K, V and the accumulator (16-byte loads for bf16 with
//!   DPL = 8, coalesced over the warp: one key row per warp instruction);
//! - each warp keeps an online softmax (running max, sum, accumulator) per head; warps merge
//!   through shared memory at the end;
//! - long contexts are split over `gridDim.z` (`num_splits`); every split writes a normalized
//!   partial output and its log-sum-exp, and a merge kernel combines them; or, when the splits
//!   run as one thread-block cluster (the pipelined kernel on sm_90), the blocks merge them
//!   through distributed shared memory ([`super::merge`] holds every way). With one split the
//!   block writes the output directly.
//!
//! Invalid metadata is resolved by [`crate::attention`] (never an out-of-bounds access): every
//! global index below is bounded by the static shapes in [`RpaParams`].

use crate::attention::{clamp_num_seqs, find_sequence, page_is_valid, row_window, RowWindow, RpaParams};
use crate::math::{exp2_approx, max_f32, tanh, LOG2_E};
use crate::num::{Bf16, Element, KvElement, F8E4M3, F8E5M2};
use crate::shared::dynamic_shared_mem;
use crate::thread::{block_idx_x, block_idx_y, block_idx_z, sync_threads, thread_idx_x};
use crate::warp::{lane_id, warp_sum_f32, WARP_SIZE};

use crate::kernels::block_slot::{BlockSlot, WholeBlock};
use crate::kernels::decode::merge::{merge_warps_and_store, WarpStates};
use crate::kernels::unroll;

/// Warps per block of the attention kernel.
pub const RPA_WARPS: u32 = 4;
/// Threads per block of both attention kernels.
pub const RPA_THREADS: u32 = RPA_WARPS * WARP_SIZE;

/// Query heads handled by one block (a GQA group larger than this is split over `gridDim.y`).
/// q and the accumulators take `2 * HEADS_PER_BLOCK * DPL` registers per lane; 4 heads measured
/// faster than 8 on an H200 (occupancy, benchmarks/NOTES.md).
pub const HEADS_PER_BLOCK: u32 = 4;

/// Keys a warp loads together before using them (memory-level parallelism), bounded by the
/// registers K and V of a run take (`2 * KB * DPL` floats per lane).
pub const fn keys_per_warp_step(dims_per_lane: u32) -> u32 {
    if dims_per_lane >= 8 {
        2
    } else {
        4
    }
}

/// Dynamic shared memory the attention kernel needs, in bytes.
pub const fn rpa_shared_bytes(dims_per_lane: u32) -> u32 {
    let hc = HEADS_PER_BLOCK;
    RPA_WARPS * hc * (2 + WARP_SIZE * dims_per_lane) * 4
}

/// Smallest dims-per-lane that covers `head_dim` (2, 4 or 8), or None if it exceeds 256.
pub const fn dims_per_lane(head_dim: u32) -> Option<u32> {
    if head_dim <= 64 {
        Some(2)
    } else if head_dim <= 128 {
        Some(4)
    } else if head_dim <= 256 {
        Some(8)
    } else {
        None
    }
}

/// Pointers of one launch (kept out of the by-value parameter struct, see [`RpaParams`]).
pub(crate) struct RpaPointers<Q, KV> {
    pub q: *const Q,
    pub kv: *const KV,
    pub kv_lens: *const i32,
    pub page_indices: *const i32,
    pub cu_q_lens: *const i32,
    pub num_seqs: *const i32,
    pub out: *mut Q,
    pub part_o: *mut f32,
    pub part_lse: *mut f32,
    /// The tile kernels' plan with `RpaParams::decode_apart` (null otherwise): never read; with
    /// `decode_apart` 2, block (0, 0, 0) writes its inputs word.
    pub plan: *const u32,
}

/// What one block of an attention kernel works on: a query row, a chunk of the query heads of
/// one KV head, and the keys of one split.
pub(crate) struct Block {
    /// Query row.
    pub t: u32,
    /// KV head.
    pub g: u32,
    /// First query head of the chunk, and how many heads of it exist (<= the kernel's chunk).
    pub h0: u32,
    pub hc: usize,
    pub split: u32,
    pub window: RowWindow,
    /// Page-table row of the row's sequence.
    pub page_table: *const i32,
    /// Keys `[split_lo, split_hi)` of this split.
    pub split_lo: u32,
    pub split_hi: u32,
}

/// The key split of this block: the highest splits first. Blocks are scheduled in launch order,
/// and the late splits of a batch exist only for its long sequences, so the longest work starts
/// first and the short (or empty, exiting at once) blocks fill in behind it instead of trailing it.
#[inline(always)]
pub(crate) fn block_split(p: &RpaParams) -> u32 {
    // Not `block_split_at(p, block_idx_z())`: reading the index after the count keeps the
    // kernels' instruction order of before.
    let splits = p.num_splits.max(1);
    splits - 1 - block_idx_z().min(splits - 1)
}

/// [`block_split`] of a block at grid z `z` (a [`BlockSlot`]'s).
#[inline(always)]
pub(crate) fn block_split_at(p: &RpaParams, z: u32) -> u32 {
    let splits = p.num_splits.max(1);
    splits - 1 - z.min(splits - 1)
}

/// Resolves the block's row (sequence, visible keys, split) from the grid position; invalid
/// metadata is handled by [`crate::attention`] (never an out-of-bounds access).
///
/// # Safety
/// Every thread of the block calls it on the grid `attention_kernels`' `# Safety` describes, with
/// that kernel's `ptr` and `p`, after its grid dependency wait.
#[inline(always)]
pub(crate) unsafe fn resolve_block<Q, KV>(ptr: &RpaPointers<Q, KV>, p: &RpaParams, heads_per_chunk: u32) -> Block {
    let (t, head_chunk) = (block_idx_x(), block_idx_y());
    let group = p.num_q_heads / p.num_kv_heads;
    let chunks = group.div_ceil(heads_per_chunk);
    let g = head_chunk / chunks;
    let chunk = head_chunk % chunks;
    let h0 = g * group + chunk * heads_per_chunk;
    let hc = (group - chunk * heads_per_chunk).min(heads_per_chunk) as usize;
    let split = block_split(p);
    // The row's sequence `i` and its `cu_q_lens[i]`, `cu_q_lens[i + 1]`, `kv_lens[i]`.
    let cu = |i: u32| *ptr.cu_q_lens.add(i as usize);
    // A decode row (row t is sequence t) resolves from loads whose addresses depend on `t` alone,
    // issued together: one round trip to memory before the page table, where the search and the
    // row's lookups are five dependent ones (`num_seqs`, `cu_q_lens[0]`, `[t]`, `[t + 1]`, then
    // `kv_lens`), a large share of a short chain's time. It is taken exactly when
    // `find_sequence` would answer `t` (the same tests on the same values); other rows search.
    // Volatile: plain loads were sunk by LLVM into the branches of the tests, one round trip each.
    // `num_seqs` is a scalar buffer: loaded once, for both paths. All five loads sit in one basic
    // block before any use: behind a branch (on `max_num_seqs`) the four row loads waited for
    // `num_seqs`, whose clamp ptxas placed before that branch: two round trips (SASS,
    // benchmarks/NOTES.md "v16"). Without a guess (`max_num_seqs` 0) they read in-bounds
    // stand-ins (`cu_q_lens[0]`) and the row is searched.
    let load = |at: *const i32| core::ptr::read_volatile(at);
    let guessing = p.max_num_seqs > 0;
    let guess = t.min(p.max_num_seqs.saturating_sub(1)); // in bounds whatever t is, when guessing
    let kv_len_at = if guessing { ptr.kv_lens.add(guess as usize) } else { ptr.cu_q_lens };
    let next = guess as usize + guessing as usize;
    let (raw_num_seqs, cu0, lo, hi, kv_len) = (
        load(ptr.num_seqs),
        load(ptr.cu_q_lens),
        load(ptr.cu_q_lens.add(guess as usize)),
        load(ptr.cu_q_lens.add(next)),
        load(kv_len_at),
    );
    let num_seqs = clamp_num_seqs(raw_num_seqs, p.max_num_seqs);
    let ti = t as i32;
    let found = guessing && guess == t && t < num_seqs && cu0 <= ti && lo <= ti && ti < hi;
    let decode_row = found.then_some((t, lo, hi, kv_len));
    let row = decode_row
        .or_else(|| find_sequence(t as i32, num_seqs, cu).map(|i| (i, cu(i), cu(i + 1), *ptr.kv_lens.add(i as usize))));
    let (window, seq_idx) = match row {
        Some((i, lo, hi, kv_len)) => {
            (row_window(t as i32, lo, hi, kv_len, p.pages_per_seq * p.page_size, p.sliding_window), i)
        }
        None => (row_window(0, 0, 0, 0, 0, 0), 0),
    };
    let (visit_lo, visit_hi) = window.visit_range(p.include_masked != 0);
    let split_lo = visit_lo.saturating_add(split.saturating_mul(p.split_len)).min(visit_hi);
    let split_hi = split_lo.saturating_add(p.split_len).min(visit_hi);
    let page_table = ptr.page_indices.add(seq_idx as usize * p.pages_per_seq as usize);
    Block { t, g, h0, hc, split, window, page_table, split_lo, split_hi }
}

/// A block's KV head, chunk of its query heads and key split, from the grid position. With
/// [`block_of_row`], what [`resolve_block`] computes, for the pipelined kernel's grid of sequences
/// (`resolve_sequence_block`); `resolve_block` keeps its own copy: sharing these made LLVM move
/// the head arithmetic ahead of the row's metadata loads in every attention kernel.
#[derive(Clone, Copy)]
pub(crate) struct BlockHeads {
    g: u32,
    /// The chunk's first query head.
    pub(crate) h0: u32,
    /// Query heads in the chunk.
    pub(crate) hc: usize,
    split: u32,
}

impl BlockHeads {
    #[inline(always)]
    pub(crate) fn of(p: &RpaParams, heads_per_chunk: u32, slot: impl BlockSlot) -> Self {
        let head_chunk = slot.y();
        let group = p.num_q_heads / p.num_kv_heads;
        let chunks = group.div_ceil(heads_per_chunk);
        let g = head_chunk / chunks;
        let chunk = head_chunk % chunks;
        let h0 = g * group + chunk * heads_per_chunk;
        let hc = (group - chunk * heads_per_chunk).min(heads_per_chunk) as usize;
        BlockHeads { g, h0, hc, split: block_split_at(p, slot.z()) }
    }
}

/// The block of row `t` of sequence `seq_idx`, whose rows are `[lo, hi)` and keys `kv_len`, for the
/// block's `heads` and split.
///
/// # Safety
/// `seq_idx` below `p.max_num_seqs` (its page-table row lies inside `ptr.page_indices`); `ptr`
/// and `p` as the attention kernels take them.
#[inline(always)]
pub(crate) unsafe fn block_of_row<Q, KV>(
    ptr: &RpaPointers<Q, KV>,
    p: &RpaParams,
    heads: BlockHeads,
    t: u32,
    (seq_idx, lo, hi, kv_len): (u32, i32, i32, i32),
) -> Block {
    let BlockHeads { g, h0, hc, split } = heads;
    let window = row_window(t as i32, lo, hi, kv_len, p.pages_per_seq * p.page_size, p.sliding_window);
    let (visit_lo, visit_hi) = window.visit_range(p.include_masked != 0);
    let split_lo = visit_lo.saturating_add(split.saturating_mul(p.split_len)).min(visit_hi);
    let split_hi = split_lo.saturating_add(p.split_len).min(visit_hi);
    let page_table = ptr.page_indices.add(seq_idx as usize * p.pages_per_seq as usize);
    Block { t, g, h0, hc, split, window, page_table, split_lo, split_hi }
}

/// Address of key `j`'s K row for KV head `g` (V follows at `+ head_dim`), or None when its page
/// index is outside the pool.
///
/// # Safety
/// `blk` a block of the call's `p` ([`block_of_row`], [`resolve_block`]), `j` below
/// `p.pages_per_seq * p.page_size` (an entry of its page-table row), `kv` the call's KV pool.
#[inline(always)]
pub(crate) unsafe fn key_row<KV>(kv: *const KV, blk: &Block, p: &RpaParams, j: u32) -> Option<*const KV> {
    let page = *blk.page_table.add((j / p.page_size) as usize);
    if !page_is_valid(page, p.total_pages) {
        return None;
    }
    let token = page as usize * p.page_size as usize + (j % p.page_size) as usize;
    let d = p.head_dim as usize;
    Some(kv.add(token * 2 * p.num_kv_heads as usize * d + 2 * blk.g as usize * d))
}

/// The general kernel's body (see the module docs): each warp a share of the split's keys for the
/// block's query heads, then the warps' merge.
///
/// # Safety
/// As the attention kernel that calls it (`attention_kernels`' `# Safety`): its launch, and `ptr`
/// and `p` as it passes them; every thread of the block calls it.
#[inline(always)]
unsafe fn rpa_partial<Q: Element, KV: KvElement, const DPL: usize, const HC: usize, const KB: usize>(
    ptr: RpaPointers<Q, KV>,
    p: RpaParams,
) {
    let lane = lane_id();
    let warp = thread_idx_x() / WARP_SIZE;
    // Programmatic dependent launch (sm_90 image; no-ops otherwise): let the next kernel (the
    // split merge, or the next call's) launch during this one's last wave, and touch no memory
    // before the kernel before this one has finished.
    crate::grid_dependency::launch_dependents();
    crate::grid_dependency::wait_for_prerequisites();
    let d = p.head_dim as usize;
    let blk = resolve_block(&ptr, &p, HC as u32);
    let (t, h0, hc, window, split_lo, split_hi) = (blk.t, blk.h0, blk.hc, blk.window, blk.split_lo, blk.split_hi);
    let lane_dim = lane as usize * DPL;
    let lane_active = lane_dim < d;

    // q for this lane's dims, pre-multiplied by sm_scale.
    let mut q = [[0.0f32; DPL]; HC];
    if lane_active {
        unroll::<HC>(|hh| {
            if hh < hc {
                let row = ptr.q.add((t as usize * p.num_q_heads as usize + h0 as usize + hh) * d + lane_dim);
                let v: [Q; DPL] = crate::kernels::load_vec(row);
                unroll::<DPL>(|k| q[hh][k] = v[k].to_f32() * p.sm_scale);
            }
        });
    }

    let mut m = [f32::NEG_INFINITY; HC];
    let mut l = [0.0f32; HC];
    let mut acc = [[0.0f32; DPL]; HC];

    // Each warp takes runs of KB consecutive keys (warp w: keys [base + w*KB, base + (w+1)*KB)),
    // issues all their K/V loads before using any, and rescales its softmax once per run.
    let mut base = split_lo + warp * KB as u32;
    while base < split_hi {
        let mut kf = [[0.0f32; DPL]; KB];
        let mut vf = [[0.0f32; DPL]; KB];
        let mut present = [false; KB];
        unroll::<KB>(|kk| {
            let j = base + kk as u32;
            if j < split_hi {
                if let Some(row) = key_row(ptr.kv, &blk, &p, j) {
                    present[kk] = true;
                    if lane_active {
                        let kr: [KV; DPL] = crate::kernels::load_vec(row.add(lane_dim));
                        let vr: [KV; DPL] = crate::kernels::load_vec(row.add(d + lane_dim));
                        unroll::<DPL>(|k| {
                            kf[kk][k] = kr[k].widen();
                            vf[kk][k] = vr[k].widen();
                        });
                    }
                }
            }
        });
        if p.kv_scaled != 0 && lane_active {
            // The contract scales in f32, then casts K and V to q's dtype.
            unroll::<KB>(|kk| {
                unroll::<DPL>(|k| {
                    kf[kk][k] = Q::from_f32(kf[kk][k] * p.k_scale).to_f32();
                    vf[kk][k] = Q::from_f32(vf[kk][k] * p.v_scale).to_f32();
                })
            });
        }
        unroll::<HC>(|hh| {
            if hh < hc {
                // Logits of the run (-inf for absent keys: past the split or on an invalid page).
                let mut s = [f32::NEG_INFINITY; KB];
                let mut s_max = f32::NEG_INFINITY;
                unroll::<KB>(|kk| {
                    if present[kk] {
                        let mut dot = 0.0f32;
                        unroll::<DPL>(|k| dot += q[hh][k] * kf[kk][k]);
                        let mut x = warp_sum_f32(dot);
                        if p.soft_cap != 0.0 {
                            x = p.soft_cap * tanh(x / p.soft_cap);
                        }
                        if p.include_masked != 0 && !window.visible(base + kk as u32) {
                            x += p.mask_value;
                        }
                        s[kk] = x;
                        s_max = max_f32(s_max, x);
                    }
                });
                let m_new = max_f32(m[hh], s_max);
                if m_new != f32::NEG_INFINITY {
                    let corr = exp2_approx((m[hh] - m_new) * LOG2_E);
                    l[hh] *= corr;
                    unroll::<DPL>(|k| acc[hh][k] *= corr);
                    unroll::<KB>(|kk| {
                        let w = exp2_approx((s[kk] - m_new) * LOG2_E);
                        l[hh] += w;
                        unroll::<DPL>(|k| acc[hh][k] += w * vf[kk][k]);
                    });
                    m[hh] = m_new;
                }
            }
        });
        base += RPA_WARPS * KB as u32;
    }

    // Merge the warps: shared layout [warp][head][2 + 32*DPL] = (m, l, acc[32*DPL]).
    let stride = 2 + WARP_SIZE as usize * DPL;
    let smem = dynamic_shared_mem::<f32>();
    unroll::<HC>(|hh| {
        let base = smem.add((warp as usize * HC + hh) * stride);
        if lane == 0 {
            *base = m[hh];
            *base.add(1) = l[hh];
        }
        unroll::<DPL>(|k| *base.add(2 + lane_dim + k) = acc[hh][k]);
    });
    sync_threads();
    let states = WarpStates {
        smem,
        warps: RPA_WARPS as usize,
        rows: HC,
        stride,
        cluster_area: core::ptr::null_mut(),
        counts_for_merge_blocks: false,
    };
    merge_warps_and_store(&ptr, &p, &blk, states, RPA_THREADS as usize, WholeBlock);
}

/// Declares attention kernels: `name: q type, KV type => inner_function[const arguments after
/// the two types]`. Every attention kernel has this parameter list (the host pushes it in this order).
macro_rules! attention_kernels {
    ($( $name:ident: $q:ty, $kv:ty => $inner:ident[$($arg:expr),*] $(bounds($threads:literal, $blocks:literal))?; )*) => {$(
        /// One attention kernel (see the module docs); launched by the host's `launch_cuda`.
        ///
        /// # Safety
        /// Grid `(max_tokens, num_kv_heads * head chunks, num_splits)`, the block size and shared
        /// memory the host computes; every pointer a device buffer of the shape `params` describes
        /// (`part_o`/`part_lse` sized for `num_splits` when it is above 1; `plan` the tile plan's
        /// header with `params.decode_apart`, on a grid of `max_num_seqs` sequences, else null;
        /// with `decode_apart` 2 its inputs word is this grid's to write until the tile kernel
        /// after it has read it).
        /// Metadata values may be anything: they never lead outside the buffers.
        #[$crate::kernel $((max_threads = $threads, min_blocks = $blocks))?]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            q: *const $q, kv: *const $kv, kv_lens: *const i32, page_indices: *const i32,
            cu_q_lens: *const i32, num_seqs: *const i32, out: *mut $q, part_o: *mut f32,
            part_lse: *mut f32, plan: *const u32, params: $crate::attention::RpaParams,
        ) {
            $inner::<$q, $kv, $({ $arg }),*>(
                $crate::kernels::decode::general::RpaPointers {
                    q, kv, kv_lens, page_indices, cu_q_lens, num_seqs, out, part_o, part_lse, plan,
                },
                params,
            )
        }
    )*};
}
pub(crate) use attention_kernels;

/// One general kernel per (q dtype, KV dtype, dims per lane): `rpa_<q>_<kv>_dpl<N>`.
macro_rules! rpa_kernels {
    ($( $name:ident: $q:ty, $kv:ty, $dpl:literal; )*) => {
        attention_kernels! { $(
            $name: $q, $kv => rpa_partial[$dpl, HEADS_PER_BLOCK as usize, keys_per_warp_step($dpl) as usize];
        )* }
    };
}

rpa_kernels! {
    rpa_f32_f32_dpl2: f32, f32, 2;
    rpa_f32_f32_dpl4: f32, f32, 4;
    rpa_f32_f32_dpl8: f32, f32, 8;
    rpa_f16_f16_dpl2: f16, f16, 2;
    rpa_f16_f16_dpl4: f16, f16, 4;
    rpa_f16_f16_dpl8: f16, f16, 8;
    rpa_bf16_bf16_dpl2: Bf16, Bf16, 2;
    rpa_bf16_bf16_dpl4: Bf16, Bf16, 4;
    rpa_bf16_bf16_dpl8: Bf16, Bf16, 8;
    rpa_f32_e4m3_dpl2: f32, F8E4M3, 2;
    rpa_f32_e4m3_dpl4: f32, F8E4M3, 4;
    rpa_f32_e4m3_dpl8: f32, F8E4M3, 8;
    rpa_f16_e4m3_dpl2: f16, F8E4M3, 2;
    rpa_f16_e4m3_dpl4: f16, F8E4M3, 4;
    rpa_f16_e4m3_dpl8: f16, F8E4M3, 8;
    rpa_bf16_e4m3_dpl2: Bf16, F8E4M3, 2;
    rpa_bf16_e4m3_dpl4: Bf16, F8E4M3, 4;
    rpa_bf16_e4m3_dpl8: Bf16, F8E4M3, 8;
    rpa_f32_e5m2_dpl2: f32, F8E5M2, 2;
    rpa_f32_e5m2_dpl4: f32, F8E5M2, 4;
    rpa_f32_e5m2_dpl8: f32, F8E5M2, 8;
    rpa_f16_e5m2_dpl2: f16, F8E5M2, 2;
    rpa_f16_e5m2_dpl4: f16, F8E5M2, 4;
    rpa_f16_e5m2_dpl8: f16, F8E5M2, 8;
    rpa_bf16_e5m2_dpl2: Bf16, F8E5M2, 2;
    rpa_bf16_e5m2_dpl4: Bf16, F8E5M2, 4;
    rpa_bf16_e5m2_dpl8: Bf16, F8E5M2, 8;
}
