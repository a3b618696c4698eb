//! Memory over time (MALT's `memoryTimeline`, `systemTimeline` and
//! `memoryBandwidth`): a bounded number of buckets of equal length over the
//! run, each with the lowest and highest requested bytes alive reached in
//! it (and the stack of the allocation that reached the highest), and what
//! the recorder's thread read at its end (resident and virtual memory, the
//! recorder's own, blocks alive, the machine's free, swapped and cached
//! memory, the allocations and frees so far).
//!
//! The highest and lowest levels are exact: every move of the level
//! (`data::level`) compares itself with the bucket's extremes, a load and
//! a comparison, and writes only a new extreme. So a 5 ms spike in a
//! 10-minute run still shows as its bucket's maximum, whatever the
//! buckets' length. A move racing with the end of a bucket may count in
//! the next one.
//!
//! Buckets start `FIRST_STEP_NS` long. When the run outgrows `POINTS` of
//! them, neighbours merge (extremes of both, the later readings) and the
//! length doubles, as MALT does: a 10-minute run has 512 buckets of about
//! 1.2 s, a 0.1 s run 25 of 4 ms.

use crate::base::sync::SpinLock;
use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// Buckets kept (MALT keeps 512).
pub const POINTS: usize = 512;
/// The first buckets' length.
pub const FIRST_STEP_NS: u64 = 4_000_000;
/// No stack (a bucket's maximum that no allocation set).
pub const NO_STACK: u32 = u32::MAX;

/// The current bucket's extremes of the level, and the stack that set its
/// maximum.
static HIGH: AtomicI64 = AtomicI64::new(0);
static HIGH_STACK: AtomicU32 = AtomicU32::new(NO_STACK);
static LOW: AtomicI64 = AtomicI64::new(0);
/// The current bucket's number: a thread's highest count of its own blocks
/// alive is kept per bucket (`ThreadState::note_blocks`).
pub static EPOCH: AtomicU32 = AtomicU32::new(0);

/// An allocation of stack `stack` moved the level to `level`.
#[inline(always)]
pub fn rise(level: i64, stack: u32) {
    if level > HIGH.load(Ordering::Relaxed) {
        new_high(level, stack);
    }
}

/// A free moved the level to `level`.
#[inline(always)]
pub fn fall(level: i64) {
    if level < LOW.load(Ordering::Relaxed) {
        new_low(level);
    }
}

#[inline(never)]
fn new_high(level: i64, stack: u32) {
    if crate::base::sync::single_threaded() {
        HIGH.store(level, Ordering::Relaxed);
        HIGH_STACK.store(stack, Ordering::Relaxed);
    } else if HIGH.fetch_max(level, Ordering::Relaxed) < level {
        HIGH_STACK.store(stack, Ordering::Relaxed);
    }
}

#[inline(never)]
fn new_low(level: i64) {
    if crate::base::sync::single_threaded() {
        LOW.store(level, Ordering::Relaxed);
    } else {
        LOW.fetch_min(level, Ordering::Relaxed);
    }
}

/// One bucket: the dump's record of it (its readings are those at its
/// end, the largest where several ends fell in one bucket; its moves are
/// those in it).
pub use heapledger_wire::TimelinePoint as Point;

/// `o` (a later part of the same bucket, or the next bucket) joins `p`.
fn absorb(p: &mut Point, o: &Point) {
    if !o.touched {
        return;
    }
    if !p.touched {
        *p = *o;
        return;
    }
    if o.high > p.high || p.high_stack == Point::NO_STACK && o.high == p.high {
        p.high = o.high;
        p.high_stack = o.high_stack;
    }
    p.low = p.low.min(o.low);
    p.rss = p.rss.max(o.rss);
    p.vsz = p.vsz.max(o.vsz);
    p.internal = p.internal.max(o.internal);
    p.blocks = p.blocks.max(o.blocks);
    p.allocs += o.allocs;
    p.alloc_bytes += o.alloc_bytes;
    p.frees += o.frees;
    p.free_bytes += o.free_bytes;
    p.sys_free = o.sys_free;
    p.sys_swap = o.sys_swap;
    p.sys_cached = o.sys_cached;
}

