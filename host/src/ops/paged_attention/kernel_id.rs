//! The typed id of a paged-attention kernel, and the one place its exported PTX name is spelled
//! ([`KernelId::name`]): plans hold ids, and only the module lookups see names.

use std::collections::HashSet;
use std::sync::Mutex;

use super::PagedAttention;
use crate::dtype::DType;

/// A family of kernels the kernels crate exports, one kernel per (q dtype, KV dtype, head size)
/// where the family has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelFamily {
    /// The general CUDA-core kernel, `rpa_<q>_<kv>_dpl<N>` (every dtype; named by dims per lane).
    General,
    /// The direct-load tensor-core kernel, `rpa_mma_<q>_<kv>_d<D>`.
    TensorCore,
    /// The `cp.async`-pipelined kernel with query heads as the mma's rows, `rpa_pipe_<q>_<kv>_d<D>`.
    Pipelined,
    /// The pipelined kernel with keys as the mma's rows, `rpa_pipe_kr_<q>_<kv>_d<D>`.
    PipelinedKeyRows,
    /// [`KernelFamily::Pipelined`]'s twin on a grid of sequences (a mixed batch's decode rows
    /// apart), `rpa_pipe_seq_<q>_<kv>_d<D>`.
    PipelinedSeq,
    /// [`KernelFamily::PipelinedKeyRows`]'s twin on a grid of sequences, `rpa_pipe_kr_seq_<q>_<kv>_d<D>`.
    PipelinedKeyRowsSeq,
    /// The query-tiled mma.sync kernel, `rpa_tile_<q>_<kv>_d<D>`.
    Tile,
    /// The query-tiled warpgroup-MMA kernel, `rpa_tile_wg_<q>_<kv>_d<D>`.
    TileWgmma,
    /// The warp-specialized tile kernel, `rpa_tile_ws_<q>_<kv>_d<D>`.
    TileWarpSpecialized,
    /// The warp-specialized tile kernel and the key-rows decode twin in one grid,
    /// `rpa_mix_<q>_<kv>_d<D>`.
    Mix,
    /// The merge kernel looping over the splits, `rpa_combine_<q>`.
    MergeLoop,
    /// The merge kernel over groups of splits, `rpa_combine_groups_<q>`.
    MergeGroups,
    /// The tile kernels' plan kernel, `rpa_plan`.
    Plan,
    /// The warp-specialized tile kernel's plan kernel, `rpa_plan_ws`.
    PlanWarpSpecialized,
}

impl KernelFamily {
    /// The pipelined family's twin on a grid of sequences; the other families have none.
    pub fn by_sequence(self) -> Option<KernelFamily> {
        match self {
            KernelFamily::Pipelined => Some(KernelFamily::PipelinedSeq),
            KernelFamily::PipelinedKeyRows => Some(KernelFamily::PipelinedKeyRowsSeq),
            _ => None,
        }
    }
}

/// One exported kernel: its family, the dtypes and the head size its name carries.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelId {
    pub family: KernelFamily,
    /// q's (and the output's) dtype; unused by the plan kernels.
    pub q: DType,
    /// The KV pool's dtype; unused by the merge and plan kernels.
    pub kv: DType,
    /// head_dim, or for [`KernelFamily::General`] the dims per lane; unused by the merge and
    /// plan kernels.
    pub dim: u32,
}

impl KernelId {
    /// The attention kernel of `family` for `spec`'s dtypes and head size.
    pub fn attention(family: KernelFamily, spec: &PagedAttention) -> Self {
        let dim = match family {
            KernelFamily::General => spec.dims_per_lane(),
            _ => spec.head_dim,
        };
        KernelId { family, q: spec.q_dtype, kv: spec.kv_dtype, dim }
    }

    /// The merge kernel (`MergeLoop` or `MergeGroups`) writing q's dtype `q`.
    pub fn merge(family: KernelFamily, q: DType) -> Self {
        KernelId { family, q, kv: q, dim: 0 }
    }

    /// The plan kernel of the tile kernels: `rpa_plan_ws` for the warp-specialized one.
    pub fn plan(warp_specialized: bool) -> Self {
        let family = if warp_specialized { KernelFamily::PlanWarpSpecialized } else { KernelFamily::Plan };
        KernelId { family, q: DType::F32, kv: DType::F32, dim: 0 }
    }

