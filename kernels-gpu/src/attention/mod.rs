//! Ragged paged attention: the semantics shared by the GPU kernels and the CPU implementation.
//!
//! Everything here is target-independent integer logic, so both sides resolve rows, windows and
//! invalid metadata the same way. The contract (torch_xla / JAX `ragged_paged_attention`):
//! sequence `i` owns query rows `[cu_q_lens[i], cu_q_lens[i+1])` and the first `kv_lens[i]` tokens
//! of pages `page_indices[i, ..]`; row `r` of a sequence sits at absolute position
//! `kv_len - q_len + r` and sees keys `j <= pos` (and `j > pos - sliding_window`).
//!
//! Invalid device metadata cannot raise inside a kernel, so it is *defined* here instead:
//! - `num_seqs` is clamped to `[0, max_num_seqs]`;
//! - `kv_lens[i]` is clamped to `[0, pages_per_seq * page_size]`;
//! - a row that no sequence owns (padding past `cu_q_lens[num_seqs]`, or rows the binary search
//!   cannot place because `cu_q_lens` decreases) is written as zeros;
//! - a row whose visible range is empty (`q_len > kv_len` puts it before position 0) is zeros;
//! - a key whose page index is outside `[0, total_num_pages)` takes no part in the softmax.
//!
//! The device-side parts the attention kernels share are its submodules: [`softmax`] (online
//! softmax on `mma` fragments), [`mask`] (causal, window and presence masks) and [`planner`] (a
//! ragged batch's query tiles, planned on the device).

pub mod mask;
pub mod planner;
pub mod softmax;

/// Scalar parameters of one ragged paged attention launch, passed by value to the kernel.
/// Only 4-byte scalars: an aggregate holding pointers would lose `ld.global` on nvptx.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RpaParams {
    /// Rows of `q` (`max_num_batched_tokens`).
    pub max_tokens: u32,
    pub num_q_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    pub page_size: u32,
    pub pages_per_seq: u32,
    pub total_pages: u32,
    pub max_num_seqs: u32,
    /// KV splits per (row, KV head); 1 writes the output directly.
    pub num_splits: u32,
    /// Keys per split (a multiple of the warps per block).
    pub split_len: u32,
    /// 0 = no sliding window.
    pub sliding_window: u32,
    /// 1 = masked keys take part with `logit + mask_value` (see [`masked_keys_matter`]).
    pub include_masked: u32,
    /// 1 = K/V are multiplied by `k_scale`/`v_scale` and rounded to q's dtype.
    pub kv_scaled: u32,
    /// L2 hint of the pipelined kernel's K/V copies: 1 = prefetch 256 bytes (0 for the other
    /// kernels, whose copies take fixed hints).
    pub copy_hint: u32,
    /// Query rows per tile of the tiled kernel (`64 / GQA group`); 0 for the other kernels.
    pub tile_rows: u32,
    /// Most work items of the tiled kernel's plan (its grid width); 0 for the other kernels.
    pub plan_capacity: u32,
    /// How the warp-specialized kernel's two consumer warpgroups share the tensor cores: 0 =
    /// freely, 1 = taking turns to issue their products (ping-pong); 0 for the other kernels.
    pub consumer_schedule: u32,
    /// How the warp-specialized kernel's blocks take (item, KV head) pairs: 0 = in a fixed snake
    /// order, 1 = from a counter (a dynamic schedule); 0 for the other kernels.
    pub dynamic_pairs: u32,
    /// Shared-memory stages of the pipelined kernel's K/V ring (2 to
    /// [`PIPE_MAX_STAGES`](crate::kernels::decode::pipelined::layout::PIPE_MAX_STAGES)); 0 for
    /// the other kernels.
    pub pipe_stages: u32,
    /// Nonzero: the `num_splits` (2 to 16) blocks of each (row, head chunk) are one thread-block
    /// cluster and merge their splits through distributed shared memory (the pipelined kernel on
    /// the sm_90 image); 0: partials in global memory and the merge kernel.
    pub cluster_splits: u32,
    /// How the pipelined kernel's warps share a tile's copies: 0 = all threads copy the tile and
    /// meet at a block barrier per tile; 1 = each key group's warps copy and wait for its own keys
    /// (no block barrier in the tile loop). 0 for the other kernels.
    pub pipe_mode: u32,
    /// A tag of this launch, never 0, for the kernel's words in the workspace, whose contents
    /// before the launch may be anything ([`launch_tagged_word`]); unique per call (a mix's
    /// launches share one, below) but the same in every replay of a captured graph, so each
    /// kernel leaves its words reusable under the tag. Nonzero for the pipelined kernel with
    /// `merge_blocks`: the grid's merge blocks wait for the splits of each (row, head chunk) at
    /// an 8-byte counter, after the partials ([`split_counters_offset`]); 0 there: a merge kernel
    /// or a cluster merges. The warp-specialized tile kernel's blocks build its plan
    /// in the kernel under it (`prefill::hopper::scheduler::plan_or_wait`); with a mixed batch's
    /// decode rows apart, the decode kernel publishes the plan header's inputs word under the
    /// tile kernel's tag (`decode_apart` 2), or the planning kernel `rpa_plan_ws` the plan
    /// (`decode_apart` 1; a call's launches share the tag). 0 for the other kernels.
    pub launch_tag: u32,
    /// Nonzero: the pipelined kernel loads the page-table entries of its first tiles together
    /// with the row's metadata, on the decode guess (row `t` is sequence `t`, keys from 0), and
    /// uses them where the resolved block agrees: the first copies leave one round trip sooner.
    /// 0 for the other kernels.
    pub table_preload: u32,
    /// Nonzero: a mixed batch's decode sequences run apart from its other rows
    /// ([`is_apart_decode`]): the tile kernels' plan leaves them out, and the pipelined kernel's
    /// twins on a grid of sequences (`rpa_pipe_seq_*`, `rpa_pipe_kr_seq_*`) compute their rows.
    /// Where the plan falls back (a decreasing `cu_q_lens`) the tile kernel writes every row,
    /// the decode kernel's after its grid. 2: the warp-specialized tile kernel plans itself (its
    /// block 0) once the decode kernel's block (0, 0, 0) has published the plan header's inputs
    /// word under `launch_tag` (two launches); 1: a planning kernel comes first (three);
    /// [`DECODE_APART_ONE_LAUNCH`]: both in one launch (`kernels::mix`), where the decode
    /// blocks stand down where the plan falls back. Set on every launch of such a call; 0 for
    /// every other.
    pub decode_apart: u32,
    /// Nonzero (the pipelined kernel on a grid of rows, its partials in the workspace, a nonzero
    /// `launch_tag`): grid z holds `merge_blocks` slices after the `num_splits` split slices, and
    /// block (row, head chunk, `num_splits + j`) merges the chunk's query head `j` once every
    /// split of the chunk has counted in at its counter: a split call in one launch, merged on
    /// as many blocks as a merge kernel's grid. 0 for the other kernels and plans.
    pub merge_blocks: u32,
    pub sm_scale: f32,
    /// 0 = no soft cap.
    pub soft_cap: f32,
    pub mask_value: f32,
    pub k_scale: f32,
    pub v_scale: f32,
}

