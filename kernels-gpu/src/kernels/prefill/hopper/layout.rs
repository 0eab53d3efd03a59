//! The block's shared memory: where each buffer lives, and its mbarrier rings
//! ([`SharedLayout`]).
//!
//! With 16-bit KV: the Q ring, the K ring, the V ring, then the mbarriers, the presence masks and
//! the schedule ring. With fp8 KV ([`SharedLayout::fp8`]) the bulk copies land raw in two staging
//! rings (`k8`, `v8`) after the V ring, from which the converter warps widen each tile into the K
//! and V rings the consumers read; the Q ring has one slot and the V ring two stages, so that the
//! staging fits beside them.

use crate::pipeline::MbarrierRing;

use super::{
    ws_keys, ws_q_slots, ws_v_stages, BARRIERS, CONSUMER_M, MAX_Q_SLOTS, SCHED_SLOTS, WS_K_STAGES, WS_V_STAGES,
};

/// Stages of each fp8 staging ring (K and V).
pub(super) const STAGING_STAGES: u32 = 2;

pub(super) const fn q_tile_bytes(head_dim: u32) -> u32 {
    CONSUMER_M * head_dim * 2
}

/// Bytes of a K or V stage of 16-bit operands.
pub(super) const fn stage_bytes(head_dim: u32) -> u32 {
    ws_keys(head_dim) * head_dim * 2
}

/// Bytes of an fp8 staging stage (a tile's raw K or V bytes).
pub(super) const fn staging_bytes(head_dim: u32) -> u32 {
    ws_keys(head_dim) * head_dim
}

/// Bytes from the aligned base to the mbarriers: the Q ring (a tile per consumer and slot), the K
/// and V rings and, with fp8 KV, the staging rings.
pub(super) const fn data_bytes(head_dim: u32, fp8: bool, consumers: u32) -> u32 {
    consumers * ws_q_slots(head_dim, fp8) * q_tile_bytes(head_dim)
        + (WS_K_STAGES + ws_v_stages(fp8)) * stage_bytes(head_dim)
        + if fp8 { 2 * STAGING_STAGES * staging_bytes(head_dim) } else { 0 }
}

/// Presence words of a tile (one per 32 keys).
pub(super) const fn presence_words(head_dim: u32) -> u32 {
    ws_keys(head_dim) / 32
}

/// Bytes after the mbarriers: the presence masks of the K stages and of the K staging stages,
/// and the schedule ring's pair indices.
pub(super) const fn tail_bytes(head_dim: u32) -> u32 {
    (WS_K_STAGES + STAGING_STAGES) * 4 * presence_words(head_dim) + 4 * SCHED_SLOTS
}

/// Shared addresses of the block's buffers (see [`ws_shared_bytes`]).
#[derive(Clone, Copy)]
pub(super) struct SharedLayout {
    /// 1024-byte aligned start of the data.
    pub(super) base: u32,
    /// The generic pointer to `base` (for plain loads and stores).
    pub(super) base_ptr: *mut u8,
    pub(super) head_dim: u32,
    /// fp8 KV: staging rings, one Q slot, two V stages.
    pub(super) fp8: bool,
    /// Consumer warpgroups (a Q tile each per slot).
    pub(super) consumers: u32,
}

// The mbarriers, each ring's consecutive: full K, full V, empty K, empty V (laid out for
// [`WS_V_STAGES`]), full Q, empty Q, full schedule, empty schedule, then full and empty of the K
// staging ring and of the V staging ring.
const K_FULL: u32 = 0;
const V_FULL: u32 = WS_K_STAGES;
const K_EMPTY: u32 = WS_K_STAGES + WS_V_STAGES;
const V_EMPTY: u32 = K_EMPTY + WS_K_STAGES;
const Q_FULL: u32 = 2 * (WS_K_STAGES + WS_V_STAGES);
const SCHED_FULL: u32 = Q_FULL + 2 * MAX_Q_SLOTS;
const K8_FULL: u32 = SCHED_FULL + 2 * SCHED_SLOTS;
const V8_FULL: u32 = K8_FULL + 2 * STAGING_STAGES;
const _: () = assert!(V8_FULL + 2 * STAGING_STAGES == BARRIERS, "every mbarrier laid out");

