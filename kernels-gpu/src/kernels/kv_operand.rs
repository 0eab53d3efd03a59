//! How a KV element type enters the tensor cores from shared memory ([`StagedKv`]): 16-bit KV is
//! the operand as loaded; fp8 KV is widened to f16 in registers (every fp8 value is an f16). The
//! pipelined decode kernel, the warp-specialized Hopper prefill and the one-launch mix stage K and
//! V alike and share it.

use crate::fp8::{pair_to_f16_exact, transpose_byte_pairs};
use crate::mma::MmaElement;
use crate::num::{Bf16, KvElement, F8E4M3, F8E5M2};

/// How a KV element type enters the tensor cores from the pipeline's shared memory.
pub trait StagedKv: KvElement {
    /// 1-byte types are converted in registers after `ldmatrix` (over permuted dims); 16-bit ones
    /// are the operands as loaded.
    const FP8: bool;
    /// The tensor cores' operand type with q of type `Q`: q's own for 16-bit KV; f16 for fp8 KV,
    /// whatever q is (every fp8 value is an f16, and fp8 widens to f16 in one instruction or two:
    /// [`crate::fp8::Fp8::pair_to_f16`]; bf16 q enters as f16 through
    /// [`q_as_operand`](super::decode::pipelined::q_as_operand)).
    type Operand<Q: MmaElement>: MmaElement;
    /// K's B fragment of one n-tile and k-step from a lane's `ldmatrix` word of 1-byte K (four
    /// adjacent dims `4c .. 4c + 4` of one key): register 0 holds dims `4c, 4c + 1` (the mma's k
    /// `2c, 2c + 1`), register 1 dims `4c + 2, 4c + 3` (its k `2c + 8, 2c + 9`); q's fragments
    /// take the same permutation ([`load_q_fragments`](super::decode::mma::load_q_fragments)'s `PAIRED`).
    fn k_operand(word: u32) -> [u32; 2];
    /// V's B registers from a lane's transposed-`ldmatrix` word of 1-byte V (keys `2c, 2c + 1`,
    /// dims `2u, 2u + 1`): the pair of keys at dim `2u` (the even-dim n-tile) and at `2u + 1`
    /// (the odd-dim n-tile).
    fn v_operands(word: u32) -> [u32; 2];
}

macro_rules! staged_in_place {
    ($($t:ty),*) => {$(
        impl StagedKv for $t {
            const FP8: bool = false;
            type Operand<Q: MmaElement> = Q;
            fn k_operand(_: u32) -> [u32; 2] {
                unreachable!("16-bit KV is its own operand (FP8 is false)")
            }
            fn v_operands(_: u32) -> [u32; 2] {
                unreachable!("16-bit KV is its own operand (FP8 is false)")
            }
        }
    )*};
}
staged_in_place!(f16, Bf16);

macro_rules! staged_fp8 {
    ($($t:ty),*) => {$(
        impl StagedKv for $t {
            const FP8: bool = true;
            type Operand<Q: MmaElement> = f16;
            #[inline(always)]
            fn k_operand(word: u32) -> [u32; 2] {
                [pair_to_f16_exact::<$t>(word, 0), pair_to_f16_exact::<$t>(word, 1)]
            }
            #[inline(always)]
            fn v_operands(word: u32) -> [u32; 2] {
                let by_dim = transpose_byte_pairs(word);
                [pair_to_f16_exact::<$t>(by_dim, 0), pair_to_f16_exact::<$t>(by_dim, 1)]
            }
        }
    )*};
}
staged_fp8!(F8E4M3, F8E5M2);
