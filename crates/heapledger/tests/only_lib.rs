//! `--only-lib` (issue 34, seed 002): a program that dlopens two libraries
//! that both leak, recorded with `--only-lib` naming one: exactly that
//! library's allocations and leaks, with their stacks, the blocks the C
//! library allocates for it (strdup) included; the other library's and
//! the program's own calls counted per function only.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(dir: &Scratch) -> (PathBuf, PathBuf, PathBuf) {
    let mut lib_flags = SITE_FLAGS.to_vec();
    lib_flags.extend(["-shared", "-fPIC"]);
    let a = dir.join("libleaka.so");
    let b = dir.join("libleakb.so");
    compile(
        "cc",
        &["onlylib_lib.c"],
        &[&lib_flags[..], &["-DNAME=a"]].concat(),
        &a,
    );
    compile(
        "cc",
        &["onlylib_lib.c"],
        &[&lib_flags[..], &["-DNAME=b"]].concat(),
        &b,
    );
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-ldl");
    let exe = dir.join("onlylib");
    compile("cc", &["onlylib_main.c"], &flags, &exe);
    (exe, a, b)
}

fn record(
    dir: &Scratch,
    exe: &Path,
    libs: &[&Path],
    extra: &[&str],
    only: &[&str],
) -> heapledger_profile::Profile {
    let store = dir.join("p.sqlite");
    let _ = std::fs::remove_file(&store);
    let mut c = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    c.args(["run", "-q"]).args(extra);
    for o in only {
        c.args(["--only-lib", o]);
    }
    let o = c
        .arg("-o")
        .arg(&store)
        .arg("--")
        .arg(exe)
        .args(libs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done\n");
    let json = dir.join("p.json");
    let e = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["export", "--format", "malt", "-o"])
        .arg(&json)
        .arg(&store)
        .output()
        .unwrap();
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    heapledger_profile::Profile::from_path(&json).unwrap()
}

/// (allocations, bytes, frees) of every stack.
fn totals(p: &heapledger_profile::Profile) -> (u64, u64, u64) {
    p.stacks.iter().fold((0, 0, 0), |t, s| {
        (
            t.0 + s.infos.alloc.count,
            t.1 + s.infos.alloc.sum,
            t.2 + s.infos.free.count,
        )
    })
}

#[test]
fn only_the_chosen_librarys_allocations_and_leaks() {
    let dir = Scratch::new("onlylib");
    let (exe, a, b) = build(&dir);
    let src = "onlylib_lib.c";
    let copy_bytes = "a copy of a string".len() as u64 + 1;
    // Without stacks, only the library's own calls can be told apart (the
    // C library's for it need the stack): a_work's 20.
    let p = record(
        &dir,
        &exe,
        &[&a, &b],
        &["--stack", "none"],
        &["libleaka.so"],
    );
    assert_eq!(totals(&p), (20, 320 + 480, 10));
    for pattern in ["libleaka.so", "liblea?a*", a.to_str().unwrap()] {
        let p = record(&dir, &exe, &[&a, &b], &[], &[pattern]);
        // a_work: 10 kept blocks of 32, 10 of 48 made and freed, 2 copies.
        let kept = site(&p, "a_work", site_line(src, "kept"));
        let freed = site(&p, "a_work", site_line(src, "freed"));
        assert_eq!(
            (kept.alloc.count, kept.alloc.sum, kept.free.count),
            (10, 320, 0),
            "{pattern}"
        );
        assert_eq!(
            (freed.alloc.count, freed.alloc.sum, freed.free.count),
            (10, 480, 10),
            "{pattern}"
        );
        assert_eq!(
            totals(&p),
            (22, 320 + 480 + 2 * copy_bytes, 10),
            "{pattern}: only a_work's allocations"
        );
        // Its leaks alone: the kept blocks and the two copies, with stacks
        // through a_work.
        let leaks = program_leaks(&p);
        let at_a = |l: &&heapledger_profile::Leak| {
            l.stack.iter().any(|&f| is_fn(&frame(&p, f).0, "a_work"))
        };
        assert!(
            leaks.iter().all(at_a),
            "{pattern}: {}",
            describe_leaks(&p, &leaks)
        );
        let (n, bytes) = leaks
            .iter()
            .fold((0, 0), |t, l| (t.0 + l.count, t.1 + l.memory));
        assert_eq!((n, bytes), (12, 320 + 2 * copy_bytes), "{pattern}");
        // The copies: allocated by the C library for a_work.
        let copies = p
            .leaks
            .iter()
            .filter(|l| {
                l.stack.iter().any(|&f| {
                    let (func, line) = frame(&p, f);
                    is_fn(&func, "a_work") && line == Some(site_line(src, "copy"))
                })
            })
            .map(|l| l.count)
            .sum::<u64>();
        assert_eq!(copies, 2, "{pattern}");
    }
    // Both libraries named: both libraries' allocations, not the program's.
    let p = record(&dir, &exe, &[&a, &b], &[], &["libleaka.so", "libleakb.so"]);
    assert_eq!(site(&p, "b_work", site_line(src, "kept")).alloc.count, 20);
    assert_eq!(totals(&p).0, 22 + 42);
    assert!(stacks_at(&p, "main", site_line("onlylib_main.c", "mine")).is_empty());
    // Without --only-lib, everything.
    let p = record(&dir, &exe, &[&a, &b], &[], &[]);
    assert_eq!(
        site(&p, "main", site_line("onlylib_main.c", "mine"))
            .alloc
            .count,
        5
    );
}

#[test]
fn a_bad_library_name_is_one_line() {
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args(["run", "--only-lib", "a:b", "--", "true"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(e.lines().count(), 1, "{e}");
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .args([
            "run",
            "--only-lib",
            "x",
            "--sample-every",
            "1M",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
