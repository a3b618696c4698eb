//! The table of live blocks (`src/live.rs`), checked against a `HashMap`
//! under address patterns that matter: a heap packed with small chunks
//! (which overflows the address-ordered table), scattered addresses,
//! addresses reused at once, and growth while blocks come and go.

#![allow(dead_code)]

#[path = "../src/arena.rs"]
mod arena;
#[path = "../src/live.rs"]
mod live;
#[path = "../src/sync.rs"]
mod sync;

use live::{Entry, Table};
use std::collections::HashMap;

fn entry(addr: u64, n: u64) -> Entry {
    Entry {
        addr,
        size: n,
        time: n * 3,
        stack: n as u32,
        _pad: 0,
    }
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
            let got = t.remove(addr).map(|e| (e.size, e.time, e.stack));
            let want = m.remove(&addr).map(|n| (n, n * 3, n as u32));
            assert_eq!(got, want, "remove {addr:#x} (op {n})");
        }
        most_far = most_far.max(t.len().1);
    }
    assert_eq!(t.len().0, m.len());
    let mut seen = HashMap::new();
    t.for_each(|e| {
        assert!(seen.insert(e.addr, e.size).is_none(), "{:#x} twice", e.addr);
    });
    assert_eq!(seen, m);
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
        assert!(t.insert(entry(a, 2)));
    }
    assert_eq!(t.len().0, addrs.len());
    for &a in &addrs {
        let e = t.remove(a).expect("block lost");
        assert_eq!(e.size, 2);
    }
    assert_eq!(t.len(), (0, 0));
}
