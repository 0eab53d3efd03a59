//! Ragged paged attention: the torch_xla / JAX `ragged_paged_attention` contract.
//!
//! Inputs: `q [max_num_batched_tokens, num_q_heads, head_dim]`,
//! `kv_pages [total_num_pages, page_size, 2 * num_kv_heads, head_dim]` (K and V interleaved on
//! axis 2), `kv_lens [max_num_seqs]`, `page_indices [max_num_seqs, pages_per_seq]`,
//! `cu_q_lens [max_num_seqs + 1]`, `num_seqs [1]` (int32, on the device). Output: `q.shape`, q's
//! dtype, padding rows (past `cu_q_lens[num_seqs]`) zero. Row semantics, masks and the handling of
//! invalid metadata are in `kernels_gpu::attention`, shared with the GPU kernels.
//!
//! The CUDA path, one concern a file, in the order a call meets them:
//! - `settings.rs`: the environment variables, parsed into [`LaunchSettings`] (enums where they
//!   choose among ways);
//! - `plan_cache.rs`: the process's settings and the plans made under them, cached per shape;
//! - `applicability.rs`: which kernels cover a problem, the kernel a [`KernelChoice`] resolves to;
//! - `plan_choice.rs`: the launch plan (tiled or direct) from the settings, shapes and device,
//!   with `plan_rules.rs` (the measured rules, pure functions) and `pipelined_plan.rs` (the
//!   pipelined kernel's stages and splits);
//! - `plan.rs`: what a plan is: its kernels ([`KernelId`], named in `kernel_id.rs`), its launches
//!   (`TileLaunches`), how splits merge (`SplitMerge`), its workspace;
//! - `params.rs`: the kernels' `RpaParams` from a plan, where the enums become the integers;
//! - `launch/`: the buffers and workspace (`mod.rs`), the direct kernels and the decode kernel
//!   (`direct.rs`), the merge kernels (`merge.rs`), the plan and tile kernels (`tiled.rs`), the
//!   mix kernel's decode blocks (`mix.rs`), the tensor maps (`tensor_maps.rs`).

mod applicability;
mod cpu;
mod kernel_id;
mod launch;
mod params;
mod pipelined_plan;
mod plan;
mod plan_cache;
mod plan_choice;
mod plan_rules;
mod settings;

pub use applicability::{
    key_rows_applies, pipelined_applies, tensor_core_applies, tiled_applies, tiled_preferred, tiled_ws_applies,
};
pub use cpu::run_cpu;
pub use kernel_id::{KernelFamily, KernelId};
pub use launch::{
    kv_tensor_map, launch_cuda, launch_cuda_on_device, launch_cuda_with, workspace_bytes, workspace_bytes_with,
    ws_token_tensor_map, DeviceBuffers, Workspace,
};
pub use plan_cache::reload_settings;
pub use plan_choice::decode_apart_applies;
pub use plan_rules::{
    choose_splits, choose_splits_by_waves, PipelinedSplits, DEFAULT_MERGE_COST_KEYS, DEFAULT_MIN_SPLIT_TILES,
};
pub use settings::{
    ConsumerSchedule, CopyHint, DecodeApartSetting, KernelChoice, KeyRowsSetting, LaunchSettings, MergeSetting,
    PairSchedule, PipeMode, CLUSTER_MERGE_ENV_VAR, DECODE_APART_ENV_VAR, KERNEL_ENV_VAR, KEY_ROWS_ENV_VAR,
    MERGE_COST_KEYS_ENV_VAR, MERGE_MODE_ENV_VAR, MIN_SPLIT_TILES_ENV_VAR, PIPE_MODE_ENV_VAR, PIPE_STAGES_ENV_VAR,
    PROGRAMMATIC_LAUNCH_ENV_VAR,
};

use kernels_gpu::attention::{masked_keys_matter, RpaParams, DEFAULT_MASK_VALUE};
use kernels_gpu::kernels::decode::general::dims_per_lane;

use crate::dtype::{DType, TensorRef};
use crate::ensure;
use crate::error::Result;

/// Head sizes with a tuned kernel (any multiple of the lane width up to 256 also works; these
/// are the ones tested).
pub const SUPPORTED_HEAD_DIMS: [u32; 7] = [64, 80, 96, 112, 128, 192, 256];

/// The optional scalars of the op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attributes {
    pub sm_scale: f32,
    pub sliding_window: Option<u32>,
    pub soft_cap: Option<f32>,
    pub mask_value: Option<f32>,
    pub k_scale: Option<f32>,
    pub v_scale: Option<f32>,
}

