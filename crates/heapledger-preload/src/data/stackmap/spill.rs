//! Threads that run the same code: the entries all live threads hold, and
//! a thread's table handed to the process's (`thread::life::spill`).

use super::StackMap;
use crate::data::stacks;
use core::sync::atomic::{AtomicU64, Ordering};

/// Entries in the maps of live threads and in the process's (the retired
/// state's), in all. Each thread keeps its own counters for every stack it
/// meets (`PerStack`, 104 bytes), so threads that run the same code hold
/// the same stacks once each: four threads going round the same half a
/// million stacks took 336 MB, one 108 MB (`stacks 500000 500000 0 4`). Once all hold `spill_slack`
/// entries more than there are distinct stacks, a thread that makes a new
/// entry, and holds `spill_min` or more, hands its entries to the
/// process's (`thread::life::spill`), as a thread that ends does: the
/// entries then stay within the distinct stacks plus the slack. Threads
/// that meet different stacks never hand theirs over. The thread of a
/// process of one thread hands its table over once it holds the slack:
/// the process's counters are packed (`packed`), so a program of half a
/// million stacks keeps 65 536 entries of 104 bytes and 22-byte rows for
/// the rest (`stacks 1000000 500000`: 117 MB under the recorder before,
/// 95 after; compileall over the standard library 143 MB, 113 after).
/// (`base::config`: 65 536 and 4096 unless set.)
///
/// Where the threads' stacks in use outgrow the slack (four threads each
/// going round the same 100 000 stacks), what a thread hands over it soon
/// makes again; so the slack doubles each time one thread has handed over
/// twice the entries allowed since it was last set (`handed`), until the
/// threads' tables hold what they use. One thread's count, not all of
/// theirs: a thread that goes once round the stacks hands each over once,
/// so only a thread that makes again what it handed can pass it (the sum
/// of four threads going once round half a million stacks doubled the
/// slack four times, to 1 M entries: tables of 50 MB more).
pub static ENTRIES: AtomicU64 = AtomicU64::new(0);
/// The slack now (0: the configured one, not yet doubled).
static SPILL_SLACK_NOW: AtomicU64 = AtomicU64::new(0);

/// Tables handed over, and the entries they held (the dump says them).
pub static HAND_OVERS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// The slack of [`ENTRIES`] now.
pub(super) fn slack() -> u64 {
    match SPILL_SLACK_NOW.load(Ordering::Relaxed) {
        0 => crate::base::config::get().spill_slack,
        s => s,
    }
}

/// Counts `n` entries handed over by a thread (under the registry's lock:
/// one hand-over at a time) in `by_thread`, its count since the slack was
/// last set; doubles the slack where that is many.
pub fn handed(n: u64, by_thread: &mut u64) {
    HAND_OVERS[0].fetch_add(1, Ordering::Relaxed);
    HAND_OVERS[1].fetch_add(n, Ordering::Relaxed);
    *by_thread += n;
    let slack = slack();
    if *by_thread > 2 * (u64::from(stacks::count()) + slack) {
        SPILL_SLACK_NOW.store((2 * slack).max(1024), Ordering::Relaxed);
        *by_thread = 0;
    }
}

/// In a forked child: it counts from the fork.
pub fn forked() {
    ENTRIES.store(0, Ordering::Relaxed);
    SPILL_SLACK_NOW.store(0, Ordering::Relaxed);
    HAND_OVERS
        .iter()
        .for_each(|h| h.store(0, Ordering::Relaxed));
}

impl StackMap {
    /// A live thread's empty map, counted in [`ENTRIES`].
    pub const fn for_thread() -> Self {
        let mut m = Self::new();
        m.counted = true;
        m
    }

    /// Whether this map should be handed over before its next new entry.
    #[inline(always)]
    pub fn spill_due(&self) -> bool {
        self.spill
    }

    /// Empties the map (its entries handed over, or its thread ended):
    /// its memory goes back, and it leaves [`ENTRIES`].
    pub fn empty(&mut self) {
        self.empty_keeping(0);
    }

    /// `empty`, but where the entries' room is for `keep` entries or
    /// fewer, it is kept (a thread that hands its table over fills it
    /// again: 7 MB given back and mapped again at each hand-over were a
    /// tenth of the time of threads whose stacks outgrew the slack).
    pub fn empty_keeping(&mut self, keep: usize) {
        if self.counted {
            let n = self.vals.len() as u64;
            let _ = ENTRIES.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| {
                Some(e.saturating_sub(n))
            });
        }
        let mut vals = core::mem::take(&mut self.vals);
        vals.clear();
        *self = StackMap {
            counted: self.counted,
            ..StackMap::new()
        };
        if vals.capacity() <= keep {
            self.vals = vals;
        }
    }
}
