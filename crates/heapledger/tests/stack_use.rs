//! Stack memory (issue 31): each thread's deepest stack at an allocation,
//! in bytes, with the stack of that allocation, in the profile (MALT's
//! `threads[].stackMem`) and the summary. A thread that recurses 1000
//! frames deep (programs/deep_thread.c) shows its stack use within 10 %
//! of what the program measures itself; with `--stack enter-exit`, within
//! 2 % where it allocates only before it recurses.

mod common;

use common::*;
use std::process::Command;

#[test]
fn a_thread_recursing_1000_frames_deep_shows_its_stack_use() {
    let dir = Scratch::new("stack-use");
    let exe = dir.join("deep_thread");
    let mut flags = SITE_FLAGS.to_vec();
    flags.push("-pthread");
    compile("cc", &["deep_thread.c"], &flags, &exe);
    let (p, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    let truth: u64 = stdout.trim().parse().expect("the program's own measure");
    assert!(
        truth > 64 * 1000,
        "1000 frames of 64 bytes and more: {truth}"
    );
    let deepest = p
        .threads
        .iter()
        .map(|t| &t.stack_mem)
        .max_by_key(|s| s.size)
        .unwrap();
    let got = deepest.size;
    assert!(
        got.abs_diff(truth) * 10 <= truth,
        "stack use {got} B, the program measured {truth} B"
    );
    // The stack of that allocation: malloc's caller at the bottom of the
    // recursion.
    let (function, line) = frame(&p, deepest.stack[0]);
    assert!(
        is_fn(&function, "recurse") && line == Some(site_line("deep_thread.c", "deepest")),
        "the deepest stack's leaf is {function}:{line:?}"
    );
    // (Cut at the default depth of 256 frames.)
    assert!(deepest.stack.len() >= 256, "{} frames", deepest.stack.len());
    assert_eq!(deepest.mem.len(), deepest.stack.len());
    // The main thread's is far smaller.
    assert!(p.threads.iter().filter(|t| t.stack_mem.size > 0).count() >= 1);

    let o = Command::new(env!("CARGO_BIN_EXE_heapledger"))
        .arg("report")
        .arg(dir.join("p.sqlite"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("Deepest stack"))
        .unwrap_or_else(|| panic!("no deepest stack in the summary:\n{text}"));
    assert!(
        line.contains(&format!("({got} B)")) && line.contains("recurse"),
        "{line}"
    );
}

/// `--stack enter-exit` (issue 35): every entry is measured, so a thread
/// that recurses 1000 frames deep without allocating there still shows
/// how deep it went, and the stack that went there.
#[test]
fn enter_exit_stacks_measure_the_deepest_entry_without_an_allocation_there() {
    let dir = Scratch::new("stack-use-enter-exit");
    let stub = dir.join("libcyg_stub.so");
    compile("cc", &["cyg_stub.c"], &["-shared", "-fPIC"], &stub);
    let exe = dir.join("deep_thread");
    let lib_dir = format!("-L{}", dir.join("").display());
    let rpath = format!("-Wl,-rpath,{}", dir.join("").display());
    let mut flags = SITE_FLAGS.to_vec();
    flags.extend([
        "-pthread",
        "-DALLOC_FIRST",
        "-finstrument-functions",
        &lib_dir,
        &rpath,
    ]);
    compile(
        "cc",
        &["deep_thread.c"],
        &[&flags[..], &["-lcyg_stub"]].concat(),
        &exe,
    );
    let deepest = |mode: &str| {
        let (p, stdout) = profile_of(mode, &dir, &exe, &[] as &[&str]);
        let truth: u64 = stdout.trim().parse().expect("the program's own measure");
        let d = p
            .threads
            .iter()
            .map(|t| t.stack_mem.clone())
            .max_by_key(|s| s.size)
            .unwrap();
        (p, d, truth)
    };
    let (p, d, truth) = deepest("enter-exit");
    assert!(truth > 64 * 1000, "{truth}");
    assert!(
        d.size.abs_diff(truth) * 50 <= truth,
        "stack use {} B, the program measured {truth} B",
        d.size
    );
    // Its stack: the recursion's own call sites, cut at 256 frames.
    let (function, _) = frame(&p, d.stack[0]);
    assert!(is_fn(&function, "recurse"), "leaf {function}");
    assert_eq!(d.stack.len(), 256);
    // Unwinding sees only the allocation before the recursion.
    let (_, d, truth) = deepest("dwarf");
    assert!(d.size * 10 < truth, "{} B of {truth} B", d.size);
}
