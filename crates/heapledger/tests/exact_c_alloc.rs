//! Exact counts, sizes and call sites for a C program with known
//! allocations (`tests/programs/basic.c`): malloc per function, calloc,
//! realloc growing and shrinking, the aligned allocators, malloc(0),
//! free(NULL), and leaks of known size at known stacks.
//!
//! The program is compiled once (`-g -O1 -fno-builtin`) and run once under
//! `heapledger run --stack dwarf`; every test reads that one profile. The
//! program uses no stdio, so every allocation in the process is its own.

mod common;

use common::*;
use heapledger_profile::{Profile, ReallocJump};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const SRC: &str = "basic.c";

struct Basic {
    profile: Profile,
    stdout: String,
}

fn basic() -> &'static Basic {
    static RUN: OnceLock<Basic> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = Scratch::new("basic");
        let exe = dir.join("basic");
        compile("cc", &[SRC], SITE_FLAGS, &exe);
        let (profile, stdout) = profile_of("dwarf", &dir, &exe, &[] as &[&str]);
        Basic { profile, stdout }
    })
}

fn line(name: &str) -> u32 {
    site_line(SRC, name)
}

/// Asserts that every stack of the site `function:line` goes on with the
/// frames `callers` (function, marker), leaf first.
fn assert_callers(p: &Profile, function: &str, marker: &str, callers: &[(&str, &str)]) {
    let stacks = stacks_at(p, function, line(marker));
    assert!(
        !stacks.is_empty(),
        "no stack starts at {function}:{}",
        line(marker)
    );
    let mut want = vec![(function, line(marker))];
    want.extend(callers.iter().map(|&(f, m)| (f, line(m))));
    for s in stacks {
        assert!(
            starts_with(p, &s.stack, &want),
            "stack {} does not start with {want:?}",
            describe(p, &s.stack)
        );
    }
}

#[test]
fn program_runs_to_the_end() {
    let b = basic();
    assert_eq!(b.stdout, "basic: all checks passed\n");
    let ext = b.profile.heapledger.as_ref().expect("heapledger key");
    assert_eq!(ext.exit.code, Some(0));
    assert_eq!(ext.stack_mode, "dwarf");
    assert_eq!(ext.unknown_frees, 0);
    assert_eq!(ext.unrecorded_events, 0);
    assert_eq!(b.profile.threads.len(), 1);
}

#[test]
fn malloc_count_and_bytes_per_function() {
    let p = &basic().profile;
    let s = site(p, "alloc_small", line("small"));
    assert_eq!(s.alloc, mms(7, 24, 24, 7 * 24), "{s:?}");
    assert_eq!(s.free, mms(7, 24, 24, 7 * 24), "{s:?}");
    assert_eq!((s.alive_req, s.count_zeros, s.realloc_count), (0, 0, 0));
    assert_callers(p, "alloc_small", "small", &[("main", "call_small")]);
}

#[test]
fn calloc_count_and_bytes() {
    let p = &basic().profile;
    let s = site(p, "alloc_calloc", line("calloc"));
    assert_eq!(s.alloc, mms(5, 120, 120, 600), "{s:?}");
    assert_eq!(s.free, mms(5, 120, 120, 600), "{s:?}");
    assert_callers(p, "alloc_calloc", "calloc", &[("main", "call_calloc")]);
    let calloc = p.call_totals().calloc;
    assert_eq!((calloc.count, calloc.sum), (5, 600));
}

