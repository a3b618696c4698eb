//! Python's objects: without PYTHONMALLOC=malloc, CPython serves every
//! object under 512 bytes from pymalloc's arenas, which no malloc hook
//! sees (a script making 200 000 objects gave 3 500 recorded allocations
//! instead of 1.5 million). `heapledger run` now gives the program
//! PYTHONMALLOC=malloc unless the user set PYTHONMALLOC; `--pymalloc`
//! leaves pymalloc in place.

mod common;

use std::process::Command;

/// The malloc calls `heapledger run [flag]` records of a Python one-liner
/// that makes 100 000 strings, with `PYTHONMALLOC` as given (None: unset).
fn mallocs(dir: &common::Scratch, flag: Option<&str>, env: Option<&str>) -> u64 {
    let store = dir.join("p.sqlite");
    let _ = std::fs::remove_file(&store);
    let mut c = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    c.args(["run", "-q"]).args(flag).arg("-o").arg(&store);
    c.args([
        "--",
        "python3",
        "-c",
        "x=[str(i)*3 for i in range(100000)]; print(len(x))",
    ]);
    match env {
        Some(v) => c.env("PYTHONMALLOC", v),
        None => c.env_remove("PYTHONMALLOC"),
    };
    let o = c.output().expect("heapledger");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "100000\n");
    let r = common::report_json(&store);
    r["calls"]["malloc"]["count"].as_u64().unwrap()
}

#[test]
fn pythons_objects_reach_the_recorder() {
    let dir = common::Scratch::new("python-objects");
    let by_default = mallocs(&dir, None, None);
    assert!(by_default >= 100_000, "{by_default}");
    let kept = mallocs(&dir, Some("--pymalloc"), None);
    assert!(kept < 20_000, "{kept}");
    // The user's own choice stands.
    let theirs = mallocs(&dir, None, Some("pymalloc"));
    assert!(theirs < 20_000, "{theirs}");
}