impl SharedLayout {
    pub(super) fn q(&self, slot: u32, consumer: u32) -> u32 {
        self.base + (self.consumers * slot + consumer) * q_tile_bytes(self.head_dim)
    }
    pub(super) fn k(&self, stage: u32) -> u32 {
        self.base
            + self.consumers * ws_q_slots(self.head_dim, self.fp8) * q_tile_bytes(self.head_dim)
            + stage * stage_bytes(self.head_dim)
    }
    /// Words of a stage's presence masks (32 keys each).
    pub(super) fn presence_words(&self) -> u32 {
        presence_words(self.head_dim)
    }
    pub(super) fn v(&self, stage: u32) -> u32 {
        self.k(WS_K_STAGES + stage)
    }
    /// fp8 KV: the K staging ring's stage `stage` (raw bytes, key `k` at `k * head_dim`).
    pub(super) fn k8(&self, stage: u32) -> u32 {
        self.k(WS_K_STAGES + ws_v_stages(self.fp8)) + stage * staging_bytes(self.head_dim)
    }
    /// fp8 KV: the V staging ring's stage `stage`.
    pub(super) fn v8(&self, stage: u32) -> u32 {
        self.k8(STAGING_STAGES + stage)
    }
    pub(super) fn barriers(&self) -> u32 {
        self.base + data_bytes(self.head_dim, self.fp8, self.consumers)
    }
    fn barrier(&self, index: u32) -> u32 {
        self.barriers() + 8 * index
    }
    /// The K tiles' ring ([`WS_K_STAGES`] stages).
    pub(super) fn k_ring(&self) -> MbarrierRing {
        MbarrierRing::new(self.barrier(K_FULL), self.barrier(K_EMPTY), WS_K_STAGES)
    }
    /// The V tiles' ring ([`ws_v_stages`] stages).
    pub(super) fn v_ring(&self) -> MbarrierRing {
        MbarrierRing::new(self.barrier(V_FULL), self.barrier(V_EMPTY), ws_v_stages(self.fp8))
    }
    /// The Q tiles' ring: one stage per item, [`ws_q_slots`] of them (barriers for
    /// [`MAX_Q_SLOTS`]).
    pub(super) fn q_ring(&self) -> MbarrierRing {
        let full = self.barrier(Q_FULL);
        MbarrierRing::new(full, full + 8 * MAX_Q_SLOTS, ws_q_slots(self.head_dim, self.fp8))
    }
    /// The schedule ring of dynamic pairs ([`SCHED_SLOTS`] stages, one pair index each).
    pub(super) fn sched_ring(&self) -> MbarrierRing {
        let full = self.barrier(SCHED_FULL);
        MbarrierRing::new(full, full + 8 * SCHED_SLOTS, SCHED_SLOTS)
    }
    /// fp8 KV: the K staging ring (filled by the bulk copies, emptied by the converters).
    pub(super) fn k8_ring(&self) -> MbarrierRing {
        let full = self.barrier(K8_FULL);
        MbarrierRing::new(full, full + 8 * STAGING_STAGES, STAGING_STAGES)
    }
    /// fp8 KV: the V staging ring.
    pub(super) fn v8_ring(&self) -> MbarrierRing {
        let full = self.barrier(V8_FULL);
        MbarrierRing::new(full, full + 8 * STAGING_STAGES, STAGING_STAGES)
    }
    /// A generic pointer to the 4-byte word `byte` bytes after the mbarriers.
    fn tail_word(&self, byte: u32) -> *mut u32 {
        let offset = data_bytes(self.head_dim, self.fp8, self.consumers) + 8 * BARRIERS + byte;
        // SAFETY (of the offset): inside the block's dynamic shared memory (`ws_shared_bytes`).
        unsafe { self.base_ptr.add(offset as usize) as *mut u32 }
    }
    /// The pair index in schedule slot `slot`.
    pub(super) fn sched(&self, slot: u32) -> *mut u32 {
        self.tail_word((WS_K_STAGES + STAGING_STAGES) * 4 * self.presence_words() + 4 * slot)
    }
    /// `keys / 32` words: bit k of word w says whether key `32 w + k` of the stage's tile is
    /// present.
    pub(super) fn presence(&self, stage: u32) -> *mut u32 {
        self.tail_word(stage * 4 * self.presence_words())
    }
    /// fp8 KV: the presence words of K staging stage `stage` (the producer writes them there; the
    /// converter copies them to the K stage it fills).
    pub(super) fn staged_presence(&self, stage: u32) -> *mut u32 {
        self.presence(WS_K_STAGES + stage)
    }
}