/// Twice: malloc(100), realloc to 300 (growing), realloc to 50 (shrinking),
/// free. The block a realloc replaces is charged as freed to the stack that
/// allocated it; the new block is charged to the realloc's stack with
/// reallocCount and reallocSumDelta (new size minus old size).
#[test]
fn realloc_growing_and_shrinking() {
    let p = &basic().profile;
    let start = site(p, "realloc_start", line("realloc_start"));
    assert_eq!(start.alloc, mms(2, 100, 100, 200), "{start:?}");
    assert_eq!(
        start.free,
        mms(2, 100, 100, 200),
        "old block freed by the realloc: {start:?}"
    );
    assert_eq!((start.realloc_count, start.realloc_sum_delta), (0, 0));

    let grow = site(p, "realloc_grow", line("grow"));
    assert_eq!(grow.alloc, mms(2, 300, 300, 600), "{grow:?}");
    assert_eq!(grow.free, mms(2, 300, 300, 600), "{grow:?}");
    assert_eq!((grow.realloc_count, grow.realloc_sum_delta), (2, 2 * 200));

    let shrink = site(p, "realloc_shrink", line("shrink"));
    assert_eq!(shrink.alloc, mms(2, 50, 50, 100), "{shrink:?}");
    assert_eq!(shrink.free, mms(2, 50, 50, 100), "{shrink:?}");
    assert_eq!(
        (shrink.realloc_count, shrink.realloc_sum_delta),
        (2, 2 * -250)
    );
    assert_eq!(shrink.alive_req, 0);

    let realloc = p.call_totals().realloc;
    assert_eq!((realloc.count, realloc.sum), (4, 2 * (300 + 50)));
    let jump = |old_size, new_size, count| ReallocJump {
        old_size,
        new_size,
        count,
    };
    assert_eq!(
        p.mem_stats.realloc_jump,
        vec![jump(100, 300, 2), jump(300, 50, 2)]
    );
}

/// posix_memalign(64, 96), aligned_alloc(128, 256), memalign(256, 320),
/// valloc(5000), pvalloc(6000): the program exits non-zero if a block is
/// misaligned; each is counted under its own function with the requested
/// size, at its own line.
#[test]
fn aligned_allocations() {
    let p = &basic().profile;
    let totals = p.call_totals();
    for (marker, size, stat) in [
        ("posix_memalign", 96, totals.posix_memalign),
        ("aligned_alloc", 256, totals.aligned_alloc),
        ("memalign", 320, totals.memalign),
        ("valloc", 5000, totals.valloc),
        ("pvalloc", 6000, totals.pvalloc),
    ] {
        assert_eq!((stat.count, stat.sum), (1, size), "{marker} totals");
        let s = site(p, "alloc_aligned", line(marker));
        assert_eq!(s.alloc, mms(1, size, size, size), "{marker}: {s:?}");
        assert_eq!(s.free, mms(1, size, size, size), "{marker}: {s:?}");
        assert_callers(p, "alloc_aligned", marker, &[("main", "call_aligned")]);
    }
}

#[test]
fn zero_size_requests() {
    let p = &basic().profile;
    let s = site(p, "alloc_zero", line("zero"));
    assert_eq!(s.alloc, mms(3, 0, 0, 0), "{s:?}");
    assert_eq!(s.count_zeros, 3);
    assert_eq!(s.free.count, 3, "the malloc(0) blocks were freed: {s:?}");
    let zeros: i64 = p.stacks.iter().map(|s| s.infos.count_zeros).sum();
    assert_eq!(zeros, 3, "countZeros over all stacks");
    assert_eq!(p.mem_stats.size_map.get(&0), Some(&3));
}

/// free(NULL) five times: five more free calls, no bytes, no block released,
/// not an unknown free.
#[test]
fn free_null_is_a_call_without_effect() {
    let p = &basic().profile;
    let free = p.call_totals().free;
    // Blocks freed by free(): 7 small + 5 calloc + 2 after the reallocs +
    // 5 aligned + 3 zero-size = 22, plus 5 free(NULL).
    assert_eq!(free.count, 22 + 5);
    assert_eq!(
        free.sum,
        7 * 24 + 600 + 2 * 50 + (96 + 256 + 320 + 5000 + 6000)
    );
    assert_eq!(p.heapledger.as_ref().unwrap().unknown_frees, 0);
    // Releases charged to stacks: the 22 frees and the 4 blocks that
    // realloc replaced; free(NULL) releases nothing.
    let released: u64 = p.stacks.iter().map(|s| s.infos.free.count).sum();
    assert_eq!(released, 22 + 4);
    assert!(
        stacks_at(p, "free_null", line("free_null")).is_empty(),
        "free(NULL) made a stack"
    );
}

