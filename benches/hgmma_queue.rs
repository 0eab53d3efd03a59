//! How many `wgmma`s (`m64n128k16`, bf16) a warpgroup issues before the issue blocks: the
//! `hgmma_queue_probe` kernel (sm_90a image; `kernels-gpu/src/kernels/hgmma_queue_probe.rs`)
//! records `%clock64` after each of 16 products issued back to back, and once all are done. For
//! one warpgroup and for two (at once, or the second once the first's issue has returned, as
//! the prefill consumers' turns), with A in shared memory (S = Q Kᵀ's form) or in registers
//! (O += P V's), it prints the median over the runs of each issue's return and of the completion,
//! in cycles from the earliest start in the block.
//!
//! `cargo bench --bench hgmma_queue` on a Hopper GPU (`scripts/stage_gpu.sh` stages the binary:
//! `.gpu/bin/hgmma_queue`); without one it says so and measures nothing.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream, DevicePtr};
use kernels_gpu::kernels::hgmma_queue_probe::{
    HGMMA_QUEUE_PROBE_MAX, HGMMA_QUEUE_PROBE_SHARED_BYTES, HGMMA_QUEUE_PROBE_WORDS,
};
use xla_gpu_kernels::host::runtime::{KernelArgs, LaunchConfig};
use xla_gpu_kernels::KERNELS;

/// Launches per configuration (the first is a warm-up, not counted).
const RUNS: usize = 21;

fn gpu() -> Option<Arc<CudaStream>> {
    // SAFETY: probes for the driver library only.
    if !unsafe { sys::is_culib_present() } {
        return None;
    }
    CudaContext::new(0).ok().map(|ctx| ctx.new_stream().unwrap())
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let Some(stream) = gpu() else {
        println!("hgmma_queue: no CUDA GPU here; nothing measured");
        return;
    };
    // SAFETY: the stream is live.
    let module = unsafe { KERNELS.for_stream(stream.cu_stream()) }.expect("load the kernels");
    if !module.image.has_wgmma() {
        println!(
            "hgmma_queue: the probe is in the sm_90a image only (a Hopper GPU); this context loaded {}",
            module.image.arch
        );
        return;
    }
    let out = stream.alloc_zeros::<u64>(2 * HGMMA_QUEUE_PROBE_WORDS).expect("allocate");
    let issued = HGMMA_QUEUE_PROBE_MAX as usize;
    println!("cycles from the block's first start: the return of each product's issue (1..{issued}), then all done");
    // (what, issuing warpgroups, staggered, A in registers)
    let configs = [
        ("S form, one warpgroup", 1, 0, 0),
        ("P V form, one warpgroup", 1, 0, 1),
        ("S form, two at once", 2, 0, 0),
        ("S form, two in turns", 2, 1, 0),
        ("P V form, two at once", 2, 0, 1),
        ("P V form, two in turns", 2, 1, 1),
    ];
    for (what, issuers, staggered, a_in_registers) in configs {
        // Per warpgroup and word: the runs' cycles from the block's earliest start.
        let mut samples = vec![vec![Vec::new(); HGMMA_QUEUE_PROBE_WORDS - 1]; issuers as usize];
        for run in 0..RUNS {
            let mut args = KernelArgs::new();
            args.push(out.device_ptr(&stream).0).push(issuers).push(staggered).push(a_in_registers);
            let cfg =
                LaunchConfig { grid: (1, 1, 1), block: (256, 1, 1), shared_bytes: HGMMA_QUEUE_PROBE_SHARED_BYTES };
            // SAFETY: the probe's contract (its docs): one block of 256 threads, its shared
            // memory, `out` with room for both warpgroups' words.
            unsafe { module.launch(stream.cu_stream(), "hgmma_queue_probe", cfg, &mut args.pointers(), false) }
                .expect("launch the probe");
            stream.synchronize().expect("run the probe");
            let words = stream.clone_dtoh(&out).expect("read back");
            if run == 0 {
                continue;
            }
            let start = (0..issuers as usize).map(|w| words[w * HGMMA_QUEUE_PROBE_WORDS]).min().unwrap();
            for (w, per_word) in samples.iter_mut().enumerate() {
                for (i, s) in per_word.iter_mut().enumerate() {
                    s.push(words[w * HGMMA_QUEUE_PROBE_WORDS + i] as i64 - start as i64);
                }
            }
        }
        for (w, per_word) in samples.into_iter().enumerate() {
            let m: Vec<i64> = per_word.into_iter().map(median).collect();
            let returns: Vec<String> = m[1..=issued].iter().map(|c| c.to_string()).collect();
            println!("{what:24} wg{w} start {:5} | issues {} | done {}", m[0], returns.join(" "), m[issued + 1]);
        }
    }
}
