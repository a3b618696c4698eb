//! Each allocation function's time is measured on a sample of its own
//! calls, whatever the pattern of the calls: with calls in patterns whose
//! length divides 64 (`call_times.c`), every function has a time, and the
//! time per call of malloc, calloc, realloc and aligned_alloc is of the
//! order of free's.

mod common;

use common::*;

#[test]
fn every_function_of_a_regular_pattern_is_timed() {
    let dir = Scratch::new("call-times");
    let exe = dir.join("call_times");
    compile("cc", &["call_times.c"], &["-O1", "-fno-builtin"], &exe);
    for stack in ["dwarf", "none"] {
        let (p, _) = profile_of(stack, &dir, &exe, &[] as &[&str]);
        let mut per_call = Vec::new();
        for (name, want) in [
            ("malloc", 200_000),
            ("calloc", 100_000),
            ("realloc", 100_000),
            ("aligned_alloc", 100_000),
            ("free", 500_000),
        ] {
            let (count, time) = p.threads.iter().fold((0, 0), |(c, t), th| {
                let s = th
                    .stats
                    .iter()
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .unwrap()
                    .1;
                (c + s.count, t + s.time)
            });
            assert!(count >= want, "--stack {stack}: {name}: {count} calls");
            assert!(
                time > 0,
                "--stack {stack}: {name} was never timed ({count} calls)"
            );
            per_call.push((name, time as f64 / count as f64));
        }
        // Each estimate is of the right order: within a factor of 20 of
        // free's (they differ, but not by orders of magnitude).
        let free = per_call.last().unwrap().1;
        for (name, t) in &per_call {
            assert!(
                *t > free / 20.0 && *t < free * 20.0,
                "--stack {stack}: {name}: {t:.1} ticks per call, free {free:.1}: {per_call:?}"
            );
        }
    }
}
