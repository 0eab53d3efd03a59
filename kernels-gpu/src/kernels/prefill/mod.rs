//! Prefill kernels: query tiles of many rows per sequence (prefill, chunked prefill, the tile
//! items of a mixed batch), planned on the device ([`crate::attention::planner`]).

pub mod hopper;
pub mod item;
pub mod tiled;
