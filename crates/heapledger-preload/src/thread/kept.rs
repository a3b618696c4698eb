//! What each ended thread allocated at each of its stacks, kept for the
//! profile's views of one thread (the viewer's thread filter, `tree
//! --thread`). When a thread ends, its per-stack counters are folded into
//! the retired state's (the process's totals) and its table freed; its
//! allocations and bytes per stack are kept beside, 24 bytes a stack (the
//! table takes 112), within a budget for the whole process: a thread that
//! would pass it keeps none (counted in [`UNKEPT`], which the dump says).
//! A state reused for a new thread (past `KEEP_ENDED` ended threads) gives
//! its rows back, as the row of its thread is folded then. A live thread's
//! rows come from its table at the dump, after those it kept when it
//! handed its table over (`life::spill`); a thread that cannot keep them
//! all (the budget) keeps none, and is counted in [`UNKEPT`] too.

use super::state::ThreadState;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

/// The most rows the ended threads keep in all (24 MB).
pub const BUDGET: u64 = 1 << 20;

/// Rows kept by the ended threads' states.
static ROWS: AtomicU64 = AtomicU64::new(0);

/// Threads whose rows were not kept (the budget, or memory).
pub static UNKEPT: AtomicU64 = AtomicU64::new(0);

/// (stack id, allocations, bytes allocated) of one stack of a thread.
pub type Row = (u32, u64, u64);

/// Rows a state holds in itself: most threads of a program that starts
/// many allocate at a stack or two, and a small block of the recorder's
/// arena, taken between the states it makes and frees as threads come and
/// go, would cost a state's alignment (2 KB a thread, measured).
const INLINE: usize = 4;

/// An ended thread's rows: a few in the state, more in a block of their
/// own. A live thread that handed its counters over (`life::spill`) keeps
/// the rows of what it handed here too, and its table's rows come after.
/// A stack may have several rows (handed over, then met again): readers
/// add them up.
#[derive(Default)]
pub struct Kept {
    inline: [Row; INLINE],
    len: u8,
    more: Vec<Row>,
    /// Rows were not all kept (the budget, or memory): the thread has none.
    lost: bool,
    /// Rows in `more` when its stacks were last made one row each.
    merged: usize,
}

impl Kept {
    pub const fn new() -> Kept {
        Kept {
            inline: [(0, 0, 0); INLINE],
            len: 0,
            more: Vec::new(),
            lost: false,
            merged: 0,
        }
    }

    fn rows(&self) -> &[Row] {
        match self.more.is_empty() {
            true => &self.inline[..self.len as usize],
            false => &self.more,
        }
    }

    /// Drops the rows, counting the thread among those whose rows were not
    /// kept.
    fn lose(&mut self) {
        ROWS.fetch_sub(self.more.capacity() as u64, Ordering::Relaxed);
        *self = Kept {
            lost: true,
            ..Kept::new()
        };
        UNKEPT.fetch_add(1, Ordering::Relaxed);
    }
}

/// Keeps the rows of `s`, a thread that ends, from its table (before the
/// table goes).
pub fn keep(s: &mut ThreadState) {
    add_table_rows(s);
}

/// Keeps the rows of `s`, a live thread whose counters are handed over,
/// from its table (before the table is emptied).
pub fn spill(s: &mut ThreadState) {
    add_table_rows(s);
}

/// Adds the rows of the table of `s` to those it keeps.
fn add_table_rows(s: &mut ThreadState) {
    if s.kept.lost {
        return;
    }
    let n = s.stacks.iter().count();
    let have = s.kept.rows().len();
    if s.kept.more.is_empty() && have + n <= INLINE {
        for (id, at) in s.stacks.iter() {
            let a = s.stacks.full(at).t.alloc;
            let k = &mut s.kept;
            if a.count > 0 && (k.len as usize) < INLINE {
                k.inline[k.len as usize] = (id, a.count, a.sum);
                k.len += 1;
            }
        }
        return;
    }
    let old_cap = s.kept.more.capacity();
    let want = have + n;
    let grow = want.saturating_sub(old_cap) as u64;
    let fits = ROWS
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
            (r + grow <= BUDGET).then_some(r + grow)
        })
        .is_ok();
    if !fits {
        s.kept.lose();
        return;
    }
    let reserved = s
        .kept
        .more
        .try_reserve_exact(want - s.kept.more.len())
        .is_ok();
    // (What the allocator gave beyond is charged too: `forget` gives the
    // capacity back.)
    let cap = s.kept.more.capacity();
    ROWS.fetch_add((cap - old_cap) as u64, Ordering::Relaxed);
    ROWS.fetch_sub(grow, Ordering::Relaxed);
    if !reserved {
        s.kept.lose();
        return;
    }
    if s.kept.more.is_empty() {
        let k = &mut s.kept;
        let inline = k.len as usize;
        k.more.extend_from_slice(&k.inline[..inline]);
        k.len = 0;
    }
    for (id, at) in s.stacks.iter() {
        let a = s.stacks.full(at).t.alloc;
        if a.count > 0 {
            s.kept.more.push((id, a.count, a.sum));
        }
    }
    // A thread that hands its table over again and again names the same
    // stacks again: once its rows have doubled, each stack's are made one.
    let k = &mut s.kept;
    if k.more.len() >= 2 * k.merged.max(MERGE_FROM) {
        k.more.sort_unstable_by_key(|r| r.0);
        let mut w = 0;
        for r in 0..k.more.len() {
            let row = k.more[r];
            if w > 0 && k.more[w - 1].0 == row.0 {
                k.more[w - 1].1 += row.1;
                k.more[w - 1].2 += row.2;
            } else {
                k.more[w] = row;
                w += 1;
            }
        }
        k.more.truncate(w);
        k.merged = w;
    }
}

/// Rows a thread keeps before it makes each stack's one (see
/// `add_table_rows`).
const MERGE_FROM: usize = 4096;

/// Gives the rows of `s` back (its state reused, the counters reset).
pub fn forget(s: &mut ThreadState) {
    ROWS.fetch_sub(s.kept.more.capacity() as u64, Ordering::Relaxed);
    s.kept = Kept::new();
}

/// In a forked child: it counts from the fork (the states of the parent's
/// other threads are left unused).
pub fn forked() {
    ROWS.store(0, Ordering::Relaxed);
    UNKEPT.store(0, Ordering::Relaxed);
}

/// Calls `f` on each row of `s`: a live thread's from its table, an ended
/// one's kept.
pub fn each_row(s: &ThreadState, mut f: impl FnMut(Row)) {
    if s.kept.lost {
        return;
    }
    s.kept.rows().iter().for_each(|&r| f(r));
    if s.dead {
        return;
    }
    for (id, at) in s.stacks.iter() {
        let a = s.stacks.full(at).t.alloc;
        if a.count > 0 {
            f((id, a.count, a.sum));
        }
    }
}
