//! The table of live blocks (`src/data/live/`), checked against a `HashMap`
//! under address patterns that matter: a heap packed with small chunks
//! (which overflows the address-ordered table), scattered addresses,
//! addresses reused at once, growth while blocks come and go, and blocks
//! whose run of slots wraps past the table's end while it doubles in place.

#![allow(dead_code)]

#[path = "../src/base/arena.rs"]
mod arena;
#[path = "../src/base/clock.rs"]
mod clock;
#[path = "../src/base/degrade.rs"]
mod degrade;
#[path = "../src/data/live/mod.rs"]
mod live;
#[path = "../src/base/sync.rs"]
mod sync;
/// The recorder's layout, for the paths inside (`crate::base::sync`).
mod base {
    pub(crate) use super::{arena, clock, degrade, sync};
}

use live::{Entry, Table};
use std::collections::HashMap;

/// Entry number `n`: one in three with a time, one in three with a size
/// too large for a slot (both kept in a record), the others in the slot.
fn entry(addr: u64, n: u64) -> Entry {
    let (size, time, weight) = match n % 3 {
        0 => (n, 0, 0),
        1 => (n, n * 3, 16),
        _ => ((1 << 31) + n, 0, 0),
    };
    Entry {
        addr,
        size,
        time,
        stack: n as u32 | 0x8000_0000,
        weight,
    }
}

/// Whether entry number `n` needs a record.
fn has_record(n: u64) -> bool {
    !n.is_multiple_of(3)
}

