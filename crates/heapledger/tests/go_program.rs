//! A Go program that allocates through cgo (`tests/programs/go_cgo`). Go's
//! runtime ends the process with the `exit_group` system call itself, past
//! every hook, so the recorder never writes its data at the end: `run`
//! said the program had "replaced itself with a program that ran without
//! the recorder". It now says what happened, in one line, with the
//! program's exit code; and a run longer than `--checkpoint-every` keeps
//! what its last checkpoint saw, every C allocation of the goroutines
//! (they ended before it).

mod common;

use common::*;
use std::process::Command;

#[test]
fn a_go_program_says_why_and_keeps_its_checkpoint() {
    let dir = Scratch::new("go-cgo");
    let exe = dir.join("go_cgo");
    let src = programs_dir().join("go_cgo");
    let o = Command::new("go")
        .args(["build", "-o"])
        .arg(&exe)
        .arg(".")
        .current_dir(&src)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("CGO_ENABLED", "1")
        .output()
        .expect("go (Debian's golang-go; .ci/run installs it)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let store = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &store, &exe, &[] as &[&str]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "go_cgo: done\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is a Go program"), "{err}");
    assert!(!store.exists());

    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "-q", "--checkpoint-every", "0.1", "-o"])
        .arg(&store)
        .arg("--")
        .arg(&exe)
        .arg("wait")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let json = dir.join("p.json");
    export_malt(&store, None, &json);
    let p = read_profile(&json);
    let ext = p.heapledger.as_ref().unwrap();
    assert!(ext.checkpoint.is_some(), "read from a checkpoint");
    let s = site(&p, "grab", 10);
    assert_eq!(s.alloc.count, 160_000, "{s:?}");
    assert_eq!(s.free.count, 160_000, "{s:?}");
}