/// leak_a leaks 2 x 1000 bytes, leak_b (called by leak_outer) 1 x 3333;
/// nothing else of the program leaks.
#[test]
fn leaks_of_known_size_at_known_stacks() {
    let p = &basic().profile;
    let leaks = program_leaks(p);
    let mut by_site: BTreeMap<(String, Option<u32>), (u64, u64)> = BTreeMap::new();
    for l in &leaks {
        let e = by_site.entry(frame(p, l.stack[0])).or_default();
        e.0 += l.count;
        e.1 += l.memory;
    }
    let want = BTreeMap::from([
        (("leak_a".to_owned(), Some(line("leak_a"))), (2, 2000)),
        (("leak_b".to_owned(), Some(line("leak_b"))), (1, 3333)),
    ]);
    assert_eq!(by_site, want, "leaks:{}", describe_leaks(p, &leaks));
    for l in &leaks {
        let ok = starts_with(
            p,
            &l.stack,
            &[("leak_a", line("leak_a")), ("main", line("call_leak_a"))],
        ) || starts_with(
            p,
            &l.stack,
            &[
                ("leak_b", line("leak_b")),
                ("leak_outer", line("leak_outer")),
                ("main", line("call_leak_outer")),
            ],
        );
        assert!(ok, "leak at {}", describe(p, &l.stack));
    }
    assert_eq!(site(p, "leak_a", line("leak_a")).alive_req, 2000);
    assert_eq!(site(p, "leak_b", line("leak_b")).alive_req, 3333);
    assert!(p.runtime_leaks().is_empty(), "a C program without stdio");
}

/// Totals per allocator function, the size histogram and the peak: every
/// allocation in the process is the program's.
#[test]
fn totals_size_map_and_peak() {
    let p = &basic().profile;
    let t = p.call_totals();
    let got: Vec<(&str, u64, u64)> = t.iter().iter().map(|(n, s)| (*n, s.count, s.sum)).collect();
    let want = vec![
        ("malloc", 15, 7 * 24 + 2 * 100 + 2 * 1000 + 3333),
        ("posix_memalign", 1, 96),
        ("aligned_alloc", 1, 256),
        ("memalign", 1, 320),
        ("valloc", 1, 5000),
        ("pvalloc", 1, 6000),
        ("free", 27, 12540),
        ("calloc", 5, 600),
        ("realloc", 4, 700),
    ];
    assert_eq!(got, want);

    let sizes: Vec<(u64, u64)> = p.mem_stats.size_map.iter().map(|(&k, &v)| (k, v)).collect();
    let want_sizes = vec![
        (0, 3),
        (24, 7),
        (50, 2),
        (96, 1),
        (100, 2),
        (120, 5),
        (256, 1),
        (300, 2),
        (320, 1),
        (1000, 2),
        (3333, 1),
        (5000, 1),
        (6000, 1),
    ];
    assert_eq!(sizes, want_sizes);

    // The peak is reached when the five aligned blocks are alive together.
    let peak = 96 + 256 + 320 + 5000 + 6000;
    assert_eq!(p.peak_requested(), Some(peak));
    for marker in [
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
    ] {
        let s = site(p, "alloc_aligned", line(marker));
        assert_eq!(s.global_peak as u64, s.alloc.sum, "globalPeak of {marker}");
    }
    let at_peak: i64 = p.stacks.iter().map(|s| s.infos.global_peak).sum();
    assert_eq!(at_peak, peak as i64, "globalPeak summed over all stacks");
}
