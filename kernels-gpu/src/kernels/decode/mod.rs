//! Decode kernels: a few query rows per sequence over long contexts, split over the keys where one
//! block per (sequence, KV head) would leave the GPU idle.

pub mod general;
pub mod key_rows;
pub mod merge;
pub mod mma;
pub mod pipelined;