impl Default for Attributes {
    fn default() -> Self {
        Attributes {
            sm_scale: 1.0,
            sliding_window: None,
            soft_cap: None,
            mask_value: None,
            k_scale: None,
            v_scale: None,
        }
    }
}

impl Attributes {
    /// Rejects values the contract forbids.
    pub fn validate(&self) -> Result<()> {
        ensure!(self.sm_scale.is_finite(), "sm_scale must be finite, got {}", self.sm_scale);
        if let Some(w) = self.sliding_window {
            ensure!(w > 0, "sliding_window must be > 0, got {w}");
        }
        if let Some(c) = self.soft_cap {
            ensure!(c != 0.0 && c.is_finite(), "soft_cap must be finite and != 0, got {c}");
        }
        if let Some(m) = self.mask_value {
            ensure!(!m.is_nan(), "mask_value must not be NaN");
        }
        for (name, s) in [("k_scale", self.k_scale), ("v_scale", self.v_scale)] {
            if let Some(s) = s {
                ensure!(s.is_finite(), "{name} must be finite, got {s}");
            }
        }
        Ok(())
    }

    /// `sliding_window` as an int attribute value: must fit in u32 and be > 0.
    pub fn sliding_window_from_i64(v: i64) -> Result<u32> {
        ensure!(v > 0, "sliding_window must be > 0, got {v}");
        u32::try_from(v).map_err(|_| crate::Error::invalid(format!("sliding_window {v} is too large")))
    }
}

/// A validated ragged paged attention problem (everything static).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PagedAttention {
    pub q_dtype: DType,
    pub kv_dtype: DType,
    pub max_tokens: u32,
    pub num_q_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    pub total_pages: u32,
    pub page_size: u32,
    pub max_num_seqs: u32,
    pub pages_per_seq: u32,
    pub attrs: Attributes,
}

fn dim_u32(name: &str, v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| crate::Error::invalid(format!("{name} = {v} is out of range")))
}

