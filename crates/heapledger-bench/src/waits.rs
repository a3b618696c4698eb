//! How exactly a contended wait is measured (issue 35): `contended.c`
//! blocks on a mutex another thread holds for 10 ms, 20 times, timing its
//! own `pthread_mutex_lock` calls; the profile's time lost on mutexes is
//! compared with that measure.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, Stdio};

/// The program's own total wait and the profile's, in ns.
#[derive(Clone, Copy, Debug)]
pub struct Accuracy {
    pub program_ns: u64,
    pub recorded_ns: u64,
}

impl Accuracy {
    /// The recorded total's difference from the program's, in percent of it.
    pub fn error_percent(&self) -> f64 {
        (self.recorded_ns as f64 - self.program_ns as f64).abs() * 100.0
            / (self.program_ns.max(1) as f64)
    }
}

/// Runs `exe` (contended.c, built) under `heapledger run` in `dir`.
pub fn measure(heapledger: &Path, exe: &Path, dir: &Path) -> Result<Accuracy> {
    let store = dir.join("contended.sqlite");
    let o = Command::new(heapledger)
        .args(["run", "-q", "-o"])
        .arg(&store)
        .arg("--")
        .arg(exe)
        .stdin(Stdio::null())
        .output()
        .context("cannot run heapledger")?;
    if !o.status.success() {
        bail!(
            "contended under heapledger failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let program_ns: u64 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .context("contended printed no total")?;
    let w = Command::new(heapledger)
        .args(["waits", "--json"])
        .arg(&store)
        .output()
        .context("cannot run heapledger waits")?;
    let _ = std::fs::remove_file(&store);
    if !w.status.success() {
        bail!(
            "heapledger waits failed: {}",
            String::from_utf8_lossy(&w.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&w.stdout).context("waits --json")?;
    let entries = v.get("entries").unwrap_or(&v);
    let recorded: f64 = entries
        .as_array()
        .context("waits --json: no entries")?
        .iter()
        .filter(|e| e["kind"] == "mutex")
        .filter_map(|e| e["total_seconds"].as_f64())
        .sum();
    Ok(Accuracy {
        program_ns,
        recorded_ns: (recorded * 1e9).round() as u64,
    })
}
