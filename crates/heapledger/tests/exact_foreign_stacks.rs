//! Stacks of allocations made on stacks that are not the thread's own
//! (`tests/programs/foreign_stacks.c`): coroutines made with `makecontext`,
//! on a stack from `malloc` and on a deep one from `mmap`, and a signal
//! handler on an alternate signal stack. Each is complete, function and
//! line, up to where the program's frames end: before, only the immediate
//! caller was kept.

mod common;

use common::*;
use heapledger_profile::Profile;

const SRC: &str = "foreign_stacks.c";

fn line(name: &str) -> u32 {
    site_line(SRC, name)
}

fn run(stack: &str, flags: &[&str]) -> Profile {
    let dir = Scratch::new(&format!("foreign_{stack}"));
    let exe = dir.join("foreign_stacks");
    compile("cc", &[SRC], flags, &exe);
    profile_of(stack, &dir, &exe, &[] as &[&str]).0
}

/// Asserts that the site `function:marker` has `calls` allocations, all on
/// stacks that go on with `callers` (function, marker), leaf first.
fn assert_site(p: &Profile, function: &str, marker: &str, calls: u64, callers: &[(&str, &str)]) {
    let stacks = stacks_at(p, function, line(marker));
    let mut want = vec![(function, line(marker))];
    want.extend(callers.iter().map(|&(f, m)| (f, line(m))));
    let all: Vec<String> = p.stacks.iter().map(|s| describe(p, &s.stack)).collect();
    assert!(
        !stacks.is_empty(),
        "no stack starts at {function}:{}; stacks:\n{}",
        line(marker),
        all.join("\n")
    );
    for s in &stacks {
        assert!(
            starts_with(p, &s.stack, &want),
            "stack {} does not start with {want:?}",
            describe(p, &s.stack)
        );
    }
    assert_eq!(site(p, function, line(marker)).alloc.count, calls);
}

fn check(p: &Profile) {
    assert_site(p, "co_leaf", "co_leaf", 5, &[("co_body", "co_body")]);
    let deep: Vec<(&str, &str)> = std::iter::repeat_n(("co_deep", "co_deep"), 150)
        .chain([("co_deep_start", "co_deep_start")])
        .collect();
    assert_site(p, "co_deep", "co_deep_leaf", 1, &deep);
    // The handler, then (past the kernel's signal frame and libc's raise)
    // the code it interrupted, on the thread's own stack.
    let s = stacks_at(p, "on_usr1", line("on_usr1"));
    assert_eq!(s.len(), 1);
    let names: Vec<(String, Option<u32>)> = s[0].stack.iter().map(|&a| frame(p, a)).collect();
    let raiser = names
        .iter()
        .position(|(f, l)| is_fn(f, "raiser") && *l == Some(line("raiser")));
    assert!(
        raiser.is_some_and(|i| names.get(i + 1).is_some_and(|(f, _)| is_fn(f, "main"))),
        "the handler's stack does not reach raiser and main: {}",
        describe(p, &s[0].stack)
    );
}

#[test]
fn dwarf_stacks_on_coroutines_and_signal_stacks_are_complete() {
    check(&run("dwarf", SITE_FLAGS));
}

#[test]
fn dwarf_stacks_on_foreign_stacks_without_frame_pointers() {
    check(&run(
        "dwarf",
        &["-g", "-O1", "-fno-builtin", "-fomit-frame-pointer"],
    ));
}

/// Frame-pointer stacks on coroutine stacks follow the chain of saved frame
/// pointers there too (a signal frame, which has none, ends them).
#[test]
fn fp_stacks_on_coroutines_are_complete() {
    let p = run("fp", SITE_FLAGS);
    assert_site(&p, "co_leaf", "co_leaf", 5, &[("co_body", "co_body")]);
    let deep: Vec<(&str, &str)> = std::iter::repeat_n(("co_deep", "co_deep"), 150)
        .chain([("co_deep_start", "co_deep_start")])
        .collect();
    assert_site(&p, "co_deep", "co_deep_leaf", 1, &deep);
}
