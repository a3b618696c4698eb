//! What each ended thread allocated at each of its stacks, kept for the
//! profile's views of one thread (the viewer's thread filter, `tree
//! --thread`). When a thread ends, its per-stack counters are folded into
//! the retired state's (the process's totals) and its table freed; its
//! allocations and bytes per stack are kept beside, 24 bytes a stack (the
//! table takes 112), within a budget for the whole process: a thread that
//! would pass it keeps none (counted in [`UNKEPT`], which the dump says).
//! A state reused for a new thread (past `KEEP_ENDED` ended threads) gives
//! its rows back, as the row of its thread is folded then. A live thread's
//! rows come from its table at the dump.

use super::state::ThreadState;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

/// The most rows the ended threads keep in all (24 MB).
pub const BUDGET: u64 = 1 << 20;

/// Rows kept by the ended threads' states.
static ROWS: AtomicU64 = AtomicU64::new(0);

/// Ended threads whose rows were not kept (the budget, or memory).
pub static UNKEPT: AtomicU64 = AtomicU64::new(0);

/// (stack id, allocations, bytes allocated) of one stack of a thread.
pub type Row = (u32, u64, u64);

/// Rows a state holds in itself: most threads of a program that starts
/// many allocate at a stack or two, and a small block of the recorder's
/// arena, taken between the states it makes and frees as threads come and
/// go, would cost a state's alignment (2 KB a thread, measured).
const INLINE: usize = 4;

/// An ended thread's rows: a few in the state, more in a block of their
/// own.
#[derive(Default)]
pub struct Kept {
    inline: [Row; INLINE],
    len: u8,
    more: Vec<Row>,
}

impl Kept {
    pub const fn new() -> Kept {
        Kept {
            inline: [(0, 0, 0); INLINE],
            len: 0,
            more: Vec::new(),
        }
    }

    fn rows(&self) -> &[Row] {
        match self.more.is_empty() {
            true => &self.inline[..self.len as usize],
            false => &self.more,
        }
    }
}

/// Keeps the rows of `s`, a thread that ends, from its table (before the
/// table goes).
pub fn keep(s: &mut ThreadState) {
    let n = s.stacks.iter().count() as u64;
    if n as usize <= INLINE {
        for (id, at) in s.stacks.iter() {
            let a = s.stacks.full(at).t.alloc;
            let k = &mut s.kept;
            // (A state keeps rows once: its table is emptied then.)
            if a.count > 0 && (k.len as usize) < INLINE {
                k.inline[k.len as usize] = (id, a.count, a.sum);
                k.len += 1;
            }
        }
        return;
    }
    let fits = ROWS
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
            (r + n <= BUDGET).then_some(r + n)
        })
        .is_ok();
    if !fits || s.kept.more.try_reserve_exact(n as usize).is_err() {
        if fits {
            ROWS.fetch_sub(n, Ordering::Relaxed);
        }
        UNKEPT.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // (What the allocator gave beyond is charged too: `forget` gives the
    // capacity back.)
    let cap = s.kept.more.capacity() as u64;
    ROWS.fetch_add(cap.saturating_sub(n), Ordering::Relaxed);
    for (id, at) in s.stacks.iter() {
        let a = s.stacks.full(at).t.alloc;
        if a.count > 0 {
            s.kept.more.push((id, a.count, a.sum));
        }
    }
}

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
    if s.dead {
        s.kept.rows().iter().for_each(|&r| f(r));
        return;
    }
    for (id, at) in s.stacks.iter() {
        let a = s.stacks.full(at).t.alloc;
        if a.count > 0 {
            f((id, a.count, a.sum));
        }
    }
}