/// Offset in f32 elements, from the split partials' log-sum-exps (`lse_count` of them), of the
/// merge blocks' counters ([`RpaParams::merge_blocks`]): 8-byte words, one per (row, head
/// chunk) in grid order (`row * chunks + chunk`), after the log-sum-exps.
pub const fn split_counters_offset(lse_count: usize) -> usize {
    lse_count.next_multiple_of(2)
}

/// A word of a kernel's own in the workspace that holds `value` (16 bits) under `tag`
/// ([`RpaParams::launch_tag`]): the tag in the high 32 bits, 16 more bits derived from it, `value`
/// in the low 16. A word the workspace held before (any data, a word of another launch) passes
/// for one of this launch only if it matches 48 bits derived from the tag.
#[inline(always)]
pub const fn launch_tagged_word(tag: u32, value: u32) -> u64 {
    let check = (tag ^ 0x5bd1_e995).rotate_left(13) & 0xffff;
    ((tag as u64) << 32) | ((check as u64) << 16) | (value & 0xffff) as u64
}

/// Default `mask_value` of the contract: `-0.7 * f32::MAX`.
pub const DEFAULT_MASK_VALUE: f32 = -0.7 * f32::MAX;

/// Whether keys outside a row's causal/sliding window can change its result.
///
/// The reference adds `mask_value` to masked logits. With `mask_value <= -1e30` their weight
/// `exp(logit + mask_value - max)` underflows to exactly 0 in f32 for every logit below 1e29 in
/// magnitude, so the kernels skip those keys. A larger (user-chosen) mask value makes them count,
/// and then every key in `[0, kv_len)` is visited.
pub fn masked_keys_matter(mask_value: f32) -> bool {
    mask_value > -1.0e30
}

/// [`RpaParams::decode_apart`] of a mixed batch in one launch: the warp-specialized tile kernel's
/// blocks and the pipelined decode kernel's, three of those to a block, in one grid
/// (`kernels::mix`).
pub const DECODE_APART_ONE_LAUNCH: u32 = 3;

/// Whether a sequence whose rows are `[lo, hi)` (`cu_q_lens[i]`, `cu_q_lens[i + 1]`, as read)
/// is a decode sequence that runs apart from a mixed batch's other rows
/// ([`RpaParams::decode_apart`]): one query row, inside `[0, max_tokens)`. For non-decreasing
/// `cu_q_lens` that row is the sequence's alone ([`find_sequence`] answers `i` for it), so the
/// decode kernel and the tile kernel, which leaves exactly these sequences out of its plan,
/// split the rows between them without overlap.
#[inline(always)]
pub fn is_apart_decode(lo: i32, hi: i32, max_tokens: u32) -> bool {
    lo >= 0 && (lo as u32) < max_tokens && hi as i64 == lo as i64 + 1
}

/// `num_seqs[0]` clamped to `[0, max_num_seqs]`.
#[inline(always)]
pub fn clamp_num_seqs(raw: i32, max_num_seqs: u32) -> u32 {
    if raw <= 0 {
        0
    } else {
        (raw as u32).min(max_num_seqs)
    }
}

