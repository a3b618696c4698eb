//! C++ (`tests/programs/cxx.cpp`): operator new, new[] and delete are
//! charged to the user function that called them (operator new's own frame
//! is removed), and a thrown and caught exception is charged to
//! `__cxa_allocate_exception` called from the throwing function.
//!
//! make_widgets news 5 Widgets (48 bytes; 4 deleted, 1 leaked), make_arrays
//! news 2 int[25] (100 bytes, delete[]d), catcher calls thrower 3 times,
//! which throws a 64-byte Boom each time.

mod common;

use common::*;
use heapledger_profile::Profile;
use std::sync::OnceLock;

const SRC: &str = "cxx.cpp";

fn profile() -> &'static Profile {
    static RUN: OnceLock<Profile> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = Scratch::new("cxx");
        let exe = dir.join("cxx");
        compile("c++", &[SRC], SITE_FLAGS, &exe);
        let (p, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
        assert_eq!(stdout, "cxx: done\n");
        p
    })
}

fn line(name: &str) -> u32 {
    site_line(SRC, name)
}

#[test]
fn new_and_delete_are_charged_to_the_caller() {
    let p = profile();
    let s = site(p, "make_widgets", line("new"));
    assert_eq!(s.alloc, mms(5, 48, 48, 240), "{s:?}");
    assert_eq!(s.free, mms(4, 48, 48, 192), "{s:?}");
    assert_eq!(s.alive_req, 48);
    for st in stacks_at(p, "make_widgets", line("new")) {
        let want = [("make_widgets", line("new")), ("main", line("call_new"))];
        assert!(
            starts_with(p, &st.stack, &want),
            "{}",
            describe(p, &st.stack)
        );
    }
    for st in p.stacks.iter() {
        let first = st.stack.first().map(|&a| frame(p, a).0).unwrap_or_default();
        assert!(
            !first.starts_with("operator new"),
            "{}",
            describe(p, &st.stack)
        );
    }
}

#[test]
fn new_array_and_delete_array() {
    let p = profile();
    let s = site(p, "make_arrays", line("new_array"));
    assert_eq!(s.alloc, mms(2, 100, 100, 200), "{s:?}");
    assert_eq!(s.free, s.alloc, "{s:?}");
    for st in stacks_at(p, "make_arrays", line("new_array")) {
        let want = [
            ("make_arrays", line("new_array")),
            ("main", line("call_new_array")),
        ];
        assert!(
            starts_with(p, &st.stack, &want),
            "{}",
            describe(p, &st.stack)
        );
    }
}

/// The exception object (Boom plus libstdc++'s header) comes from
/// `__cxa_allocate_exception`; its stack goes on to the throw in `thrower`
/// and the call in `catcher`. It is freed once caught.
#[test]
fn thrown_exception_is_charged_to_the_throwing_function() {
    let p = profile();
    let want = [("thrower", line("throw")), ("catcher", line("catch_call"))];
    let stacks: Vec<_> = p
        .stacks
        .iter()
        .filter(|s| (0..s.stack.len()).any(|i| starts_with(p, &s.stack[i..], &want)))
        .collect();
    assert!(
        !stacks.is_empty(),
        "no stack reaches thrower:{}",
        line("throw")
    );
    let (mut count, mut freed) = (0, 0);
    for s in &stacks {
        let (first, _) = frame(p, s.stack[0]);
        assert_eq!(
            first,
            "__cxa_allocate_exception",
            "{}",
            describe(p, &s.stack)
        );
        assert!(
            starts_with(p, &s.stack[1..], &want),
            "thrower must be the caller of __cxa_allocate_exception: {}",
            describe(p, &s.stack)
        );
        assert!(
            s.infos.alloc.min > 64,
            "Boom and a header: {:?}",
            s.infos.alloc
        );
        count += s.infos.alloc.count;
        freed += s.infos.free.count;
    }
    assert_eq!((count, freed), (3, 3));
}

/// Only the one Widget leaks; libstdc++'s own blocks (its emergency
/// exception pool) are marked as the runtime's.
#[test]
fn only_the_kept_widget_leaks() {
    let p = profile();
    let leaks = program_leaks(p);
    assert_eq!(leaks.len(), 1, "leaks:{}", describe_leaks(p, &leaks));
    assert_eq!((leaks[0].count, leaks[0].memory), (1, 48));
    assert!(starts_with(
        p,
        &leaks[0].stack,
        &[("make_widgets", line("new"))]
    ));
}

/// `tests/programs/wrapper_merge.cpp`: three recorded stacks (the program's
/// own operator new calling malloc, the same calling calloc, and malloc
/// called directly) from one call instruction become one stack once
/// operator new's frame is dropped: one entry with all three allocations,
/// and one leak entry.
#[test]
fn stacks_equal_without_wrapper_frames_are_merged() {
    const MERGE_SRC: &str = "wrapper_merge.cpp";
    let dir = Scratch::new("wrapper_merge");
    let exe = dir.join("wrapper_merge");
    compile("c++", &[MERGE_SRC], SITE_FLAGS, &exe);
    let (p, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
    assert!(stdout.starts_with("wrapper_merge: "), "{stdout}");
    let call = site_line(MERGE_SRC, "call");
    let want = [("site", call), ("main", site_line(MERGE_SRC, "loop"))];
    let stacks = stacks_at(&p, "site", call);
    let all: Vec<String> = stacks.iter().map(|s| describe(&p, &s.stack)).collect();
    assert_eq!(stacks.len(), 1, "{all:#?}");
    let s = stacks[0];
    assert!(
        starts_with(&p, &s.stack, &want),
        "{}",
        describe(&p, &s.stack)
    );
    assert_eq!(s.infos.alloc, mms(3, 17, 40, 81), "{:?}", s.infos);
    assert_eq!(s.infos.alive_req, 81);
    let leaks = program_leaks(&p);
    assert_eq!(leaks.len(), 1, "leaks:{}", describe_leaks(&p, &leaks));
    assert_eq!((leaks[0].count, leaks[0].memory), (3, 81));
    assert!(starts_with(&p, &leaks[0].stack, &want));
}