    /// This id with another family (same dtypes and head size): a kernel's twin.
    pub fn with_family(self, family: KernelFamily) -> Self {
        KernelId { family, ..self }
    }

    /// The kernel's name as the PTX exports it.
    pub fn name(&self) -> &'static str {
        let d = self.dim;
        let prefix = match self.family {
            KernelFamily::General => {
                return intern(format!("rpa_{}_{}_dpl{d}", dtype_tag(self.q), dtype_tag(self.kv)));
            }
            KernelFamily::TensorCore => "rpa_mma_",
            KernelFamily::Pipelined => "rpa_pipe_",
            KernelFamily::PipelinedKeyRows => "rpa_pipe_kr_",
            KernelFamily::PipelinedSeq => "rpa_pipe_seq_",
            KernelFamily::PipelinedKeyRowsSeq => "rpa_pipe_kr_seq_",
            KernelFamily::Tile => "rpa_tile_",
            KernelFamily::TileWgmma => "rpa_tile_wg_",
            KernelFamily::TileWarpSpecialized => "rpa_tile_ws_",
            KernelFamily::Mix => "rpa_mix_",
            // The merge kernels write q's dtype; q is f32, f16 or bf16 (validated).
            KernelFamily::MergeLoop => {
                return match self.q {
                    DType::F32 => "rpa_combine_f32",
                    DType::F16 => "rpa_combine_f16",
                    _ => "rpa_combine_bf16",
                }
            }
            KernelFamily::MergeGroups => {
                return match self.q {
                    DType::F32 => "rpa_combine_groups_f32",
                    DType::F16 => "rpa_combine_groups_f16",
                    _ => "rpa_combine_groups_bf16",
                }
            }
            KernelFamily::Plan => return "rpa_plan",
            KernelFamily::PlanWarpSpecialized => return "rpa_plan_ws",
        };
        intern(format!("{prefix}{}_{}_d{d}", dtype_tag(self.q), dtype_tag(self.kv)))
    }
}

/// The plan log and test failures print the exported name.
impl std::fmt::Debug for KernelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.name())
    }
}

/// A dtype as kernel names spell it.
fn dtype_tag(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F8E4M3FN => "e4m3",
        DType::F8E5M2 => "e5m2",
        _ => unreachable!("validated"),
    }
}

