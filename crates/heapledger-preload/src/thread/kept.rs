//! What each ended thread allocated at each of its stacks, kept for the
//! profile's views of one thread (the viewer's thread filter, `tree
//! --thread`). When a thread ends, its per-stack counters are folded into
//! the retired state's (the process's totals) and its table freed; its
//! allocations and bytes per stack are kept beside, packed (4 to 6 bytes
//! a stack where each was met a few times; the table takes 104), within a
//! budget for the whole process (`base::config`'s `kept_budget`, 16 MB:
//! about 3 million rows; as tuples, 24 MB held a million). A thread that
//! would pass it keeps none (counted in [`UNKEPT`], which the dump says).
//! A state reused for a new thread (past `KEEP_ENDED` ended threads) gives
//! its rows back, as the row of its thread is folded then. A live
//! thread's rows come from its table at the dump, after those it kept
//! when it handed its table over (`life::spill`); a thread that cannot
//! keep them all (the budget) keeps none, and is counted in [`UNKEPT`]
//! too.

use super::state::ThreadState;
use crate::data::runs::{Row, Runs};
use core::sync::atomic::{AtomicU64, Ordering};

/// Bytes of packed rows held by the states.
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Threads whose rows were not kept (the budget, or memory).
pub static UNKEPT: AtomicU64 = AtomicU64::new(0);

/// Rows a state holds in itself: most threads of a program that starts
/// many allocate at a stack or two, and a small block of the recorder's
/// arena, taken between the states it makes and frees as threads come and
/// go, would cost a state's alignment (2 KB a thread, measured).
const INLINE: usize = 4;

/// An ended thread's rows: a few in the state, more packed (see
/// `data::runs`). A live thread that handed its counters over
/// (`life::spill`) keeps the rows of what it handed here too, and its
/// table's rows come after. A stack may have several rows (handed over,
/// then met again): readers add them up.
#[derive(Default)]
pub struct Kept {
    inline: [Row; INLINE],
    len: u8,
    runs: Runs,
    /// Rows were not all kept (the budget, or memory): the thread has none.
    lost: bool,
}

impl Kept {
    pub const fn new() -> Kept {
        Kept {
            inline: [(0, 0, 0); INLINE],
            len: 0,
            runs: Runs::new(),
            lost: false,
        }
    }

    /// Drops the rows, counting the thread among those whose rows were not
    /// kept.
    fn lose(&mut self) {
        BYTES.fetch_sub(self.runs.capacity() as u64, Ordering::Relaxed);
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
    let allocated = |s: &ThreadState, (id, at): (u32, usize)| {
        let (count, sum) = s.stacks.allocated(at);
        (count > 0).then_some((id, count, sum))
    };
    let n = s.stacks.iter().count();
    if s.kept.runs.is_empty() && s.kept.len as usize + n <= INLINE {
        for e in s.stacks.iter() {
            if let Some(row) = allocated(s, e) {
                let k = &mut s.kept;
                k.inline[k.len as usize] = row;
                k.len += 1;
            }
        }
        return;
    }
    let k = &mut s.kept;
    let before = k.runs.capacity() as u64;
    let inline = core::mem::take(&mut k.inline);
    let inline = &inline[..core::mem::take(&mut k.len) as usize];
    let mut runs = core::mem::take(&mut k.runs);
    let mut ok = inline.is_empty() || runs.push_run(sorted(inline));
    let t: &ThreadState = s;
    ok = ok && runs.push_run(t.stacks.iter_by_id().filter_map(|e| allocated(t, e)));
    let after = runs.capacity() as u64;
    s.kept.runs = runs;
    BYTES.fetch_add(after, Ordering::Relaxed);
    BYTES.fetch_sub(before, Ordering::Relaxed);
    // Past the budget, or without memory, the thread keeps none.
    if !ok || BYTES.load(Ordering::Relaxed) > crate::base::config::get().kept_budget {
        s.kept.lose();
    }
}

/// The inline rows in the order of their ids, one row each.
fn sorted(rows: &[Row]) -> impl Iterator<Item = Row> {
    let mut r = [(0u32, 0u64, 0u64); INLINE];
    let n = rows.len();
    r[..n].copy_from_slice(rows);
    r[..n].sort_unstable_by_key(|x| x.0);
    let mut w = 0;
    for i in 0..n {
        if w > 0 && r[w - 1].0 == r[i].0 {
            r[w - 1].1 += r[i].1;
            r[w - 1].2 += r[i].2;
        } else {
            r[w] = r[i];
            w += 1;
        }
    }
    r.into_iter().take(w)
}

/// Gives the rows of `s` back (its state reused, the counters reset).
pub fn forget(s: &mut ThreadState) {
    BYTES.fetch_sub(s.kept.runs.capacity() as u64, Ordering::Relaxed);
    s.kept = Kept::new();
}

/// In a forked child: it counts from the fork (the states of the parent's
/// other threads are left unused).
pub fn forked() {
    BYTES.store(0, Ordering::Relaxed);
    UNKEPT.store(0, Ordering::Relaxed);
}

/// Calls `f` on each row of `s`: a live thread's from its table, an ended
/// one's kept.
pub fn each_row(s: &ThreadState, mut f: impl FnMut(Row)) {
    if s.kept.lost {
        return;
    }
    let k = &s.kept;
    k.inline[..k.len as usize].iter().for_each(|&r| f(r));
    k.runs.iter().for_each(&mut f);
    if s.dead {
        return;
    }
    for (id, at) in s.stacks.iter() {
        let (count, sum) = s.stacks.allocated(at);
        if count > 0 {
            f((id, count, sum));
        }
    }
}
