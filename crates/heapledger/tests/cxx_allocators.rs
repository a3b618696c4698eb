//! C++ programs whose `operator new` is an allocator's own
//! (`tests/programs/cxx_allocators.cpp`): jemalloc, tcmalloc and mimalloc
//! preloaded, and `foreign_new.cpp`, an allocator whose `new` reaches its
//! memory without calling `malloc`, as theirs do. Before heapledger
//! defined the C++ operators (`hooks/cxx.rs` in the recorder), none of
//! their `new`s was recorded (3 allocations of 1014 in a program under
//! jemalloc; heaptrack misses them the same way). Each site must now hold
//! the same blocks as with glibc alone: every form of `new` (plain, array,
//! aligned, nothrow, from inside libstdc++), sized and aligned `delete`,
//! and a `new` that cannot be met still throws `std::bad_alloc`.
//!
//! Also a C program that opens a C++ plugin into a scope of its own
//! (`cxx_plugin_host.c`), where heapledger's `operator new` must find the
//! plugin's C++ runtime to forward to.
//!
//! jemalloc, tcmalloc and mimalloc are Debian's `libjemalloc2`,
//! `libtcmalloc-minimal4` and `libmimalloc2.0` (`.ci/run` installs them).

mod common;

use common::*;
use heapledger_profile::Profile;
use std::path::{Path, PathBuf};
use std::process::Command;

const SRC: &str = "cxx_allocators.cpp";

fn line(name: &str) -> u32 {
    site_line(SRC, name)
}

/// The program, and `foreign_new.cpp`'s library, built once per test.
fn build(dir: &Scratch) -> (PathBuf, PathBuf) {
    let exe = dir.join("cxx_allocators");
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-std=c++17");
    compile("c++", &[SRC], &flags, &exe);
    let lib = dir.join("libforeign_new.so");
    compile(
        "c++",
        &["foreign_new.cpp"],
        &["-shared", "-fPIC", "-O1"],
        &lib,
    );
    (exe, lib)
}

/// A system allocator's library, which the test needs.
fn system_lib(name: &str, package: &str) -> PathBuf {
    let p = Path::new("/usr/lib/x86_64-linux-gnu").join(name);
    assert!(
        p.exists(),
        "{} is missing: install Debian's {package} (.ci/run does)",
        p.display()
    );
    p
}

/// `heapledger run` of `exe args` with `preload` in the environment's
/// LD_PRELOAD (heapledger puts its own before it), which must exit 0
/// printing what the program prints alone; the profile of the process.
fn run_with(dir: &Scratch, preload: Option<&Path>, exe: &Path, args: &[&str]) -> Profile {
    let store = dir.join("p.sqlite");
    let _ = std::fs::remove_file(&store);
    let mut alone = Command::new(exe);
    let mut c = Command::new(env!("CARGO_BIN_EXE_heapledger"));
    c.args(["run", "-q", "-o"]).arg(&store).arg("--").arg(exe);
    c.args(args);
    alone.args(args);
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
        alone.env("LD_PRELOAD", p);
    }
    let a = alone.output().unwrap();
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{c:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.stdout, a.stdout, "{c:?}");
    let json = dir.join("p.json");
    export_malt(&store, None, &json);
    read_profile(&json)
}

