//! The blocks a single-threaded process allocated last are kept apart from
//! the shared table of live blocks (`live.rs`, "young" slots). A thread
//! created after them must find them when it frees them, and the child that
//! a threaded process forks (which glibc still counts as threaded) keeps
//! exact counts. `tests/programs/young.c`.

mod common;

use common::*;
use heapledger_profile::Profile;

/// (count, bytes) of all blocks alive at exit.
fn leaked(p: &Profile) -> (u64, u64) {
    p.leaks
        .iter()
        .fold((0, 0), |a, l| (a.0 + l.count, a.1 + l.memory))
}

/// Whether one call site left exactly `count` blocks of `bytes` in all
/// alive at exit (the C library leaves blocks of its own too).
fn leaves(p: &Profile, count: u64, bytes: u64) -> bool {
    p.leaks
        .iter()
        .any(|l| l.count == count && l.memory == bytes)
}

/// (allocated, freed) of the call site that allocates `N` blocks of
/// `base`..`base + N` bytes.
fn site(p: &Profile, base: u64) -> (u64, u64) {
    p.stacks
        .iter()
        .filter(|s| s.infos.alloc.min == base && s.infos.alloc.max == base + N - 1)
        .fold((0, 0), |a, s| {
            (a.0 + s.infos.alloc.count, a.1 + s.infos.free.count)
        })
}

/// Blocks per call site in young.c.
const N: u64 = 24;

fn check(p: &Profile, what: &str) {
    let ext = p.heapledger.as_ref().unwrap();
    assert_eq!(ext.unknown_frees, 0, "{what}");
    // Starting a thread's state asks glibc for its stack, which allocates:
    // those calls are the recorder's own, not the program's unrecorded ones.
    assert_eq!(ext.unrecorded_events, 0, "{what}");
    assert_eq!(site(p, 100), (N, N), "{what}");
}

#[test]
fn a_thread_started_later_frees_the_blocks_allocated_before_it() {
    let dir = Scratch::new("young");
    let exe = compile_threaded("young", &dir);
    for what in ["handoff", "timer"] {
        let (p, out) = profile_of("dwarf", &dir, &exe, &[what]);
        assert_eq!(out, "ok\n");
        check(&p, what);
        assert!(leaves(&p, 1, 5000) && leaves(&p, 1, 6000), "{what}");
        // Without stacks, every block is one stack's: the same blocks are
        // left.
        let (none, _) = profile_of("none", &dir, &exe, &[what]);
        assert_eq!(none.heapledger.as_ref().unwrap().unknown_frees, 0, "{what}");
        assert_eq!(leaked(&none), leaked(&p), "{what} --stack none");
    }
}

#[test]
fn a_child_of_a_threaded_process_counts_exactly() {
    let dir = Scratch::new("young-fork");
    let exe = compile_threaded("young", &dir);
    let (parent, out) = profile_of("dwarf", &dir, &exe, &["fork"]);
    assert_eq!(out, "ok\n");
    assert!(leaves(&parent, 1, 5000) && leaves(&parent, 1, 6000));
    let children: Vec<_> = std::fs::read_dir(dir.join("p.children"))
        .expect("the child's profile")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(children.len(), 1, "{children:?}");
    let child = Profile::from_path(&children[0]).unwrap();
    check(&child, "child");
    assert_eq!(site(&child, 300), (N, N / 2), "child");
    // Half of the second N blocks and the 5000 bytes `free_them` leaves.
    let odd: u64 = (301..300 + N).step_by(2).sum();
    assert!(
        leaves(&child, N / 2, odd) && leaves(&child, 1, 5000),
        "child"
    );
}
