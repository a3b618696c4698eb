//! A program that dies of a stack overflow leaves its profile
//! (`tests/programs/stack_overflow.c`): heapledger's `SIGSEGV` handler runs
//! on an alternate signal stack of its own, which the program does not see,
//! and a program that brings its own alternate stack and handler keeps them.

mod common;

use common::*;
use heapledger_profile::Profile;
use std::process::Output;

const SRC: &str = "stack_overflow.c";

/// Runs `stack_overflow MODE` under heapledger, built in a scratch folder of
/// its own (removed when the test ends); its output and the profile, which
/// it must have written.
fn run(mode: &str) -> (Output, Profile) {
    let dir = Scratch::new(&format!("stack-overflow-{mode}"));
    let exe = compile_threaded("stack_overflow", &dir);
    let out = dir.join(&format!("{mode}.json"));
    let o = heapledger_run("dwarf", &out, &exe, &[mode]);
    let p = Profile::from_path(&out).unwrap_or_else(|e| {
        panic!(
            "{mode}: {e}; stderr: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o, p)
}

/// The overflowing recursion's allocations: one per level, none freed.
fn levels(p: &Profile) -> u64 {
    let s = site(p, "down", site_line(SRC, "down"));
    assert_eq!((s.alloc.min, s.alloc.max), (100, 100), "{s:?}");
    assert_eq!(s.free.count, 0, "{s:?}");
    s.alloc.count
}

fn died_of_sigsegv(o: &Output, p: &Profile) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    // heapledger exits as a shell reports the program: 128 + SIGSEGV.
    assert_eq!(o.status.code(), Some(128 + libc::SIGSEGV), "{stderr}");
    assert_eq!(stderr, "", "heapledger -q said something");
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(
        (ext.exit.code, ext.exit.signal),
        (None, Some(libc::SIGSEGV))
    );
}

#[test]
fn an_overflow_in_the_main_thread_leaves_the_profile() {
    let (o, p) = run("main");
    died_of_sigsegv(&o, &p);
    // An 8 MiB stack at a few hundred bytes a level.
    let n = levels(&p);
    assert!(n > 5_000, "{n} levels");
    // Each level's block comes from down, called by down (or, at the first
    // level, by main).
    let recurse = site_line(SRC, "recurse");
    let stacks = stacks_at(&p, "down", site_line(SRC, "down"));
    assert!(stacks.len() > 100, "{} stacks", stacks.len());
    for st in stacks {
        let caller = st.stack.get(1).map(|&a| frame(&p, a));
        assert!(
            caller == Some(("down".to_string(), Some(recurse)))
                || caller.is_some_and(|(f, _)| f == "main"),
            "{}",
            describe(&p, &st.stack)
        );
    }
}

#[test]
fn an_overflow_in_another_thread_leaves_the_profile() {
    let (o, p) = run("thread");
    died_of_sigsegv(&o, &p);
    let before = site(&p, "main", site_line(SRC, "before_thread"));
    assert_eq!(before.alloc, mms(3, 300, 300, 900), "{before:?}");
    // A 1 MiB stack at a few hundred bytes a level.
    let n = levels(&p);
    assert!(n > 500, "{n} levels");
}

/// Under heapledger as without it: the program is told it has no alternate
/// stack, sets its own, and its handler (SA_ONSTACK) jumps out of the
/// overflow; what it allocates after that is recorded, and it ends well.
#[test]
fn a_program_with_its_own_alternate_stack_keeps_it() {
    let dir = Scratch::new("stack-overflow-plain");
    let exe = compile_threaded("stack_overflow", &dir);
    let plain = std::process::Command::new(&exe)
        .arg("own")
        .output()
        .unwrap();
    let plain_out = String::from_utf8_lossy(&plain.stdout);
    assert_eq!(
        plain_out, "own\nbefore: none\nrecovered\nafter: 262144 bytes\n",
        "without heapledger"
    );
    let (o, p) = run("own");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {stderr}", o.status);
    assert_eq!(String::from_utf8_lossy(&o.stdout), plain_out);
    let after = site(&p, "main", site_line(SRC, "after"));
    assert_eq!(after.alloc, mms(4, 400, 400, 1600), "{after:?}");
    assert_eq!(after.free, after.alloc, "{after:?}");
    assert!(levels(&p) > 5_000);
}