impl PagedAttention {
    /// Validates the six inputs, the output and the attributes (torch_xla's static checks, plus
    /// what the kernels need).
    #[allow(clippy::too_many_arguments)]
    pub fn from_tensors(
        q: &TensorRef,
        kv_pages: &TensorRef,
        kv_lens: &TensorRef,
        page_indices: &TensorRef,
        cu_q_lens: &TensorRef,
        num_seqs: &TensorRef,
        out: &TensorRef,
        attrs: Attributes,
    ) -> Result<Self> {
        attrs.validate()?;
        ensure!(
            matches!(q.dtype, DType::F32 | DType::F16 | DType::BF16),
            "q dtype must be f32, f16 or bf16, got {}",
            q.dtype
        );
        ensure!(
            kv_pages.dtype == q.dtype || matches!(kv_pages.dtype, DType::F8E4M3FN | DType::F8E5M2),
            "kv_pages dtype must be q's dtype ({}) or fp8 (f8e4m3fn, f8e5m2), got {}",
            q.dtype,
            kv_pages.dtype
        );
        ensure!(
            q.dims.len() == 3,
            "q must have rank 3 [max_num_batched_tokens, num_q_heads, head_dim], got {}",
            q.describe()
        );
        ensure!(
            kv_pages.dims.len() == 4,
            "kv_pages must have rank 4 [total_num_pages, page_size, 2 * num_kv_heads, head_dim], got {}",
            kv_pages.describe()
        );
        let max_tokens = dim_u32("max_num_batched_tokens", q.dims[0])?;
        let num_q_heads = dim_u32("num_q_heads", q.dims[1])?;
        let head_dim = dim_u32("head_dim", q.dims[2])?;
        let total_pages = dim_u32("total_num_pages", kv_pages.dims[0])?;
        let page_size = dim_u32("page_size", kv_pages.dims[1])?;
        let combined = dim_u32("num_combined_kv_heads", kv_pages.dims[2])?;
        ensure!(
            kv_pages.dims[3] == q.dims[2],
            "head_dim of q ({}) and kv_pages ({}) differ",
            q.dims[2],
            kv_pages.dims[3]
        );
        ensure!(
            combined % 2 == 0 && combined > 0,
            "kv_pages axis 2 (num_combined_kv_heads = {combined}) must be even and > 0: K and V heads are interleaved"
        );
        let num_kv_heads = combined / 2;
        ensure!(num_q_heads > 0, "num_q_heads must be > 0");
        ensure!(
            num_q_heads % num_kv_heads == 0,
            "num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        );
        ensure!(
            SUPPORTED_HEAD_DIMS.contains(&head_dim),
            "head_dim {head_dim} is not supported; supported: {SUPPORTED_HEAD_DIMS:?}"
        );
        ensure!(page_size > 0, "page_size must be > 0");
        for (name, t) in
            [("kv_lens", kv_lens), ("page_indices", page_indices), ("cu_q_lens", cu_q_lens), ("num_seqs", num_seqs)]
        {
            ensure!(t.dtype == DType::S32, "{name} must be int32 (s32), got {}", t.describe());
        }
        ensure!(kv_lens.dims.len() == 1, "kv_lens must have shape [max_num_seqs], got {}", kv_lens.describe());
        let max_num_seqs = dim_u32("max_num_seqs", kv_lens.dims[0])?;
        ensure!(
            page_indices.dims.len() == 2 && page_indices.dims[0] == kv_lens.dims[0],
            "page_indices must have shape [max_num_seqs = {max_num_seqs}, pages_per_seq], got {}",
            page_indices.describe()
        );
        let pages_per_seq = dim_u32("pages_per_seq", page_indices.dims[1])?;
        ensure!(
            cu_q_lens.dims == [kv_lens.dims[0] + 1],
            "cu_q_lens must have shape [max_num_seqs + 1 = {}], got {}",
            max_num_seqs as u64 + 1,
            cu_q_lens.describe()
        );
        ensure!(num_seqs.dims == [1], "num_seqs must have shape [1], got {}", num_seqs.describe());
        ensure!(
            out.dtype == q.dtype && out.dims == q.dims,
            "the output must have q's dtype and shape {}, got {}",
            q.describe(),
            out.describe()
        );
        // Index arithmetic in the kernels is 64-bit; keep every count inside it and the grid limits,
        // and every buffer's bytes below 2^62 (exact in usize, host slices below isize::MAX).
        let max_bytes = crate::ops::MAX_BUFFER_BYTES as u128;
        let kv_elems = (total_pages as u128) * (page_size as u128) * (combined as u128) * (head_dim as u128);
        ensure!(
            kv_elems * (kv_pages.dtype.size_bytes().unwrap() as u128) < max_bytes,
            "kv_pages is too large ({kv_elems} elements)"
        );
        let q_elems = (max_tokens as u128) * (num_q_heads as u128) * (head_dim as u128);
        ensure!(q_elems * (q.dtype.size_bytes().unwrap() as u128) < max_bytes, "q is too large ({q_elems} elements)");
        let table_elems = (max_num_seqs as u128) * (pages_per_seq as u128);
        ensure!(table_elems * 4 < max_bytes, "page_indices is too large ({table_elems} elements)");
        ensure!(
            (pages_per_seq as u64) * (page_size as u64) < (1u64 << 31),
            "pages_per_seq * page_size must be < 2^31 tokens"
        );
        ensure!(max_tokens < (1u32 << 31), "max_num_batched_tokens must be < 2^31");
        Ok(PagedAttention {
            q_dtype: q.dtype,
            kv_dtype: kv_pages.dtype,
            max_tokens,
            num_q_heads,
            num_kv_heads,
            head_dim,
            total_pages,
            page_size,
            max_num_seqs,
            pages_per_seq,
            attrs,
        })
    }

    /// Query heads per KV head: the GQA group (`num_kv_heads` divides `num_q_heads`, checked by
    /// [`PagedAttention::from_tensors`]; the guard keeps a hand-built spec from dividing by 0).
    pub fn group(&self) -> u32 {
        self.num_q_heads / self.num_kv_heads.max(1)
    }

    /// Whether keys outside the causal/sliding window must be visited (custom `mask_value`).
    pub fn include_masked(&self) -> bool {
        masked_keys_matter(self.attrs.mask_value.unwrap_or(DEFAULT_MASK_VALUE))
    }

    /// Whether K/V are scaled and rounded to q's dtype before use.
    pub fn kv_scaled(&self) -> bool {
        self.attrs.k_scale.is_some() || self.attrs.v_scale.is_some()
    }

    /// Most keys one row can visit: the page table's capacity, or the window when masked keys
    /// are skipped.
    pub fn max_visited_keys(&self) -> u32 {
        let capacity = self.pages_per_seq * self.page_size;
        match self.attrs.sliding_window {
            Some(w) if !self.include_masked() => capacity.min(w),
            _ => capacity,
        }
    }

    /// The kernel's scalar parameters for a given split of the keys.
    pub fn kernel_params(&self, num_splits: u32, split_len: u32) -> RpaParams {
        let a = &self.attrs;
        RpaParams {
            max_tokens: self.max_tokens,
            num_q_heads: self.num_q_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            page_size: self.page_size,
            pages_per_seq: self.pages_per_seq,
            total_pages: self.total_pages,
            max_num_seqs: self.max_num_seqs,
            num_splits,
            split_len,
            sliding_window: a.sliding_window.unwrap_or(0),
            include_masked: self.include_masked() as u32,
            kv_scaled: self.kv_scaled() as u32,
            copy_hint: 0,
            tile_rows: 0,
            plan_capacity: 0,
            consumer_schedule: 0,
            dynamic_pairs: 0,
            pipe_stages: 0,
            cluster_splits: 0,
            pipe_mode: 0,
            launch_tag: 0,
            table_preload: 0,
            decode_apart: 0,
            merge_blocks: 0,
            sm_scale: a.sm_scale,
            soft_cap: a.soft_cap.unwrap_or(0.0),
            mask_value: a.mask_value.unwrap_or(DEFAULT_MASK_VALUE),
            k_scale: a.k_scale.unwrap_or(1.0),
            v_scale: a.v_scale.unwrap_or(1.0),
        }
    }

    /// Dims handled per lane by the kernel for this head_dim.
    pub(crate) fn dims_per_lane(&self) -> u32 {
        dims_per_lane(self.head_dim).expect("validated head_dim")
    }

    /// Element counts of (q, kv_pages, page_indices) (exact: [`PagedAttention::from_tensors`] bounds
    /// each buffer's bytes by [`crate::ops::MAX_BUFFER_BYTES`]).
    pub fn element_counts(&self) -> (usize, usize, usize) {
        let q = self.max_tokens as usize * self.num_q_heads as usize * self.head_dim as usize;
        let kv = self.total_pages as usize
            * self.page_size as usize
            * 2
            * self.num_kv_heads as usize
            * self.head_dim as usize;
        (q, kv, self.max_num_seqs as usize * self.pages_per_seq as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dtype: DType, dims: &[i64]) -> TensorRef<'_> {
        TensorRef { data: std::ptr::null_mut(), dtype, dims }
    }

    /// A bf16 spec of q (and out) shaped `q`, the pool shaped `kv`, 4 sequence slots of 8 pages.
    pub(super) fn check(q: &[i64], kv: &[i64], kv_dtype: DType, attrs: Attributes) -> Result<PagedAttention> {
        PagedAttention::from_tensors(
            &t(DType::BF16, q),
            &t(kv_dtype, kv),
            &t(DType::S32, &[4]),
            &t(DType::S32, &[4, 8]),
            &t(DType::S32, &[5]),
            &t(DType::S32, &[1]),
            &t(DType::BF16, q),
            attrs,
        )
    }

    #[test]
    fn accepts_the_contract_and_rejects_with_precise_messages() {
        let ok = check(&[16, 8, 128], &[32, 16, 4, 128], DType::BF16, Attributes::default()).unwrap();
        assert_eq!((ok.num_kv_heads, ok.pages_per_seq, ok.max_num_seqs), (2, 8, 4));
        let err = |r: Result<PagedAttention>| r.unwrap_err().to_string();
        assert!(
            err(check(&[16, 8, 128], &[32, 16, 3, 128], DType::BF16, Attributes::default())).contains("must be even")
        );
        assert!(err(check(&[16, 6, 128], &[32, 16, 8, 128], DType::BF16, Attributes::default()))
            .contains("multiple of num_kv_heads"));
        assert!(err(check(&[16, 8, 128], &[32, 16, 4, 64], DType::BF16, Attributes::default()))
            .contains("head_dim of q (128) and kv_pages (64) differ"));
        assert!(err(check(&[16, 8, 72], &[32, 16, 4, 72], DType::BF16, Attributes::default()))
            .contains("head_dim 72 is not supported"));
        assert!(
            err(check(&[16, 8, 128], &[32, 16, 4, 128], DType::F16, Attributes::default())).contains("kv_pages dtype")
        );
        let bad = Attributes { sliding_window: Some(0), ..Default::default() };
        assert!(err(check(&[16, 8, 128], &[32, 16, 4, 128], DType::BF16, bad)).contains("sliding_window must be > 0"));
        let bad = Attributes { soft_cap: Some(0.0), ..Default::default() };
        assert!(err(check(&[16, 8, 128], &[32, 16, 4, 128], DType::BF16, bad)).contains("soft_cap"));
        assert!(check(&[16, 8, 128], &[32, 16, 4, 128], DType::F8E4M3FN, Attributes::default()).is_ok());
    }
}
