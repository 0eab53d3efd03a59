//! XLA custom-call ABIs: [`ffi`] (typed, api_version 4), [`legacy`] (api_version 1/2), and
//! [`handlers`], which connect both to the ops.

pub mod ffi;
pub mod handlers;
pub mod legacy;
