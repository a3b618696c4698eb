//! A program whose executable defines `malloc`, `free`, `calloc` and
//! `realloc` itself (`tests/programs/own_allocator.c`), as one with an
//! allocator linked in does: the dynamic linker finds those definitions
//! before heapledger's, so their calls cannot be recorded. The program runs
//! as it would alone, and heapledger says which functions it could not see,
//! in the profile, the summary, and one line under `-q`, rather than
//! showing an empty profile with no word why.

mod common;

use common::*;
use heapledger_profile::{Profile, Unhooked};
use std::process::Command;

const SRC: &str = "own_allocator.c";

fn build(dir: &Scratch, own: bool, flags: &[&str]) -> std::path::PathBuf {
    let exe = dir.join(if own { "own" } else { "glibc" });
    let mut all = SITE_FLAGS.to_vec();
    all.extend(flags);
    if own {
        all.push("-DOWN_ALLOCATOR");
    }
    compile("cc", &[SRC], &all, &exe);
    exe
}

#[test]
fn an_allocator_defined_by_the_executable_is_named() {
    let dir = Scratch::new("own-allocator");
    let exe = build(&dir, true, &[]);
    let out = dir.join("p.json");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert_eq!(o.status.code(), Some(6), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "own\n");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "heapledger: own defines malloc, free, calloc, realloc itself, before heapledger's: those calls are not in the profile\n"
    );
    let p = Profile::from_path(&out).unwrap();
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(
        ext.unhooked,
        Some(Unhooked {
            functions: ["malloc", "free", "calloc", "realloc"]
                .map(String::from)
                .to_vec(),
            by: exe.display().to_string(),
        })
    );
    assert_eq!(p.call_totals().malloc.count, 0, "no malloc was seen");

    // The summary says it too.
    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("Not seen"))
        .unwrap_or_else(|| panic!("no `Not seen` row:\n{text}"));
    assert!(
        row.contains("calls of malloc, free, calloc, realloc (own defines them itself"),
        "{row}"
    );
}

/// Also built without PIE, where taking malloc's address gives the
/// executable a PLT entry that every lookup of `malloc` returns: a symbol
/// of the executable's, but not a definition (node's case).
#[test]
fn glibc_allocator_is_seen_and_nothing_is_named() {
    for (tag, flags) in [("pie", &[][..]), ("no-pie", &["-fno-pie", "-no-pie"][..])] {
        let dir = Scratch::new(&format!("own-allocator-glibc-{tag}"));
        let exe = build(&dir, false, flags);
        let out = dir.join("p.json");
        let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
        assert_eq!(o.status.code(), Some(6), "{tag}: {o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{tag}");
        let p = Profile::from_path(&out).unwrap();
        assert_eq!(p.heapledger.as_ref().unwrap().unhooked, None, "{tag}");
        let s = site(&p, "make", site_line(SRC, "make"));
        assert_eq!(s.alloc, mms(3, 100, 300, 600), "{tag}: {s:?}");
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            !text.contains("\"unhooked\""),
            "{tag}: written only when needed"
        );
    }
}

/// A program built with a sanitizer (`-fsanitize=address` or `thread`)
/// refuses to start unless the sanitizer's runtime is the first library
/// loaded ("ASan runtime does not come first in initial library list"):
/// under heapledger it did not run at all, and exited 1. heapledger now
/// preloads that runtime before its own, so the program runs as alone
/// (its output, its exit code), and says in one line that the
/// sanitizer's allocator stands before heapledger's, so that nothing of it
/// is recorded. `-fsanitize=undefined` needs nothing of the kind: recorded.
#[test]
fn a_sanitized_program_runs_as_alone() {
    for (tag, flags, says) in [
        (
            "asan",
            &["-fsanitize=address"][..],
            "is built with a sanitizer, whose runtime (libasan.so",
        ),
        (
            "tsan",
            &["-fsanitize=thread"][..],
            "defines malloc, free, calloc, realloc",
        ),
        ("ubsan", &["-fsanitize=undefined"][..], ""),
    ] {
        let dir = Scratch::new(&format!("sanitized-{tag}"));
        let exe = build(&dir, false, flags);
        let alone = Command::new(&exe).output().unwrap();
        if alone.status.code() != Some(6) && tag != "ubsan" {
            // Some kernels' address-space randomization is more than an
            // older sanitizer runtime can work with (ThreadSanitizer's
            // "unexpected memory mapping"): the program cannot run even
            // alone, so there is nothing to compare.
            eprintln!("{tag} skipped: the program cannot run here alone: {alone:?}");
            continue;
        }
        assert_eq!(alone.status.code(), Some(6), "{tag} alone: {alone:?}");
        let out = dir.join("p.sqlite");
        let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
        assert_eq!(o.status.code(), Some(6), "{tag}: {o:?}");
        assert_eq!(o.stdout, alone.stdout, "{tag}");
        let err = String::from_utf8_lossy(&o.stderr);
        if says.is_empty() {
            assert_eq!(err, "", "{tag}");
            let json = dir.join("p.json");
            export_malt(&out, None, &json);
            let p = Profile::from_path(&json).unwrap();
            let s = site(&p, "make", site_line(SRC, "make"));
            assert_eq!(s.alloc, mms(3, 100, 300, 600), "{tag}: {s:?}");
        } else {
            assert_eq!(err.lines().count(), 1, "{tag}: {err}");
            assert!(err.contains(says), "{tag}: {err}");
        }
    }
}

/// An allocator linked in under names of its own (`mi_malloc`, as Rust's
/// mimalloc crate links mimalloc; jemallocator's `_rjem_mallocx`): its
/// blocks never reach malloc, and the profile only looked small. The run
/// now names the function in one line; the program runs as alone.
#[test]
fn an_allocator_under_its_own_names_is_named() {
    let dir = Scratch::new("own-names");
    let exe = dir.join("own_names");
    compile("cc", &["own_names.c"], SITE_FLAGS, &exe);
    let out = dir.join("p.sqlite");
    let o = heapledger_run("dwarf", &out, &exe, &[] as &[&str]);
    assert_eq!(o.status.code(), Some(6), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "own_names: 1\n");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "heapledger: {} calls mi_malloc, mimalloc's own function rather than malloc: what that allocator serves is not in the profile\n",
            exe.display()
        )
    );
    assert!(out.exists());
}
