//! Per-thread counters, keyed by stack (`stackmap.rs` keeps them compact),
//! merged when the thread ends or the profile is written.
//!
//! Each thread owns its maps, so an event touches no memory shared with other
//! threads, except for the process's level of bytes alive (`data::level`,
//! exact in one order of all events) and each stack's shared bytes alive,
//! which a thread updates only when its own pending part could change the
//! stack's maximum or exceeds a slack: for one thread that maximum is exact;
//! with several, it can miss at most the other threads' pending parts
//! (`SLACK` bytes each). The shares of the process's peak are exact.

use crate::base::clock::ticks;
use crate::data::level::{self, Move};
use crate::data::stacks::{self, StackId};
use core::sync::atomic::{AtomicU64, Ordering};
use heapledger_wire::{StackCounters, Totals};

pub use super::histogram::{Histogram, SizeHistogram};
pub use super::stackmap::StackMap;

pub const SLACK: i64 = 64 * 1024;

/// Lifetimes: reading the CPU's clock costs about 12 ns here, as much as the
/// rest of a pair's bookkeeping without its stack, and a block's lifetime
/// needs two reads. So the first `LIFETIME_HEAD` blocks of each stack in
/// each thread are timed, every one of them; after that, one block in
/// `LIFETIME_ONE_IN`, picked at random, is timed and stands for that many
/// (a stack that allocates millions of blocks still has tens of
/// thousands timed). A stack's lifetime count stays the exact number of
/// its blocks freed, and its sum is the timed blocks' weighted mean times
/// that count (`Full::wire_counters`); its minimum and
/// maximum are those of the timed blocks. `--exact-lifetimes` times every
/// block (`lifetime_head` is then unbounded).
pub const LIFETIME_HEAD: u64 = 64;
/// See `LIFETIME_HEAD`; a power of two (`ThreadState::lifetime_pick`).
pub const LIFETIME_ONE_IN: u64 = 16;

/// Events forwarded without being recorded (re-entered hooks).
pub static UNRECORDED: AtomicU64 = AtomicU64::new(0);

pub static PEAK_TICKS: AtomicU64 = AtomicU64::new(0);
/// The peak when PEAK_TICKS was last read from the clock for it.
static PEAK_TIMED: AtomicU64 = AtomicU64::new(0);
/// The peak's time is that of the moment memory first came within
/// 1/PEAK_TIME_STEP of the peak (exact when an event that set the peak
/// read the clock anyway).
const PEAK_TIME_STEP: u64 = 1024;

/// The process's peak of requested bytes so far (see `data::level`). It is
/// also the epoch of the stacks' shares at the peak: it only grows, and
/// moves exactly when the peak does.
pub fn peak() -> u64 {
    level::read().1
}

/// Moves the process's requested bytes alive by `delta` (see
/// `data::level`), noting when a new peak was reached: at `now` where the
/// event read the clock (not 0), else reading it when the peak has grown
/// by 1/PEAK_TIME_STEP since the last reading, not once per allocation
/// while memory grows.
#[inline(always)]
pub fn move_level(delta: i64, now: u64) -> Move {
    let m = level::apply(delta);
    if m.set_peak() {
        if now != 0 {
            PEAK_TICKS.store(now, Ordering::Relaxed);
        } else {
            let timed = PEAK_TIMED.load(Ordering::Relaxed);
            if m.peak_after >= timed + timed / PEAK_TIME_STEP {
                PEAK_TIMED.store(m.peak_after, Ordering::Relaxed);
                PEAK_TICKS.store(ticks(), Ordering::Relaxed);
            }
        }
    }
    m
}

/// In a forked child, which counts from the fork: the process's level,
/// peak and their times, the unrecorded events, and every stack's shared
/// bytes alive and maximum go back to 0 (the threads' own counters are
/// emptied by `thread::life::start_afresh`).
pub fn forked() {
    level::reset();
    PEAK_TICKS.store(0, Ordering::Relaxed);
    PEAK_TIMED.store(0, Ordering::Relaxed);
    UNRECORDED.store(0, Ordering::Relaxed);
    for id in 0..stacks::count() {
        let e = stacks::entry(id);
        e.alive.store(0, Ordering::Relaxed);
        e.max_alive.store(0, Ordering::Relaxed);
    }
}

/// A stack's counters in full, as wide as the dump's: what a thread's
/// compact entry (`stackmap::PerStack`) and its rare record stand for, and
/// the form in which entries of several threads are merged (off the
/// per-event path: a thread's end, the dump).
#[derive(Clone, Copy, Default)]
pub struct Full {
    pub t: Totals,
    /// This thread's part of the stack's bytes alive.
    pub alive: i64,
    /// Part of `alive` already added to the stack's shared counter.
    pub flushed: i64,
    pub at_peak: i64,
    pub epoch: u64,
}

impl Full {
    /// This entry's bytes at the last global peak (given the final epoch).
    pub fn at_peak_final(&self, epoch: u64) -> i64 {
        if self.epoch == epoch {
            self.at_peak
        } else {
            self.alive
        }
    }

    /// Merges another thread's entry (a thread that ended) into this one, as
    /// if this entry were touched now.
    pub fn absorb(&mut self, o: &Full, epoch_now: u64) {
        if self.epoch != epoch_now {
            self.at_peak = self.alive;
            self.epoch = epoch_now;
        }
        self.at_peak += o.at_peak_final(epoch_now);
        self.alive += o.alive;
        self.flushed += o.flushed;
        self.t.merge(&o.t);
    }

    pub fn wire_counters(&self, id: StackId, epoch: u64) -> StackCounters {
        let e = stacks::entry(id);
        let mut totals = self.t;
        // Timed blocks stand for the stack's blocks (`counters::LIFETIME_HEAD`):
        // every freed block has a lifetime, and their sum is the timed
        // ones' weighted mean times their number.
        let lt = &mut totals.lifetime;
        if lt.count != 0 && lt.count != totals.free.count {
            lt.sum = (lt.sum as u128 * totals.free.count as u128 / lt.count as u128)
                .min(u64::MAX as u128) as u64;
            lt.count = totals.free.count;
        }
        StackCounters {
            totals,
            alive: self.alive,
            max_alive: e.max_alive.load(Ordering::Relaxed),
            at_peak: self.at_peak_final(epoch),
        }
    }
}
