//! Where the recorder library is, and its name (which `convert` and the
//! symbolizer use to leave its own frames and mapping out).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub const PRELOAD_NAME: &str = "libheapledger_preload.so";

/// The recorder library: `HEAPLEDGER_PRELOAD`, else beside this executable
/// (as `cargo build` leaves it), else in `../lib/heapledger/`.
pub fn find_preload() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("HEAPLEDGER_PRELOAD") {
        let p = PathBuf::from(p);
        if p.is_file() {
            // Absolute: a program that changes its working directory, then
            // starts another, would lose the recorder in that one.
            return Ok(std::path::absolute(&p).unwrap_or(p));
        }
        bail!(
            "HEAPLEDGER_PRELOAD names {}, which is not a file",
            p.display()
        );
    }
    let exe = std::env::current_exe().context("cannot locate the heapledger executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for cand in [
        dir.join(PRELOAD_NAME),
        dir.join("../lib/heapledger").join(PRELOAD_NAME),
    ] {
        if cand.is_file() {
            return Ok(cand.canonicalize().unwrap_or(cand));
        }
    }
    bail!(
        "the recorder library {PRELOAD_NAME} is not beside {} (build it with `cargo build --workspace`)",
        exe.display()
    )
}
