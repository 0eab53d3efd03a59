//! The `ptxas` the PTX checks run (`tests/ptx.rs`, `tests/kernel_images.rs`): `XGK_PTXAS`, else the
//! one on PATH. Fails (not skips) when there is none.

use std::process::Command;

pub fn ptxas() -> String {
    if let Ok(p) = std::env::var("XGK_PTXAS") {
        return p;
    }
    let found = Command::new("sh").arg("-c").arg("command -v ptxas").output().expect("sh");
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    assert!(!path.is_empty(), "ptxas not found: set XGK_PTXAS (pip install nvidia-cuda-nvcc; .ci/run does this)");
    path
}
