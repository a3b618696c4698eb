//! Installs `heapledger.h` beside the `heapledger` binary (and the
//! recorder's library), where a program that steers the recorder includes
//! it from (`cc -I target/release ...`); `heapledger header` prints the
//! same file.

use std::path::{Path, PathBuf};

fn main() {
    let header = Path::new("../heapledger-preload/include/heapledger.h");
    println!("cargo:rerun-if-changed={}", header.display());
    // OUT_DIR is TARGET/PROFILE/build/heapledger-HASH/out.
    let Some(dir) = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|o| o.ancestors().nth(3).map(Path::to_path_buf))
    else {
        return;
    };
    let text = std::fs::read(header).expect("heapledger.h");
    let to = dir.join("heapledger.h");
    if std::fs::read(&to).ok().as_deref() != Some(&text[..]) {
        // Beside the binary is a convenience: a read-only target folder
        // still builds.
        if let Err(e) = std::fs::write(&to, &text) {
            println!("cargo:warning=cannot install {}: {e}", to.display());
        }
    }
}
