//! Thread-block clusters (sm_90): the blocks of one cluster run at the same time on one GPC and
//! can read each other's shared memory (*distributed shared memory*), through inline PTX.
//!
//! The host launches a kernel with a cluster shape (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`); a
//! block's rank in its cluster is [`rank`]. A block maps one of its own shared addresses to the
//! same offset in a peer's shared memory with [`map_shared`] and reads it with
//! [`load_shared_f32`]. [`sync`] is the cluster-wide barrier: what a block wrote to its shared
//! memory before it is visible to every peer after it, and a block must not exit while a peer may
//! still read its shared memory (a second [`sync`] after the last remote read).
//!
//! The instructions exist only in images built with `xgk_sm90`; elsewhere these functions are
//! never reached (the host launches clusters only with that image) and panic on the host.

/// This block's rank in its cluster (`%cluster_ctarank`).
///
/// # Safety
/// Device code of the sm_90 image only.
#[inline(always)]
pub unsafe fn rank() -> u32 {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    {
        let r: u32;
        core::arch::asm!("mov.u32 {r}, %cluster_ctarank;", r = out(reg32) r, options(pure, nomem, nostack));
        r
    }
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("cluster::rank")
}

/// The distributed-shared-memory address of byte `addr` of this block's shared memory (a
/// shared-state-space address, [`crate::shared::shared_address`]) in the block of rank
/// `peer` of the cluster (`mapa.shared::cluster`).
///
/// # Safety
/// Device code of the sm_90 image, launched with a cluster; `peer` below the cluster's size.
#[inline(always)]
pub unsafe fn map_shared(addr: u32, peer: u32) -> u32 {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    {
        let r: u32;
        core::arch::asm!("mapa.shared::cluster.u32 {r}, {a}, {p};", r = out(reg32) r, a = in(reg32) addr,
            p = in(reg32) peer, options(pure, nomem, nostack));
        r
    }
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = (addr, peer);
        crate::gpu_only!("cluster::map_shared")
    }
}

/// Reads the f32 at a distributed-shared-memory address from [`map_shared`].
///
/// # Safety
/// `addr` must come from [`map_shared`] for 4 aligned bytes inside the peer's dynamic shared
/// memory, written before a [`sync`] that this thread has passed, with the peer still running
/// (no [`sync`] it could have left since).
#[inline(always)]
pub unsafe fn load_shared_f32(addr: u32) -> f32 {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    {
        let v: f32;
        core::arch::asm!("ld.shared::cluster.f32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr,
            options(readonly, nostack));
        v
    }
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    {
        let _ = addr;
        crate::gpu_only!("cluster::load_shared_f32")
    }
}

/// Cluster-wide barrier (`barrier.cluster.arrive.release` then `wait.acquire`): returns once
/// every thread of every block of the cluster has arrived; shared-memory writes before it are
/// visible to reads after it, in every block of the cluster.
///
/// # Safety
/// Every thread of every block of the cluster must call it the same number of times, warps
/// converged (`.aligned`); device code of the sm_90 image, launched with a cluster.
#[inline(always)]
pub unsafe fn sync() {
    #[cfg(all(target_arch = "nvptx64", xgk_sm90))]
    core::arch::asm!(
        "barrier.cluster.arrive.release.aligned;",
        "barrier.cluster.wait.acquire.aligned;",
        options(nostack)
    );
    #[cfg(not(all(target_arch = "nvptx64", xgk_sm90)))]
    crate::gpu_only!("cluster::sync")
}
