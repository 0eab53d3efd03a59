//! A ring of shared-memory stages handed between producer and consumer threads by a pair of
//! mbarriers per stage ([`crate::barrier`]), in the shape of CUTLASS's TMA pipelines: the
//! stage's *full* barrier completes when the producer's data has landed (a producer's arrival, or
//! the bytes of TMA copies announced with [`MbarrierRing::commit_bytes`]), its *empty* barrier
//! when every consumer is done reading it.
//!
//! Both sides count their uses of the ring: use `n` of a ring of `S` stages takes stage `n % S`
//! in round `n / S`, and round `r` waits for the barrier phase of parity `r & 1` ([`Stage`]).
//! The producer [`acquire`](MbarrierRing::acquire)s a stage (waits until its previous round was
//! released: in round 0 the wait passes at once, the barrier still being in its phase before
//! the first), writes it and [`commit`](MbarrierRing::commit)s; a consumer
//! [`wait`](MbarrierRing::wait)s for the round's data, reads it and
//! [`release`](MbarrierRing::release)s the stage.

use crate::barrier;

/// Use `n` of a ring: its stage and the phase parity its round waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    /// `n % stages`.
    pub index: u32,
    /// `(n / stages) & 1`.
    pub phase: u32,
}

/// A ring of `stages` stages whose stage `s` has its full mbarrier at shared address `full + 8 s`
/// and its empty one at `empty + 8 s`. Plain addresses: copied freely, shared by every role.
#[derive(Clone, Copy)]
pub struct MbarrierRing {
    full: u32,
    empty: u32,
    stages: u32,
}

impl MbarrierRing {
    /// The ring over the mbarriers at `full` and `empty` (8-byte aligned shared addresses, `stages`
    /// barriers each).
    #[inline(always)]
    pub const fn new(full: u32, empty: u32, stages: u32) -> Self {
        MbarrierRing { full, empty, stages }
    }

    /// Use `n`'s stage and phase.
    #[inline(always)]
    pub const fn stage(&self, n: u32) -> Stage {
        Stage { index: n % self.stages, phase: (n / self.stages) & 1 }
    }

    /// The stage's full mbarrier (TMA copies into the stage complete their bytes on it).
    #[inline(always)]
    pub const fn full_barrier(&self, s: Stage) -> u32 {
        self.full + 8 * s.index
    }

    /// The stage's empty mbarrier.
    #[inline(always)]
    pub const fn empty_barrier(&self, s: Stage) -> u32 {
        self.empty + 8 * s.index
    }

    /// Initializes every stage's barriers: full completes after `producer_arrivals` arrivals (and
    /// the announced bytes), empty after `consumer_arrivals`.
    ///
    /// # Safety
    /// One thread, before any other use, with a block barrier (or an mbarrier-init fence) between
    /// it and the other threads' first use.
    #[inline(always)]
    pub unsafe fn init(&self, producer_arrivals: u32, consumer_arrivals: u32) {
        for index in 0..self.stages {
            let s = Stage { index, phase: 0 };
            barrier::init(self.full_barrier(s), producer_arrivals);
            barrier::init(self.empty_barrier(s), consumer_arrivals);
        }
    }

    /// Producer: waits until the consumers have released the stage's previous round.
    ///
    /// # Safety
    /// The ring initialized; `s` from this thread's own count of uses.
    #[inline(always)]
    pub unsafe fn acquire(&self, s: Stage) {
        barrier::wait_parity(self.empty_barrier(s), s.phase ^ 1);
    }

    /// Producer: one arrival on the stage's full barrier, after this thread's writes to the stage
    /// are complete and visible to the consumers (for `cp.async` writes read by `wgmma`: waited
    /// for and fenced to the async proxy).
    ///
    /// # Safety
    /// As [`MbarrierRing::acquire`], after it; the barrier counts this thread's arrival.
    #[inline(always)]
    pub unsafe fn commit(&self, s: Stage) {
        barrier::arrive(self.full_barrier(s));
    }

    /// Producer: one arrival on the stage's full barrier that also announces `bytes` from TMA
    /// copies completing on it ([`MbarrierRing::full_barrier`]); the phase completes when they
    /// have all landed.
    ///
    /// # Safety
    /// As [`MbarrierRing::commit`]; exactly `bytes` bytes are copied onto the barrier this round.
    #[inline(always)]
    pub unsafe fn commit_bytes(&self, s: Stage, bytes: u32) {
        barrier::arrive_expect_tx(self.full_barrier(s), bytes);
    }

    /// Consumer: waits for the stage's data of this round.
    ///
    /// # Safety
    /// The ring initialized; `s` from this thread's own count of uses.
    #[inline(always)]
    pub unsafe fn wait(&self, s: Stage) {
        barrier::wait_parity(self.full_barrier(s), s.phase);
    }

    /// Consumer: this thread is done reading the stage (one arrival on its empty barrier).
    ///
    /// # Safety
    /// After [`MbarrierRing::wait`] for the same use; the barrier counts this thread's arrival.
    #[inline(always)]
    pub unsafe fn release(&self, s: Stage) {
        barrier::arrive(self.empty_barrier(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_alternate_phase_per_round() {
        for stages in [1, 2, 3, 4] {
            let ring = MbarrierRing::new(1024, 2048, stages);
            let at = |n: u32| {
                let s = ring.stage(n);
                (s.index, s.phase)
            };
            assert_eq!(at(0), (0, 0));
            assert_eq!(at(stages - 1), (stages - 1, 0));
            assert_eq!(at(stages), (0, 1));
            assert_eq!(at(2 * stages - 1), (stages - 1, 1));
            assert_eq!(at(2 * stages), (0, 0));
            let s = ring.stage(stages + stages - 1);
            assert_eq!(
                (ring.full_barrier(s), ring.empty_barrier(s)),
                (1024 + 8 * (stages - 1), 2048 + 8 * (stages - 1))
            );
        }
    }
}
