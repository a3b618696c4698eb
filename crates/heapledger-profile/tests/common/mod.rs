//! Shared by the integration tests: where the MALT sample lives.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The real MALT 1.6.2 profile of `fixtures/malt-1.6.2-sample/sample.c`.
pub fn sample_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/malt-1.6.2-sample/profile.json")
}

pub fn sample_bytes() -> Vec<u8> {
    std::fs::read(sample_path()).expect("the sample fixture is committed")
}

/// A fresh scratch directory for one test, removed with what it holds when
/// the test is done with it (passed or failed).
pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!(
        "heapledger-profile-test-{}-{}",
        name,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
