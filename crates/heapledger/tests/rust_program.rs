//! A Rust program under the recorder: demangled names, and allocation sites
//! in the program's own functions rather than in `alloc::` plumbing.

mod common;

use common::{programs_dir, site_line, Scratch};
use std::process::Command;

#[test]
fn rust_sites_are_the_programs_functions() {
    let dir = Scratch::new("rust");
    let exe = dir.join("rust_sites");
    let src = programs_dir().join("rust_sites.rs");
    let o = Command::new("rustc")
        .args(["-g", "-O", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("rustc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.join("p.json");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "--top", "3", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "500 300\n");
    let summary = String::from_utf8_lossy(&o.stderr);
    // 500 format! strings of 10 bytes.
    let add = format!(
        "rust_sites::store::Store::add  {}:{}",
        src.display(),
        site_line("rust_sites.rs", "add")
    );
    let line = summary
        .lines()
        .find(|l| l.contains(&add))
        .unwrap_or_else(|| panic!("no `{add}` in:\n{summary}"));
    assert!(line.contains("5000 B") && line.contains(" 500 "), "{line}");
    // 300 boxes of 32 bytes, made by the closure inside boxed().
    let boxed = format!(
        "rust_sites::boxed::{{{{closure}}}}  {}:{}",
        src.display(),
        site_line("rust_sites.rs", "boxed")
    );
    assert!(
        summary
            .lines()
            .any(|l| l.contains(&boxed) && l.contains("9600 B") && l.contains(" 300 ")),
        "no boxed site:\n{summary}"
    );
    // The site tables (not the leak stacks, which list every frame).
    let sites: String = summary
        .lines()
        .skip_while(|l| !l.starts_with("Top allocation sites"))
        .take_while(|l| !l.starts_with("Top leaking"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !sites.contains("alloc::alloc::"),
        "plumbing shown as a site:\n{sites}"
    );
}
