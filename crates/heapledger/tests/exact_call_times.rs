//! Each allocation function's time is measured on a sample of its own
//! calls, whatever the pattern of the calls: with calls in patterns whose
//! length divides 64 (`call_times.c`), every function has a time. (Their
//! sizes are not compared: one timed call that the kernel preempted, on a
//! busy machine, weighs 64 calls' worth of milliseconds.)

mod common;

use common::*;

#[test]
fn every_function_of_a_regular_pattern_is_timed() {
    let dir = Scratch::new("call-times");
    let exe = dir.join("call_times");
    compile("cc", &["call_times.c"], &["-O1", "-fno-builtin"], &exe);
    for stack in ["dwarf", "none"] {
        let (p, _) = profile_of(stack, &dir, &exe, &[] as &[&str]);
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
        }
    }
}