/// The sequence owning query row `t`: the last `i < num_seqs` with `cu(i) <= t` (binary search),
/// provided `t < cu(i + 1)`. `cu(i)` reads `cu_q_lens[i]`; it is called with `i <= num_seqs` only.
///
/// Decode rows first: row `t` is sequence `t` whenever every earlier sequence has one query row,
/// and two independent reads settle that, where the search costs log2(num_seqs) dependent reads
/// before a GPU block can fetch anything else. For non-decreasing `cu_q_lens` the answer is the
/// search's (no later `i` can have `cu(i) <= t < cu(t + 1)`); for decreasing ones it is still a
/// sequence whose rows contain `t`, the same on the CPU and the GPU.
#[inline(always)]
pub fn find_sequence(t: i32, num_seqs: u32, cu: impl Fn(u32) -> i32) -> Option<u32> {
    if num_seqs == 0 || cu(0) > t {
        return None;
    }
    let guess = t as u32; // row indices are non-negative; the `t >= 0` test keeps the cast exact
    if t >= 0 && guess < num_seqs && cu(guess) <= t && t < cu(guess + 1) {
        return Some(guess);
    }
    let (mut lo, mut hi) = (0u32, num_seqs);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if cu(mid) <= t {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if t < cu(lo + 1) {
        Some(lo)
    } else {
        None
    }
}

/// The keys one query row may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowWindow {
    /// `kv_lens[seq]` after clamping.
    pub kv_len: u32,
    /// First visible key.
    pub first: u32,
    /// One past the last visible key (`first == end`: nothing visible, the row is zeros).
    pub end: u32,
}

impl RowWindow {
    /// Keys to visit: the visible ones, or all of `[0, kv_len)` when masked keys matter.
    #[inline(always)]
    pub fn visit_range(&self, include_masked: bool) -> (u32, u32) {
        if self.first >= self.end {
            (0, 0)
        } else if include_masked {
            (0, self.kv_len)
        } else {
            (self.first, self.end)
        }
    }

    /// Whether key `j` is visible (not masked) for this row.
    #[inline(always)]
    pub fn visible(&self, j: u32) -> bool {
        j >= self.first && j < self.end
    }
}

/// Window of row `t` in a sequence owning rows `[seq_start, seq_end)` with `kv_len_raw` tokens.
#[inline(always)]
pub fn row_window(
    t: i32,
    seq_start: i32,
    seq_end: i32,
    kv_len_raw: i32,
    max_kv_len: u32,
    sliding_window: u32,
) -> RowWindow {
    let kv_len = if kv_len_raw <= 0 { 0 } else { (kv_len_raw as u32).min(max_kv_len) };
    let q_len = seq_end as i64 - seq_start as i64;
    let pos = kv_len as i64 - q_len + (t as i64 - seq_start as i64);
    let end = (pos + 1).clamp(0, kv_len as i64);
    let first = if sliding_window > 0 { (pos - sliding_window as i64 + 1).clamp(0, end) } else { 0 };
    RowWindow { kv_len, first: first as u32, end: end as u32 }
}

/// Whether a page index read from `page_indices` addresses a page of the pool.
#[inline(always)]
pub fn page_is_valid(page: i32, total_pages: u32) -> bool {
    page >= 0 && (page as u32) < total_pages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sequences_and_padding() {
        let cu = [0, 3, 3, 7, 8];
        let f = |t| find_sequence(t, 4, |i| cu[i as usize]);
        assert_eq!(f(0), Some(0));
        assert_eq!(f(2), Some(0));
        assert_eq!(f(3), Some(2)); // sequence 1 is empty
        assert_eq!(f(7), Some(3));
        assert_eq!(f(8), None); // padding
        assert_eq!(find_sequence(0, 0, |i| cu[i as usize]), None);
        // decreasing cu_q_lens never yields a row outside the found sequence's range
        let bad = [0, 5, 2, 9];
        for t in 0..10 {
            if let Some(i) = find_sequence(t, 3, |i| bad[i as usize]) {
                assert!(bad[i as usize] <= t && t < bad[i as usize + 1]);
            }
        }
    }

    #[test]
    fn windows_are_end_aligned_and_clamped() {
        // prefill of 4 rows over 4 keys: row r sees [0, r]
        assert_eq!(row_window(1, 0, 4, 4, 100, 0), RowWindow { kv_len: 4, first: 0, end: 2 });
        // decode row over 10 keys with window 3 sees [7, 10)
        assert_eq!(row_window(5, 5, 6, 10, 100, 3), RowWindow { kv_len: 10, first: 7, end: 10 });
        // q_len > kv_len: early rows see nothing
        assert_eq!(row_window(0, 0, 4, 2, 100, 0).end, 0);
        // kv_len beyond the pages is clamped
        assert_eq!(row_window(0, 0, 1, 1000, 64, 0).kv_len, 64);
        assert_eq!(clamp_num_seqs(-3, 8), 0);
        assert_eq!(clamp_num_seqs(99, 8), 8);
    }
}
