//! The CPU implementation (the Host handler's code) against the float64 oracle, over random
//! ragged batches covering every feature; and invalid metadata never panics or reads out of bounds.

mod common;

use common::*;
use rand::prelude::*;
use xla_gpu_kernels::host::DType;

#[test]
fn cpu_matches_float64_oracle_on_random_ragged_batches() {
    let mut rng = seeded_rng();
    let dtypes = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::BF16, DType::F8E4M3FN),
        (DType::F16, DType::F8E5M2),
        (DType::F32, DType::F8E4M3FN),
    ];
    let mut worst = std::collections::BTreeMap::new();
    for i in 0..24 {
        let (q_dtype, kv_dtype) = dtypes[i % dtypes.len()];
        let head_dim = [64, 80, 96, 112, 128, 192, 256][i % 7];
        let page_size = [1, 3, 8, 16, 32][i % 5];
        let (num_kv_heads, group) = [(1, 1), (2, 4), (1, 8), (4, 1)][i % 4];
        let seqs: Vec<(usize, usize)> = (0..rng.gen_range(1..4))
            .map(|_| {
                let kv_len = rng.gen_range(1..60);
                let q_len = match rng.gen_range(0..3) {
                    0 => 1,
                    1 => kv_len,
                    _ => rng.gen_range(1..=kv_len),
                };
                (q_len, kv_len)
            })
            .collect();
        let pad = rng.gen_range(0..4);
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, num_kv_heads, group, page_size, &seqs, pad);
        if i % 3 == 1 {
            case.sliding_window = Some(rng.gen_range(1..20));
        }
        if i % 4 == 2 {
            case.sm_scale = 0.3;
            case.soft_cap = Some(biting_cap(&case, &mut rng));
        }
        if i % 5 == 3 {
            case.mask_value = Some(-3.0);
        }
        let label = format!(
            "case {i}: {q_dtype}/{kv_dtype} d{head_dim} p{page_size} seqs {seqs:?} logit spread {:.2} cap {:?}",
            logit_spread(&case),
            case.soft_cap
        );
        let rel = assert_close(&case, &case.cpu_output(), &case.oracle(), &label);
        let w = worst.entry(format!("{q_dtype}/{kv_dtype}")).or_insert(0.0f64);
        *w = w.max(rel);
    }
    for (k, v) in &worst {
        println!("worst row-relative |cpu - float64| {k}: {v:.3e}");
    }
}

#[test]
fn invalid_metadata_is_defined_and_in_bounds() {
    let mut rng = seeded_rng();
    let base = random_case(&mut rng, DType::F32, DType::F32, 64, 2, 2, 4, &[(3, 10), (1, 5)], 2);
    let mut cases = vec![];
    let mut c = base.clone();
    c.page_indices.iter_mut().for_each(|p| *p = 1_000_000);
    cases.push(("page index out of range", c));
    let mut c = base.clone();
    c.kv_lens[0] = 1 << 30;
    cases.push(("kv_len beyond the pages", c));
    let mut c = base.clone();
    c.cu_q_lens = vec![0, 5, 2, 9, 1 << 30][..c.cu_q_lens.len()].to_vec();
    cases.push(("decreasing cu_q_lens", c));
    let mut c = base.clone();
    c.num_seqs = 1 << 20;
    cases.push(("num_seqs too large", c));
    let mut c = base.clone();
    c.num_seqs = -5;
    cases.push(("negative num_seqs", c));
    let mut c = base.clone();
    c.kv_lens[0] = 1; // q_len 3 > kv_len 1
    cases.push(("q_len > kv_len", c));
    for (label, case) in cases {
        // cpu_output's buffer starts NaN (0xFF bytes): a finite element was written.
        let out = case.cpu_output();
        for i in 0..case.max_tokens * case.num_q_heads * case.head_dim {
            assert!(decode(case.q_dtype, &out, i).is_finite(), "{label}: element {i} not written");
        }
    }
    // The poison is NaN, so the check above can fail.
    let poison = vec![0xFFu8; base.out_bytes()];
    assert!(decode(base.q_dtype, &poison, 0).is_nan());
    // All pages invalid: nothing visible, every row is zeros.
    let mut c = base.clone();
    c.page_indices.iter_mut().for_each(|p| *p = -1);
    let out = c.cpu_output();
    assert!((0..c.max_tokens * c.num_q_heads * c.head_dim).all(|i| decode(c.q_dtype, &out, i) == 0.0));
}
