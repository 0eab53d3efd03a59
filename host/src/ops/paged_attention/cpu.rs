//! CPU implementation of ragged paged attention (the Host handler, and the GPU tests' oracle).
//!
//! Straightforward and exact to the contract: per row and KV head, gather the visited keys and
//! values (widened to f32, scaled and rounded to q's dtype when scales are given), compute
//! `logits = (q·k) * sm_scale`, soft cap, add `mask_value` to masked keys, a two-pass f32 softmax,
//! and the weighted sum of values.

use kernels_gpu::attention::{clamp_num_seqs, find_sequence, page_is_valid, row_window};

use super::PagedAttention;
use crate::ensure;
use crate::error::Result;
use crate::ops::elem;

/// Computes the op over host buffers (`q`, `kv_pages`, `out` as raw bytes of their dtypes).
#[allow(clippy::too_many_arguments)]
pub fn run_cpu(
    spec: &PagedAttention,
    q: &[u8],
    kv_pages: &[u8],
    kv_lens: &[i32],
    page_indices: &[i32],
    cu_q_lens: &[i32],
    num_seqs: &[i32],
    out: &mut [u8],
) -> Result<()> {
    let (q_elems, kv_elems, table_elems) = spec.element_counts();
    let q_size = spec.q_dtype.size_bytes().unwrap();
    let kv_size = spec.kv_dtype.size_bytes().unwrap();
    ensure!(q.len() >= q_elems * q_size && out.len() >= q_elems * q_size, "q/out buffers are too small");
    ensure!(kv_pages.len() >= kv_elems * kv_size, "kv_pages buffer is too small");
    ensure!(page_indices.len() >= table_elems, "page_indices buffer is too small");
    let max_seqs = spec.max_num_seqs as usize;
    ensure!(
        kv_lens.len() >= max_seqs && cu_q_lens.len() > max_seqs && !num_seqs.is_empty(),
        "metadata buffers are too small"
    );

    let d = spec.head_dim as usize;
    let nq = spec.num_q_heads as usize;
    let nkv = spec.num_kv_heads as usize;
    let group = nq / nkv;
    let page_size = spec.page_size as usize;
    let pps = spec.pages_per_seq as usize;
    let params = spec.kernel_params(1, u32::MAX);
    let include_masked = params.include_masked != 0;
    let kv_scaled = params.kv_scaled != 0;
    let n = clamp_num_seqs(num_seqs[0], spec.max_num_seqs);

    for i in 0..q_elems {
        elem::store(spec.q_dtype, out, i, 0.0);
    }
    let mut keys = Vec::new();
    let mut values = Vec::new();
    let mut masked = Vec::new();
    let mut logits = Vec::new();
    let mut acc = vec![0.0f32; d];

    for t in 0..spec.max_tokens as usize {
        let Some(seq) = find_sequence(t as i32, n, |i| cu_q_lens[i as usize]) else { continue };
        let seq = seq as usize;
        let window = row_window(
            t as i32,
            cu_q_lens[seq],
            cu_q_lens[seq + 1],
            kv_lens[seq],
            spec.pages_per_seq * spec.page_size,
            params.sliding_window,
        );
        let (lo, hi) = window.visit_range(include_masked);
        for g in 0..nkv {
            keys.clear();
            values.clear();
            masked.clear();
            for j in lo..hi {
                let page = page_indices[seq * pps + j as usize / page_size];
                if !page_is_valid(page, spec.total_pages) {
                    continue;
                }
                let token = page as usize * page_size + j as usize % page_size;
                let k_base = (token * 2 * nkv + 2 * g) * d;
                let v_base = k_base + d;
                for x in 0..d {
                    let (mut k, mut v) = (
                        elem::load(spec.kv_dtype, kv_pages, k_base + x),
                        elem::load(spec.kv_dtype, kv_pages, v_base + x),
                    );
                    if kv_scaled {
                        k = elem::round(spec.q_dtype, k * params.k_scale);
                        v = elem::round(spec.q_dtype, v * params.v_scale);
                    }
                    keys.push(k);
                    values.push(v);
                }
                masked.push(!window.visible(j));
            }
            let visited = masked.len();
            if visited == 0 {
                continue;
            }
            for h in g * group..(g + 1) * group {
                let q_base = (t * nq + h) * d;
                logits.clear();
                for (idx, &is_masked) in masked.iter().enumerate() {
                    let mut dot = 0.0f32;
                    for x in 0..d {
                        dot += elem::load(spec.q_dtype, q, q_base + x) * keys[idx * d + x];
                    }
                    let mut s = dot * params.sm_scale;
                    if params.soft_cap != 0.0 {
                        s = params.soft_cap * (s / params.soft_cap).tanh();
                    }
                    if is_masked {
                        s += params.mask_value;
                    }
                    logits.push(s);
                }
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                if max == f32::NEG_INFINITY {
                    continue;
                }
                let mut sum = 0.0f32;
                for s in logits.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                acc.iter_mut().for_each(|a| *a = 0.0);
                for (idx, &p) in logits.iter().enumerate() {
                    for x in 0..d {
                        acc[x] += p * values[idx * d + x];
                    }
                }
                for (x, a) in acc.iter().enumerate() {
                    elem::store(spec.q_dtype, out, q_base + x, a / sum);
                }
            }
        }
    }
    Ok(())
}