/// What the recorder's thread read at a bucket's end.
#[derive(Clone, Copy, Default)]
pub struct Readings {
    pub rss: u64,
    pub vsz: u64,
    pub internal: u64,
    /// Blocks alive: the most in the bucket, as far as the threads' own
    /// highest counts tell (exact for one thread; with several, the sum of
    /// each one's highest, an upper bound).
    pub blocks: u64,
    /// Allocations and bytes, frees and bytes, since the process started
    /// (or forked).
    pub moves: [u64; 4],
    pub sys_free: u64,
    pub sys_swap: u64,
    pub sys_cached: u64,
}

pub struct Series {
    /// When bucket 0 starts (monotonic ns).
    pub start_ns: u64,
    pub step_ns: u64,
    pub points: [Point; POINTS],
    /// The moves at the last bucket's end.
    last_moves: [u64; 4],
    /// When the last bucket ended: the recorder's thread and the dump may
    /// end buckets in another order than their times.
    last_end_ns: u64,
}

/// The buckets, written by the recorder's thread (and the dump, which ends
/// the current bucket), never by a hook.
pub static SERIES: SpinLock<Series> = SpinLock::new(Series {
    start_ns: 0,
    step_ns: FIRST_STEP_NS,
    points: [Point::EMPTY; POINTS],
    last_moves: [0; 4],
    last_end_ns: 0,
});

impl Series {
    /// Ends the current bucket at `now_ns`, with the level then (`level`)
    /// and what was read (`r`); the next starts at this level.
    pub fn end_bucket(&mut self, now_ns: u64, level: i64, r: &Readings) {
        let now_ns = now_ns.max(self.last_end_ns);
        self.last_end_ns = now_ns;
        // Take the extremes first, then read the level: a move after the
        // swap counts in the next bucket, which starts at a level read
        // after it.
        let high = HIGH.swap(i64::MIN, Ordering::Relaxed);
        let high_stack = HIGH_STACK.swap(NO_STACK, Ordering::Relaxed);
        let low = LOW.swap(i64::MAX, Ordering::Relaxed);
        rise(level, NO_STACK);
        fall(level);
        EPOCH.fetch_add(1, Ordering::Relaxed);
        let m = r.moves;
        let d = |i: usize| m[i].saturating_sub(self.last_moves[i]);
        let p = Point {
            touched: true,
            high: high.max(level).max(0) as u64,
            high_stack: if high >= level {
                high_stack as u64
            } else {
                Point::NO_STACK
            },
            low: low.min(level).max(0) as u64,
            rss: r.rss,
            vsz: r.vsz,
            internal: r.internal,
            blocks: r.blocks,
            allocs: d(0),
            alloc_bytes: d(1),
            frees: d(2),
            free_bytes: d(3),
            sys_free: r.sys_free,
            sys_swap: r.sys_swap,
            sys_cached: r.sys_cached,
        };
        self.last_moves = m;
        // The bucket the time at its end falls in (the last one reached by
        // the time just before that end).
        let since = now_ns.saturating_sub(self.start_ns).saturating_sub(1);
        let mut i = (since / self.step_ns) as usize;
        while i >= POINTS {
            self.halve();
            i = (since / self.step_ns) as usize;
        }
        absorb(&mut self.points[i], &p);
    }

    /// Neighbours merge, the buckets' length doubles.
    fn halve(&mut self) {
        for i in 0..POINTS / 2 {
            let mut a = self.points[2 * i];
            absorb(&mut a, &self.points[2 * i + 1]);
            self.points[i] = a;
        }
        for p in &mut self.points[POINTS / 2..] {
            *p = Point::EMPTY;
        }
        self.step_ns *= 2;
    }

    /// The buckets up to the last touched one.
    pub fn used(&self) -> &[Point] {
        let n = self
            .points
            .iter()
            .rposition(|p| p.touched)
            .map_or(0, |i| i + 1);
        &self.points[..n]
    }
}

/// Starts the series at `now_ns` with the level `level` (the process's
/// start, or a forked child's, which counts from the fork).
pub fn start(now_ns: u64, level: i64) {
    let mut s = SERIES.lock();
    s.start_ns = now_ns;
    s.step_ns = FIRST_STEP_NS;
    s.points = [Point::EMPTY; POINTS];
    s.last_moves = [0; 4];
    s.last_end_ns = now_ns;
    HIGH.store(level, Ordering::Relaxed);
    HIGH_STACK.store(NO_STACK, Ordering::Relaxed);
    LOW.store(level, Ordering::Relaxed);
}
