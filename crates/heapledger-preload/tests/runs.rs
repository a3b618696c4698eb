//! A thread's packed rows (`src/data/runs.rs`) add up to what was pushed,
//! stay few runs as they are merged, and keep numbers of every size.

#![allow(dead_code)]

extern crate alloc;

#[path = "../src/data/runs.rs"]
mod runs;

use runs::{Row, Runs};
use std::collections::BTreeMap;

/// Each id's allocations and bytes, added up over every row.
fn totals(rows: impl Iterator<Item = Row>) -> BTreeMap<u32, (u64, u64)> {
    let mut m = BTreeMap::new();
    for (id, c, b) in rows {
        let e = m.entry(id).or_insert((0, 0));
        e.0 += c;
        e.1 += b;
    }
    m
}

/// A small generator, so that the runs differ without a crate for it.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn runs_pushed_and_merged_add_up_to_their_rows() {
    let mut r = Runs::new();
    let mut all = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    // 40 hand-overs of a table that meets some of 5 000 stacks again.
    for round in 0..40u64 {
        let mut ids: Vec<u32> = (0..300).map(|_| (next(&mut x) % 5000) as u32).collect();
        ids.sort_unstable();
        ids.dedup();
        let rows: Vec<Row> = ids
            .iter()
            .map(|&id| (id, round + 1, u64::from(id) * 16 + round))
            .collect();
        all.extend_from_slice(&rows);
        assert!(r.push_run(rows.into_iter()));
        assert_eq!(
            totals(r.iter()),
            totals(all.iter().copied()),
            "round {round}"
        );
    }
    // Merged as a binary counter: 40 runs became at most log2(40) + 1.
    let ids: Vec<u32> = r.iter().map(|row| row.0).collect();
    let ascents = 1 + ids.windows(2).filter(|w| w[1] <= w[0]).count();
    assert!(ascents <= 6, "{ascents} runs");
}

#[test]
fn a_stack_met_again_is_one_row_once_its_runs_merge() {
    let mut r = Runs::new();
    assert!(r.push_run([(7, 1, 10), (9, 2, 20)].into_iter()));
    assert!(r.push_run([(7, 3, 30), (8, 1, 5)].into_iter()));
    // Two runs of two rows: merged into one.
    assert_eq!(
        r.iter().collect::<Vec<_>>(),
        [(7, 4, 40), (8, 1, 5), (9, 2, 20)]
    );
}

#[test]
fn numbers_of_every_size_come_back() {
    let mut r = Runs::new();
    let rows = [
        (0, 1, 0),
        (1, u64::MAX, u64::MAX),
        (1 << 20, 1 << 32, 1 << 40),
        (u32::MAX, 5, 1 << 63),
    ];
    assert!(r.push_run(rows.into_iter()));
    assert_eq!(r.iter().collect::<Vec<_>>(), rows);
    assert!(r.push_run(std::iter::empty()));
    assert_eq!(r.iter().count(), 4);
}

#[test]
fn runs_above_the_last_are_joined_as_they_were() {
    let mut r = Runs::new();
    let mut all = Vec::new();
    // Ids rising from run to run, with distances across the joins of 1,
    // 2 and 3 bytes (the first row's own distance from 0 is longer).
    let mut id = 5u32;
    for k in 0..16u32 {
        let run: Vec<Row> = (0..50)
            .map(|j| {
                id += 1 + (j % 3);
                (id, u64::from(k) + 1, u64::from(id) * 8)
            })
            .collect();
        id += [1, 200, 20_000][k as usize % 3];
        all.extend_from_slice(&run);
        assert!(r.push_run(run.into_iter()));
        assert_eq!(r.iter().collect::<Vec<_>>(), all, "run {k}");
    }
}
