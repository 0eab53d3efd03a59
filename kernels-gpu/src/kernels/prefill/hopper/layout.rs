//! The block's shared memory: where each buffer and mbarrier lives ([`SharedLayout`]), and
//! a position in a ring of stages ([`RingSlot`]).

use super::{ws_keys, ws_q_slots, BARRIERS, CONSUMER_M, KV_STAGES, MAX_Q_SLOTS, SCHED_SLOTS, WS_K_STAGES, WS_V_STAGES};

pub(super) const fn q_tile_bytes(head_dim: u32) -> u32 {
    CONSUMER_M * head_dim * 2
}

pub(super) const fn stage_bytes(head_dim: u32) -> u32 {
    ws_keys(head_dim) * head_dim * 2
}

/// Shared addresses of the block's buffers (see [`ws_shared_bytes`]).
#[derive(Clone, Copy)]
pub(super) struct SharedLayout {
    /// 1024-byte aligned start of the data.
    pub(super) base: u32,
    /// The generic pointer to `base` (for plain loads and stores).
    pub(super) base_ptr: *mut u8,
    pub(super) head_dim: u32,
}

impl SharedLayout {
    pub(super) fn q(&self, slot: u32, consumer: u32) -> u32 {
        self.base + (2 * slot + consumer) * q_tile_bytes(self.head_dim)
    }
    pub(super) fn k(&self, stage: u32) -> u32 {
        self.base + 2 * ws_q_slots(self.head_dim) * q_tile_bytes(self.head_dim) + stage * stage_bytes(self.head_dim)
    }
    /// Words of a stage's presence masks (32 keys each).
    pub(super) fn presence_words(&self) -> u32 {
        ws_keys(self.head_dim) / 32
    }
    pub(super) fn v(&self, stage: u32) -> u32 {
        self.k(WS_K_STAGES + stage)
    }
    pub(super) fn barriers(&self) -> u32 {
        self.k(KV_STAGES)
    }
    pub(super) fn full_k(&self, stage: u32) -> u32 {
        self.barriers() + 8 * stage
    }
    pub(super) fn full_v(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (WS_K_STAGES + stage)
    }
    pub(super) fn empty_k(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (KV_STAGES + stage)
    }
    pub(super) fn empty_v(&self, stage: u32) -> u32 {
        self.barriers() + 8 * (KV_STAGES + WS_K_STAGES + stage)
    }
    pub(super) fn full_q(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + slot)
    }
    pub(super) fn empty_q(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + MAX_Q_SLOTS + slot)
    }
    pub(super) fn full_sched(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + 2 * MAX_Q_SLOTS + slot)
    }
    pub(super) fn empty_sched(&self, slot: u32) -> u32 {
        self.barriers() + 8 * (2 * KV_STAGES + 2 * MAX_Q_SLOTS + SCHED_SLOTS + slot)
    }
    /// The pair index in schedule slot `slot`.
    pub(super) fn sched(&self, slot: u32) -> *mut u32 {
        let offset = self.barriers() - self.base + 8 * BARRIERS + WS_K_STAGES * 4 * self.presence_words() + 4 * slot;
        // SAFETY (of the offset): inside the block's dynamic shared memory (`ws_shared_bytes`).
        unsafe { self.base_ptr.add(offset as usize) as *mut u32 }
    }
    /// `keys / 32` words: bit k of word w says whether key `32 w + k` of the stage's tile is
    /// present.
    pub(super) fn presence(&self, stage: u32) -> *mut u32 {
        let offset = self.barriers() - self.base + 8 * BARRIERS + stage * 4 * self.presence_words();
        // SAFETY (of the offset): inside the block's dynamic shared memory (`ws_shared_bytes`).
        unsafe { self.base_ptr.add(offset as usize) as *mut u32 }
    }
}

/// A position in a ring: the block's `n`-th use of a ring of S slots (for K and V: its `n`-th
/// tile, counted across its items) takes slot `n % S` in round `n / S`, whose full phase has
/// parity `round & 1`.
#[derive(Clone, Copy)]
pub(super) struct RingSlot {
    pub(super) stage: u32,
    pub(super) parity: u32,
}

impl RingSlot {
    pub(super) const fn in_ring(n: u32, slots: u32) -> Self {
        RingSlot { stage: n % slots, parity: (n / slots) & 1 }
    }
    /// The K ring's stage of the block's `n`-th tile.
    pub(super) fn k_of(n: u32) -> Self {
        Self::in_ring(n, WS_K_STAGES)
    }
    /// The V ring's stage of the block's `n`-th tile.
    pub(super) fn v_of(n: u32) -> Self {
        Self::in_ring(n, WS_V_STAGES)
    }
    /// The Q ring's slot of the block's `n`-th item (of a sequence: zero-fill items take none)
    /// in a ring of `slots`.
    pub(super) fn q_of(n: u32, slots: u32) -> Self {
        Self::in_ring(n, slots)
    }
    /// The schedule ring's slot of the block's `n`-th pair.
    pub(super) fn sched_of(n: u32) -> Self {
        Self::in_ring(n, SCHED_SLOTS)
    }
}