/// Applies `ops` (true: insert, false: remove) to a table and a map; every
/// removal must give back what the map holds, and at the end both hold the
/// same blocks. Returns the table's final (len, overflow len) peak.
fn check(ops: &[(bool, u64)]) -> usize {
    let mut t = Table::new();
    let mut m: HashMap<u64, u64> = HashMap::new();
    let mut most_far = 0;
    for (n, &(ins, addr)) in ops.iter().enumerate() {
        let n = n as u64 + 1;
        if ins {
            assert!(t.insert(entry(addr, n)));
            m.insert(addr, n);
        } else {
            let got = t.remove(addr).map(|e| (e.size, e.time, e.stack, e.weight));
            let want = m.remove(&addr).map(|n| {
                let e = entry(addr, n);
                (e.size, e.time, e.stack, e.weight)
            });
            assert_eq!(got, want, "remove {addr:#x} (op {n})");
        }
        most_far = most_far.max(t.len().1);
    }
    assert_eq!(t.len().0, m.len());
    assert_eq!(
        t.records_held(),
        m.values().filter(|&&n| has_record(n)).count(),
        "records held"
    );
    let mut seen = HashMap::new();
    t.for_each(|e| {
        assert!(seen.insert(e.addr, e.size).is_none(), "{:#x} twice", e.addr);
    });
    assert_eq!(
        seen,
        m.iter().map(|(&a, &n)| (a, entry(a, n).size)).collect()
    );
    most_far
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The blocks one shard holds of 1 GiB of heap packed with blocks `step`
/// bytes apart: a 64 KiB window here and there, each filling a stretch of
/// the address-ordered table, at offsets that overlap.
fn one_shard(base: u64, step: u64) -> Vec<u64> {
    let target = live::shard_of(base) as *const live::Shard;
    (0..(1u64 << 30) >> 16)
        .map(|w| base + (w << 16))
        .filter(|&a| std::ptr::eq(live::shard_of(a), target))
        .flat_map(|a| (0..(1 << 16) / step).map(move |i| a + i * step))
        .collect()
}

#[test]
fn a_heap_packed_with_small_chunks_overflows_and_stays_exact() {
    // What one shard sees of a heap packed with 32-byte chunks.
    let addrs = one_shard(0x5555_0000_0000, 32);
    let mut ops: Vec<(bool, u64)> = addrs.iter().map(|&a| (true, a)).collect();
    // Free every third, then allocate them again, then free all.
    ops.extend(addrs.iter().step_by(3).map(|&a| (false, a)));
    ops.extend(addrs.iter().step_by(3).map(|&a| (true, a)));
    ops.extend(addrs.iter().rev().map(|&a| (false, a)));
    let far = check(&ops);
    assert!(far > 0, "the pattern never reached the overflow table");
}

#[test]
fn scattered_and_reused_addresses_stay_exact() {
    let mut x = 0x9e37_79b9u64;
    let mut live: Vec<u64> = Vec::new();
    let mut ops = Vec::new();
    for _ in 0..400_000 {
        let r = xorshift(&mut x);
        if live.is_empty() || r % 5 < 3 {
            // Mostly near recent blocks, sometimes anywhere.
            let a = if r.is_multiple_of(7) || live.is_empty() {
                (r & 0x7fff_ffff_fff0) | 0x10
            } else {
                live[live.len() - 1] + 16 * (1 + (r >> 40) % 8)
            };
            if !live.contains(&a) {
                live.push(a);
                ops.push((true, a));
            }
        } else {
            let i = (r >> 20) as usize % live.len();
            ops.push((false, live.swap_remove(i)));
        }
        if live.len() > 2000 {
            let a = live.swap_remove(0);
            ops.push((false, a));
        }
    }
    // Removing what is not there finds nothing.
    ops.push((false, 0x1234_5670));
    check(&ops);
}

#[test]
fn an_address_inserted_again_replaces_the_block_wherever_it_sits() {
    // 16-byte blocks packed (jemalloc's smallest class): fill the overflow
    // table, then insert the same addresses again (a
    // block freed behind the recorder's back, its address reused): each
    // must be there once, with the newer entry.
    let addrs = one_shard(0x7000_0000_0000, 16);
    let mut t = Table::new();
    for &a in &addrs {
        // With a record, the newer entry (without) must free it.
        assert!(t.insert(entry(a, 1)));
    }
    assert!(t.len().1 > 0, "nothing in the overflow table");
    // Room near their homes for the blocks that overflowed.
    for (i, &a) in addrs.iter().enumerate() {
        if i % 4 != 0 {
            assert!(t.remove(a).is_some());
        }
    }
    // In the other order: the overflowed blocks come first.
    for &a in addrs.iter().rev() {
        assert!(t.insert(entry(a, 3)));
    }
    assert_eq!(t.len().0, addrs.len());
    assert_eq!(t.records_held(), 0, "a replaced block's record was kept");
    for &a in &addrs {
        let e = t.remove(a).expect("block lost");
        assert_eq!(e.size, 3);
    }
    assert_eq!(t.len(), (0, 0));
}

/// An address in 16 MiB region `r` whose home in the address-ordered table
/// is slot `t` mod the table's size (for sizes up to 2^20 slots).
fn homed_at(r: u64, t: u64) -> u64 {
    let region = live::near_hash(r << 24).wrapping_sub((r << 20) as usize) as u64;
    ((r << 20) | (t.wrapping_sub(region) & 0xf_ffff)) << 4
}

#[test]
fn blocks_wrapping_past_the_table_end_survive_every_doubling() {
    // Just before each doubling, from 256 slots to 2^18: four blocks take
    // the table's last four slots, and a fifth, homed at the first of them,
    // wraps to the start. A doubling moves a block to the upper half when
    // the next bit of its home is 1: the four move up, the fifth stays, and
    // must still be found from its home once the doubling is done.
    let mut x = 0x2545_f491u64;
    let mut seen = std::collections::HashSet::new();
    let mut others = Vec::new();
    let mut ops = Vec::new();
    let mut fill_to = |live: usize, ops: &mut Vec<(bool, u64)>| {
        while others.len() < live {
            let a = (xorshift(&mut x) & 0x3fff_ffff_fff0) | 0x4000_0000_0000;
            if seen.insert(a) {
                others.push(a);
                ops.push((true, a));
            }
        }
    };
    for p in 8..=17u64 {
        let n = 1u64 << p;
        let three_quarters = (3 * n / 4) as usize;
        fill_to(three_quarters - 8, &mut ops);
        let mut group: Vec<u64> = (1..=4).map(|k| homed_at(0x7f00 + p, 2 * n - k)).collect();
        group.push(homed_at(0x7f40 + p, n - 4));
        ops.extend(group.iter().map(|&a| (true, a)));
        // Past the doubling (the table is kept at most 3/4 full).
        fill_to(three_quarters + 8 - group.len(), &mut ops);
        ops.extend(group.iter().map(|&a| (false, a)));
    }
    ops.extend(others.iter().map(|&a| (false, a)));
    check(&ops);
}

/// glibc maps the heaps of its thread arenas side by side, 64 MiB apart,
/// and a thread's blocks sit in the first 64 KiB windows of its heap: the
/// threads must not meet on a shard (see `live::shard_of`).
#[test]
fn heaps_side_by_side_take_shards_of_their_own() {
    for first in [0x7fa0_8c00_0000u64 >> 26, 0x55, 0x1ff_fff0, 12_345] {
        // T heaps, each using its first `windows` windows.
        for (threads, windows) in [(2u64, 64u64), (4, 64), (16, 32), (64, 8)] {
            let mut owner = std::collections::HashMap::new();
            for t in 0..threads {
                let heap = (first - t) << 26;
                for j in 0..windows {
                    let s = live::shard_index(heap + (j << 16) + 0x8a0);
                    if let Some(o) = owner.insert(s, t) {
                        assert_eq!(o, t, "heaps {o} and {t} of {threads} share shard {s}");
                    }
                }
            }
        }
    }
    // One region's windows take the shards in turn.
    let all: std::collections::HashSet<usize> = (0..live::SHARDS as u64)
        .map(|j| live::shard_index(0x5555_0000_0000 + (j << 16)))
        .collect();
    assert_eq!(all.len(), live::SHARDS);
}
