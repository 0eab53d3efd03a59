//! Where a block's worth of kernel code runs: a whole thread block ([`WholeBlock`]: the hardware's
//! indices, `bar.sync 0`, the block's dynamic shared memory) or one 128-thread group of a block
//! that holds several ([`GroupSlot`]: indices given by the kernel, a named barrier of its own, its
//! share of the shared memory).
//!
//! Why: a mixed batch's one-launch kernel (`kernels::mix`) runs the pipelined decode
//! kernel's blocks of 128 threads inside the warp-specialized tile kernel's blocks of 384 (one
//! function: one launch, whose block size and shared memory are the tile kernel's), three decode
//! blocks to a block. The decode code takes its block's indices, barrier and shared memory from a
//! `BlockSlot`; the other kernels pass [`WholeBlock`], which compiles to what they read before.

use crate::barrier::{ids, sync_named_any, sync_named_id};
use crate::shared::dynamic_shared_mem;
use crate::thread::{block_idx_x, block_idx_y, block_idx_z, sync_threads, thread_idx_x};

/// A block's indices, threads, barrier and shared memory (see the module docs).
pub(crate) trait BlockSlot: Copy {
    /// Whether the slot is a group of a block shared with others (a constant: code that only
    /// groups run compiles out of the whole-block kernels).
    const GROUP: bool;
    /// The block's index in its (possibly virtual) grid.
    fn x(self) -> u32;
    fn y(self) -> u32;
    fn z(self) -> u32;
    /// This thread's index among the slot's threads.
    fn thread(self) -> u32;
    /// A barrier of the slot's threads (`__syncthreads` of a whole block).
    ///
    /// # Safety
    /// Every thread of the slot reaches it.
    unsafe fn sync(self);
    /// [`BlockSlot::sync`] that also tells every thread whether any of the slot's passed `pred`.
    ///
    /// # Safety
    /// As [`BlockSlot::sync`].
    unsafe fn any(self, pred: bool) -> bool;
    /// The slot's dynamic shared memory (16-byte aligned).
    ///
    /// # Safety
    /// As [`dynamic_shared_mem`], within the slot's share.
    unsafe fn shared<T>(self) -> *mut T;
}

/// A whole thread block: the hardware's indices, `bar.sync 0`, all of the dynamic shared memory.
#[derive(Clone, Copy)]
pub(crate) struct WholeBlock;

impl BlockSlot for WholeBlock {
    const GROUP: bool = false;
    #[inline(always)]
    fn x(self) -> u32 {
        block_idx_x()
    }
    #[inline(always)]
    fn y(self) -> u32 {
        block_idx_y()
    }
    #[inline(always)]
    fn z(self) -> u32 {
        block_idx_z()
    }
    #[inline(always)]
    fn thread(self) -> u32 {
        thread_idx_x()
    }
    #[inline(always)]
    unsafe fn sync(self) {
        sync_threads()
    }
    #[inline(always)]
    unsafe fn any(self, pred: bool) -> bool {
        // Barrier 0 for the block's threads (`bar.red` needs the count: the block's).
        sync_named_any(ids::BLOCK.start, crate::thread::block_dim_x(), pred)
    }
    #[inline(always)]
    unsafe fn shared<T>(self) -> *mut T {
        dynamic_shared_mem::<T>()
    }
}

/// Threads of one [`GroupSlot`].
pub(crate) const GROUP_THREADS: u32 = 128;

/// The named barrier of group 0; group `k` has `FIRST_GROUP_BARRIER + k`
/// ([`crate::barrier::ids::MIX_DECODE_GROUPS`], checked there against the ids that can share
/// the block).
pub(crate) const FIRST_GROUP_BARRIER: u32 = ids::MIX_DECODE_GROUPS.start;

/// Group `group` (threads `128 group .. 128 group + 128` of the block) as a block of its own at
/// grid position `(x, y, 0)`, with the shared memory at `shared`.
#[derive(Clone, Copy)]
pub(crate) struct GroupSlot {
    pub x: u32,
    pub y: u32,
    pub group: u32,
    pub shared: *mut u8,
}

impl BlockSlot for GroupSlot {
    const GROUP: bool = true;
    #[inline(always)]
    fn x(self) -> u32 {
        self.x
    }
    #[inline(always)]
    fn y(self) -> u32 {
        self.y
    }
    #[inline(always)]
    fn z(self) -> u32 {
        0
    }
    #[inline(always)]
    fn thread(self) -> u32 {
        thread_idx_x() % GROUP_THREADS
    }
    #[inline(always)]
    unsafe fn sync(self) {
        sync_named_id(FIRST_GROUP_BARRIER + self.group, GROUP_THREADS)
    }
    #[inline(always)]
    unsafe fn any(self, pred: bool) -> bool {
        sync_named_any(FIRST_GROUP_BARRIER + self.group, GROUP_THREADS, pred)
    }
    #[inline(always)]
    unsafe fn shared<T>(self) -> *mut T {
        self.shared as *mut T
    }
}
