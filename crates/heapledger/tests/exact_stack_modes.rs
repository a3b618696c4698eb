//! The three `--stack` modes on one program (`tests/programs/basic.c`, built
//! with frame pointers): the counts are the same in all modes; `dwarf` and
//! `fp` name the same call sites; `none` has one empty stack holding
//! everything.

mod common;

use common::*;
use heapledger_profile::Profile;

const SRC: &str = "basic.c";

/// What must not depend on how stacks are captured.
fn counts(p: &Profile) -> String {
    let totals: Vec<(&str, u64, u64)> = p
        .call_totals()
        .iter()
        .iter()
        .map(|(n, s)| (*n, s.count, s.sum))
        .collect();
    let (mut alloc, mut free, mut alive) = (0, 0, 0);
    for s in p.stacks.iter() {
        alloc += s.infos.alloc.sum;
        free += s.infos.free.sum;
        alive += s.infos.alive_req;
    }
    let leaked: (u64, u64) = p
        .leaks
        .iter()
        .fold((0, 0), |a, l| (a.0 + l.count, a.1 + l.memory));
    format!(
        "calls {totals:?}\nsizes {:?}\nrealloc jumps {:?}\npeak {:?}\nstacks alloc {alloc} free {free} alive {alive}\nleaks {leaked:?}",
        p.mem_stats.size_map,
        p.mem_stats.realloc_jump,
        p.peak_requested()
    )
}

#[test]
fn counts_are_the_same_in_every_stack_mode() {
    let dir = Scratch::new("modes");
    let exe = dir.join("basic");
    compile("cc", &[SRC], SITE_FLAGS, &exe);
    let mut profiles = Vec::new();
    for mode in ["dwarf", "fp", "none"] {
        let (p, stdout) = profile_of(mode, &dir, &exe, &[] as &[&str]);
        assert_eq!(stdout, "basic: all checks passed\n", "--stack {mode}");
        assert_eq!(p.heapledger.as_ref().unwrap().stack_mode, mode);
        profiles.push(p);
    }
    let [dwarf, fp, none] = &profiles[..] else {
        unreachable!()
    };
    let want = counts(dwarf);
    assert_eq!(counts(fp), want, "--stack fp");
    assert_eq!(counts(none), want, "--stack none");
    // `none`: one stack holds every block, so its highest bytes alive and
    // its bytes at the process's peak are that peak (the recorder fills them
    // in from the process's own, not per event).
    let peak = dwarf.peak_requested().expect("a peak") as i64;
    let holding: Vec<_> = none
        .stacks
        .iter()
        .filter(|s| s.infos.alloc.count > 0)
        .collect();
    assert_eq!(holding.len(), 1, "--stack none: one stack");
    assert_eq!(
        holding[0].infos.max_alive_req, peak,
        "--stack none: max alive"
    );
    assert_eq!(
        holding[0].infos.global_peak, peak,
        "--stack none: at the peak"
    );

    // dwarf and fp: the same sites, with the same two innermost frames (the
    // program has frame pointers; the C library, which has none, may end
    // the fp walk early).
    let l = |m| site_line(SRC, m);
    for p in [dwarf, fp] {
        let small = site(p, "alloc_small", l("small"));
        assert_eq!(small.alloc, mms(7, 24, 24, 168));
        let leak_b = site(p, "leak_b", l("leak_b"));
        assert_eq!(leak_b.alloc, mms(1, 3333, 3333, 3333));
        for s in stacks_at(p, "leak_b", l("leak_b")) {
            assert!(
                starts_with(
                    p,
                    &s.stack,
                    &[
                        ("leak_b", l("leak_b")),
                        ("leak_outer", l("leak_outer")),
                        ("main", l("call_leak_outer"))
                    ]
                ),
                "{}",
                describe(p, &s.stack)
            );
        }
    }

    // none: a single, empty stack with every allocation and every leak.
    assert_eq!(none.stacks.len(), 1, "{:?}", none.stacks);
    let only = &none.stacks.stats[0];
    assert!(only.stack.is_empty());
    let allocs = 15 + 5 + 4 + 5; // malloc, calloc, realloc, aligned
    assert_eq!(only.infos.alloc.count, allocs);
    assert_eq!(only.infos.count_zeros, 3);
    assert_eq!(only.infos.realloc_count, 4);
    assert_eq!(none.leaks.len(), 1);
    assert!(none.leaks[0].stack.is_empty());
    assert_eq!((none.leaks[0].count, none.leaks[0].memory), (3, 5333));
}
