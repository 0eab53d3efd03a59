//! The block's shared memory: where each buffer lives, and its four mbarrier rings
//! ([`SharedLayout`]).

use crate::pipeline::MbarrierRing;

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
    // The mbarriers: full K, full V, empty K, empty V, full Q, empty Q, full schedule, empty
    // schedule, each ring's barriers consecutive.
    /// The K tiles' ring ([`WS_K_STAGES`] stages).
    pub(super) fn k_ring(&self) -> MbarrierRing {
        MbarrierRing::new(self.barriers(), self.barriers() + 8 * KV_STAGES, WS_K_STAGES)
    }
    /// The V tiles' ring ([`WS_V_STAGES`] stages).
    pub(super) fn v_ring(&self) -> MbarrierRing {
        MbarrierRing::new(
            self.barriers() + 8 * WS_K_STAGES,
            self.barriers() + 8 * (KV_STAGES + WS_K_STAGES),
            WS_V_STAGES,
        )
    }
    /// The Q tiles' ring: one stage per item, [`ws_q_slots`] of them (barriers for
    /// [`MAX_Q_SLOTS`]).
    pub(super) fn q_ring(&self) -> MbarrierRing {
        let full = self.barriers() + 8 * 2 * KV_STAGES;
        MbarrierRing::new(full, full + 8 * MAX_Q_SLOTS, ws_q_slots(self.head_dim))
    }
    /// The schedule ring of dynamic pairs ([`SCHED_SLOTS`] stages, one pair index each).
    pub(super) fn sched_ring(&self) -> MbarrierRing {
        let full = self.barriers() + 8 * (2 * KV_STAGES + 2 * MAX_Q_SLOTS);
        MbarrierRing::new(full, full + 8 * SCHED_SLOTS, SCHED_SLOTS)
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