/// A name as `&'static str`, leaked once: a few dozen possible names, and the module's function
/// cache is keyed by `&'static str`.
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(&s) = set.get(name.as_str()) {
        return s;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAMILIES: [KernelFamily; 14] = [
        KernelFamily::General,
        KernelFamily::TensorCore,
        KernelFamily::Pipelined,
        KernelFamily::PipelinedKeyRows,
        KernelFamily::PipelinedSeq,
        KernelFamily::PipelinedKeyRowsSeq,
        KernelFamily::Tile,
        KernelFamily::TileWgmma,
        KernelFamily::TileWarpSpecialized,
        KernelFamily::Mix,
        KernelFamily::MergeLoop,
        KernelFamily::MergeGroups,
        KernelFamily::Plan,
        KernelFamily::PlanWarpSpecialized,
    ];

    /// Every id over the families, the dtypes and the head sizes (and dims per lane) a name can
    /// carry.
    fn every_id() -> Vec<KernelId> {
        let floats = [DType::F32, DType::F16, DType::BF16];
        let kvs = [DType::F32, DType::F16, DType::BF16, DType::F8E4M3FN, DType::F8E5M2];
        let mut ids = Vec::new();
        for family in FAMILIES {
            for q in floats {
                for kv in kvs {
                    for dim in [1, 2, 4, 8, 64, 80, 96, 112, 128, 192, 256] {
                        ids.push(KernelId { family, q, kv, dim });
                    }
                }
            }
        }
        ids
    }

    /// The kernels crate's source files below `dir`, its folders walked.
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the kernels crate's sources") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The kernel names the kernels crate's sources spell out (its export macros list every
    /// kernel by name): words `rpa_...` naming one kernel of a family.
    fn exported_names() -> HashSet<String> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../kernels-gpu/src/kernels");
        let mut files = Vec::new();
        sources(std::path::Path::new(dir), &mut files);
        let mut names = HashSet::new();
        for path in files {
            let text = std::fs::read_to_string(path).unwrap();
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let concrete = |suffix: &str| {
                    word.rsplit_once(suffix)
                        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                };
                let merge = ["f32", "f16", "bf16"]
                    .iter()
                    .any(|t| word == format!("rpa_combine_{t}") || word == format!("rpa_combine_groups_{t}"));
                if word.starts_with("rpa_")
                    && (concrete("_d") || concrete("_dpl") || merge || word == "rpa_plan" || word == "rpa_plan_ws")
                {
                    names.insert(word.to_string());
                }
            }
        }
        names
    }

    #[test]
    fn ids_name_exactly_the_exported_kernels() {
        let exported = exported_names();
        assert!(exported.len() > 100, "{} names found", exported.len());
        // Every exported kernel has an id, so every kernel a plan can take is named by one.
        let named: HashSet<&str> = every_id().iter().map(|id| id.name()).collect();
        for name in &exported {
            assert!(named.contains(name.as_str()), "{name} has no KernelId");
        }
        // A representative table, one or more per family.
        let spec = |q, kv, head_dim| PagedAttention {
            q_dtype: q,
            kv_dtype: kv,
            max_tokens: 16,
            num_q_heads: 8,
            num_kv_heads: 2,
            head_dim,
            total_pages: 64,
            page_size: 16,
            max_num_seqs: 4,
            pages_per_seq: 8,
            attrs: Default::default(),
        };
        let (bf16, f16, e4m3) = (DType::BF16, DType::F16, DType::F8E4M3FN);
        let table = [
            (KernelId::attention(KernelFamily::General, &spec(DType::F32, DType::F8E5M2, 128)), "rpa_f32_e5m2_dpl4"),
            (KernelId::attention(KernelFamily::TensorCore, &spec(f16, e4m3, 96)), "rpa_mma_f16_e4m3_d96"),
            (KernelId::attention(KernelFamily::Pipelined, &spec(bf16, e4m3, 128)), "rpa_pipe_bf16_e4m3_d128"),
            (KernelId::attention(KernelFamily::PipelinedKeyRows, &spec(bf16, bf16, 64)), "rpa_pipe_kr_bf16_bf16_d64"),
            (KernelId::attention(KernelFamily::PipelinedSeq, &spec(f16, f16, 256)), "rpa_pipe_seq_f16_f16_d256"),
            (
                KernelId::attention(KernelFamily::PipelinedKeyRowsSeq, &spec(bf16, bf16, 128)),
                "rpa_pipe_kr_seq_bf16_bf16_d128",
            ),
            (KernelId::attention(KernelFamily::Tile, &spec(f16, f16, 64)), "rpa_tile_f16_f16_d64"),
            (KernelId::attention(KernelFamily::TileWgmma, &spec(bf16, bf16, 128)), "rpa_tile_wg_bf16_bf16_d128"),
            (
                KernelId::attention(KernelFamily::TileWarpSpecialized, &spec(bf16, bf16, 256)),
                "rpa_tile_ws_bf16_bf16_d256",
            ),
            (KernelId::attention(KernelFamily::Mix, &spec(f16, f16, 128)), "rpa_mix_f16_f16_d128"),
            (KernelId::merge(KernelFamily::MergeLoop, DType::F32), "rpa_combine_f32"),
            (KernelId::merge(KernelFamily::MergeGroups, bf16), "rpa_combine_groups_bf16"),
            (KernelId::plan(false), "rpa_plan"),
            (KernelId::plan(true), "rpa_plan_ws"),
        ];
        for (id, name) in table {
            assert_eq!(id.name(), name, "{:?}", id.family);
            assert!(exported.contains(name), "{name} is not exported");
        }
        // The sequence twins keep the dtypes and head size.
        let row = KernelId::attention(KernelFamily::PipelinedKeyRows, &spec(f16, f16, 128));
        assert_eq!(row.with_family(row.family.by_sequence().unwrap()).name(), "rpa_pipe_kr_seq_f16_f16_d128");
        assert_eq!(KernelFamily::Tile.by_sequence(), None);
        assert_eq!(format!("{row:?}"), "\"rpa_pipe_kr_f16_f16_d128\"");
    }
}
