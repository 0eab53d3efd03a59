//! Would the suite notice a wrong kernel? Deliberate faults (a row drops its newest key, the soft
//! cap ignored, splits merged with equal weights, `sm_scale` 5 % off, long rows losing their second
//! half) computed in float64 from the GPU tests' own kind of inputs (peaky and smooth logits, caps
//! that bite, windows shorter and longer than a split, 16-bit, f32 and fp8 KV), rounded to q's
//! dtype as a kernel's output is, and compared with the CPU reference under the GPU tests' row
//! tolerance (`common::compare`). Every fault must fail the comparison in most of the cases it
//! changes; the table printed gives, per fault, the cases caught under the row tolerance and under
//! the per-element tolerance used before issue 50 (atol 1.6e-2 bf16, 2e-3 f16, 2e-5 f32).
//! `scripts/mutation_check.sh` runs the same faults through the Python front ends.

mod common;

use common::*;
use rand::prelude::*;
use xla_gpu_kernels::host::DType;

const FAULTS: [Fault; 5] = [
    Fault::DropNewestKey,
    Fault::IgnoreCap,
    Fault::EqualWeightMerge,
    Fault::SmScaleTimes105,
    Fault::DropSecondHalfOfLongRows,
];

/// The per-element tolerance before issue 50: |got - want| <= atol + rtol * |want|.
fn old_tolerance_passes(case: &Case, got: &[u8], want: &[u8]) -> bool {
    let (atol, rtol) = match case.q_dtype {
        DType::F32 => (2e-5, 2e-4),
        DType::F16 => (2e-3, 4e-3),
        _ => (1.6e-2, 1.6e-2),
    };
    (0..case.max_tokens * case.num_q_heads * case.head_dim).all(|i| {
        let (g, w) = (decode(case.q_dtype, got, i), decode(case.q_dtype, want, i));
        (g - w).abs() <= atol + rtol * w.abs()
    })
}

#[test]
fn deliberate_faults_fail_the_gpu_tests_comparison() {
    let mut rng = seeded_rng();
    let dtypes = [
        (DType::BF16, DType::BF16),
        (DType::F16, DType::F16),
        (DType::F32, DType::F32),
        (DType::BF16, DType::F8E4M3FN),
        (DType::F16, DType::F8E5M2),
    ];
    // fault -> (cases it changes, caught by the row tolerance, caught by the old tolerance)
    let mut table = vec![(0usize, 0usize, 0usize); FAULTS.len()];
    let mut worst_rel = std::collections::BTreeMap::<String, f64>::new();
    let cases = 20;
    for i in 0..cases {
        let (q_dtype, kv_dtype) = dtypes[i % dtypes.len()];
        let head_dim = [64, 128][i % 2];
        // Decode rows long enough to split (and to be "long"), a chunked-prefill row set, a short
        // decode row.
        let seqs = vec![
            (1, rng.gen_range(600..2000)),
            (rng.gen_range(2..6), rng.gen_range(300..900)),
            (1, rng.gen_range(2..60)),
        ];
        let mut case = random_case(&mut rng, q_dtype, kv_dtype, head_dim, 1, 2, [16, 8, 32][i % 3], &seqs, 1);
        // Peaky for even cases, whatever random_case chose, so both kinds are always here.
        if i % 2 == 0 {
            make_peaky(&mut case, rng.gen_range(2.0..4.0));
        }
        match i % 4 {
            1 => case.soft_cap = Some(biting_cap(&case, &mut rng)),
            // Windows shorter and longer than a split of MERGE_SPLIT keys.
            2 => {
                case.sliding_window = Some(if rng.gen_bool(0.5) {
                    rng.gen_range(8..MERGE_SPLIT as u32)
                } else {
                    rng.gen_range(600..1500)
                })
            }
            3 => {
                case.sliding_window = Some(rng.gen_range(300..1200));
                case.soft_cap = Some(biting_cap(&case, &mut rng));
            }
            _ => {}
        }
        let cpu = case.cpu_output();
        let exact = case.oracle();
        let label = format!(
            "case {i} {q_dtype}/{kv_dtype} d{head_dim} seqs {seqs:?} spread {:.2} cap {:?} window {:?}",
            logit_spread(&case),
            case.soft_cap,
            case.sliding_window
        );
        // The fault-free output passes (the tolerance is not too tight for the reference).
        let rel = compare(&case, &encode(q_dtype, &exact), &cpu, &label);
        let w = worst_rel.entry(format!("{q_dtype}/{kv_dtype}")).or_insert(0.0);
        *w = w.max(rel);
        for (f, &fault) in FAULTS.iter().enumerate() {
            let faulty = case.oracle_with(fault);
            if faulty == exact {
                continue; // nothing to catch in this case (no cap, no long row, ...)
            }
            table[f].0 += 1;
            let got = encode(q_dtype, &faulty);
            let r = row_errors(
                q_dtype,
                case.max_tokens * case.num_q_heads,
                head_dim,
                |e| decode(q_dtype, &got, e),
                |e| decode(q_dtype, &cpu, e),
                value_scale(&case),
            );
            if r.worst_ratio > 1.0 {
                table[f].1 += 1;
            } else {
                println!("{fault:?} not caught in {label}: worst {}", r.worst_at);
            }
            if !old_tolerance_passes(&case, &got, &cpu) {
                table[f].2 += 1;
            }
        }
    }
    for (k, v) in &worst_rel {
        println!("worst row-relative |exact rounded - cpu| {k}: {v:.3e}");
    }
    println!("| fault | cases it changes | caught (row tolerance) | caught (old per-element tolerance) |");
    println!("|---|---:|---:|---:|");
    for (f, fault) in FAULTS.iter().enumerate() {
        let (n, caught, old) = table[f];
        println!("| {fault:?} | {n} | {caught} | {old} |");
    }
    for (f, fault) in FAULTS.iter().enumerate() {
        let (n, caught, _) = table[f];
        assert!(n > 0, "{fault:?}: no case to check it");
        // Smooth cases hide some faults (that is why half the inputs are peaky): most, not all.
        assert!(2 * caught >= n, "{fault:?}: caught in only {caught} of {n} cases");
    }
}