/// Every site of `cxx_allocators.cpp` holds exactly its blocks.
fn check(p: &Profile, with: &str) {
    let s = site(p, "widgets", line("new"));
    assert_eq!(s.alloc, mms(5, 48, 48, 240), "{with}: {s:?}");
    assert_eq!(s.free, mms(4, 48, 48, 192), "{with}: {s:?}");
    for st in stacks_at(p, "widgets", line("new")) {
        let want = [("widgets", line("new")), ("main", line("call_new"))];
        assert!(
            starts_with(p, &st.stack, &want),
            "{with}: {}",
            describe(p, &st.stack)
        );
    }
    let s = site(p, "arrays", line("new_array"));
    assert_eq!(s.alloc, mms(2, 100, 100, 200), "{with}: {s:?}");
    assert_eq!(s.free, s.alloc, "{with}: {s:?}");
    let s = site(p, "lines", line("new_aligned"));
    assert_eq!(s.alloc, mms(3, 128, 128, 384), "{with}: {s:?}");
    assert_eq!(s.free, s.alloc, "{with}: {s:?}");
    let s = site(p, "quiet", line("new_nothrow"));
    assert_eq!(s.alloc, mms(2, 48, 48, 96), "{with}: {s:?}");
    assert_eq!(s.free, s.alloc, "{with}: {s:?}");
    // The string's buffer: libstdc++'s own call of operator new, in
    // `_M_construct` (called from `text`, through the constructor inlined
    // there).
    let text: Vec<_> = p
        .stacks
        .iter()
        .filter(|s| {
            s.stack
                .first()
                .is_some_and(|&a| frame(p, a).0.contains("_M_construct"))
        })
        .collect();
    let (count, bytes): (u64, u64) = text.iter().fold((0, 0), |(c, b), s| {
        (c + s.infos.alloc.count, b + s.infos.alloc.sum)
    });
    assert_eq!((count, bytes), (1, 101), "{with}");
    // No stack starts in an operator new or in heapledger's own code.
    for st in p.stacks.iter() {
        let first = st.stack.first().map(|&a| frame(p, a).0).unwrap_or_default();
        assert!(
            !first.starts_with("operator new") && !first.starts_with("_Zn"),
            "{with}: {}",
            describe(p, &st.stack)
        );
    }
    let leaks = program_leaks(p);
    let ours: Vec<_> = leaks
        .iter()
        .filter(|l| starts_with(p, &l.stack, &[("widgets", line("new"))]))
        .collect();
    assert_eq!(ours.len(), 1, "{with}: leaks:{}", describe_leaks(p, &leaks));
    assert_eq!((ours[0].count, ours[0].memory), (1, 48), "{with}");
}

#[test]
fn every_form_of_new_and_delete_alone() {
    let dir = Scratch::new("cxx-allocators-alone");
    let (exe, _) = build(&dir);
    let p = run_with(&dir, None, &exe, &["huge"]);
    check(&p, "glibc");
    // The request of 2^62 bytes that failed is a call, but no bytes: they
    // made the program's total 4 EiB.
    let m = p.call_totals().malloc;
    assert!(m.sum < 1 << 20, "{m:?}");
}

#[test]
fn an_allocator_s_own_new_is_recorded() {
    let dir = Scratch::new("cxx-allocators-foreign");
    let (exe, lib) = build(&dir);
    let p = run_with(&dir, Some(&lib), &exe, &["huge"]);
    check(&p, "foreign_new");
}

#[test]
fn jemalloc_tcmalloc_and_mimalloc_new_are_recorded() {
    let dir = Scratch::new("cxx-allocators-system");
    let (exe, _) = build(&dir);
    for (name, package, args) in [
        ("libjemalloc.so.2", "libjemalloc2", &["huge"][..]),
        (
            "libtcmalloc_minimal.so.4",
            "libtcmalloc-minimal4",
            &["huge"][..],
        ),
        // mimalloc's own new aborts on a request it cannot meet (alone as
        // under heapledger): no `huge`.
        ("libmimalloc.so.2", "libmimalloc2.0", &[][..]),
    ] {
        let lib = system_lib(name, package);
        let p = run_with(&dir, Some(&lib), &exe, args);
        check(&p, name);
    }
}

#[test]
fn a_cxx_plugin_in_a_scope_of_its_own() {
    let dir = Scratch::new("cxx-plugin");
    let lib = dir.join("libcxx_plugin.so");
    compile(
        "c++",
        &["cxx_plugin.cpp"],
        &["-g", "-O1", "-shared", "-fPIC", "-fno-omit-frame-pointer"],
        &lib,
    );
    let exe = dir.join("cxx_plugin_host");
    compile("cc", &["cxx_plugin_host.c"], SITE_FLAGS, &exe);
    let lib_s = lib.to_str().unwrap();
    let p = run_with(&dir, None, &exe, &[lib_s]);
    // Twice 10 std::string objects of 32 bytes.
    let s = site(&p, "plugin_work", site_line("cxx_plugin.cpp", "plugin_new"));
    assert_eq!(s.alloc, mms(20, 32, 32, 640), "{s:?}");
    assert_eq!(s.free, s.alloc, "{s:?}");
}
