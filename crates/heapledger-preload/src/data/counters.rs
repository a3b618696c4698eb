//! Per-thread counters, keyed by stack, merged when the thread ends or the
//! profile is written.
//!
//! Each thread owns its maps, so an event touches no memory shared with other
//! threads, except for the process's level of bytes alive (`data::level`,
//! exact in one order of all events) and each stack's shared bytes alive,
//! which a thread updates only when its own pending part could change the
//! stack's maximum or exceeds a slack: for one thread that maximum is exact;
//! with several, it can miss at most the other threads' pending parts
//! (`SLACK` bytes each). The shares of the process's peak are exact.

use crate::base::clock::ticks;
use crate::base::sync::{add_i64, max_u64};
use crate::data::level::{self, Move};
use crate::data::stacks::{self, StackId};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use heapledger_wire::{StackCounters, Totals};

pub const SLACK: i64 = 64 * 1024;

/// Lifetimes: reading the CPU's clock costs about 12 ns here, as much as the
/// rest of a pair's bookkeeping without its stack, and a block's lifetime
/// needs two reads. So the first `LIFETIME_HEAD` blocks of each stack in
/// each thread are timed, every one of them; after that, one block in
/// `LIFETIME_ONE_IN`, picked at random, is timed and stands for that many
/// (a stack that allocates millions of blocks still has tens of
/// thousands timed). A stack's lifetime count stays the exact number of
/// its blocks freed, and its sum is the timed blocks' weighted mean times
/// that count (`PerStack::wire_counters`); its minimum and
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

#[derive(Clone, Copy, Default)]
pub struct PerStack {
    pub t: Totals,
    /// This thread's part of the stack's bytes alive.
    pub alive: i64,
    /// Part of `alive` already added to the stack's shared counter.
    pub flushed: i64,
    pub at_peak: i64,
    pub epoch: u64,
    /// The stack's shared entry (`stacks::entry`), kept at hand: set when
    /// the thread first meets the stack (`StackMap::get`).
    pub shared: Option<&'static stacks::StackEntry>,
}

impl PerStack {
    /// `add_alive` for the bytes alive and the share at the peak only.
    #[inline(always)]
    pub fn shift(&mut self, delta: i64, m: &Move) {
        if self.epoch != m.peak_before {
            self.at_peak = self.alive;
        }
        self.alive += delta;
        if m.set_peak() {
            self.at_peak = self.alive;
        }
        self.epoch = m.peak_after;
    }

    /// This entry's bytes at the last global peak (given the final epoch).
    pub fn at_peak_final(&self, epoch: u64) -> i64 {
        if self.epoch == epoch {
            self.at_peak
        } else {
            self.alive
        }
    }

    /// Adds `delta` to this entry's bytes alive, in the place `m` gave
    /// the event in the order of all (see `data::level`). `at_peak` keeps
    /// the entry's bytes as of the peak `epoch`: where a peak was set since
    /// the entry's last change, its bytes then are its bytes now; and the
    /// event that sets a peak counts in it.
    #[inline(always)]
    pub fn add_alive(&mut self, id: StackId, delta: i64, m: &Move) {
        self.shift(delta, m);
        let pending = self.alive - self.flushed;
        let e = match self.shared {
            Some(e) => e,
            None => stacks::entry(id),
        };
        if delta > 0 {
            let cand = e.alive.load(Ordering::Relaxed) + pending;
            if cand > e.max_alive.load(Ordering::Relaxed) as i64 {
                let now = add_i64(&e.alive, pending);
                self.flushed = self.alive;
                max_u64(&e.max_alive, now.max(0) as u64);
            }
        } else if pending < -SLACK {
            add_i64(&e.alive, pending);
            self.flushed = self.alive;
        }
    }

    /// Merges another thread's entry (a thread that ended) into this one, as
    /// if this entry were touched now.
    pub fn absorb(&mut self, o: &PerStack, epoch_now: u64) {
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

/// Stack id -> counters: an open-addressing index of (id, position) pairs
/// over counters kept densely in order of first use. A stack costs its
/// counters (224 bytes) and two to four 8-byte index slots; the counters
/// sat in the hash slots themselves before, two to four times over (a
/// program with a million distinct stacks: 947 MB -> 500 MB).
pub struct StackMap {
    /// (id + 1, position in `vals`); id 0 marks an empty slot.
    slots: Vec<(u32, u32)>,
    vals: Vec<PerStack>,
    ids: Vec<StackId>,
    /// Ids looked up lately, plus one, with their positions, direct-mapped
    /// on the id: a loop's few stacks take turns (Python making a string
    /// allocates from three), and one compare here finds each of them
    /// (callgrind, Python building strings: a malloc's `get` took 23
    /// instructions on average when only the last id was kept, 11 now).
    recent: [(u32, u32); RECENT],
}

const RECENT: usize = 16;

impl StackMap {
    /// An empty map, which allocates nothing until its first stack: a
    /// thread that never records, or one whose state is retired, keeps no
    /// table (states are never freed; see `thread::state::for_each_state`).
    pub fn new() -> Self {
        StackMap {
            slots: Vec::new(),
            vals: Vec::new(),
            ids: Vec::new(),
            recent: [(0, 0); RECENT],
        }
    }

    /// The counters of `id`, added if the thread has none yet; None when
    /// memory for them ran out (the caller degrades: `base::degrade`).
    #[inline(always)]
    pub fn get(&mut self, id: StackId) -> Option<&mut PerStack> {
        let key = id + 1;
        let r = id as usize % RECENT;
        let (k, at) = self.recent[r];
        if k == key {
            // SAFETY: `recent` holds only positions of `vals`, which never
            // shrinks; key 0 (never an id's) marks an empty entry.
            return Some(unsafe { self.vals.get_unchecked_mut(at as usize) });
        }
        if self.slots.is_empty() && !self.grow() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = (id as usize).wrapping_mul(0x9E37_79B9) & mask;
        loop {
            let (k, at) = self.slots[i];
            if k == key {
                self.recent[r] = (key, at);
                return Some(&mut self.vals[at as usize]);
            }
            if k == 0 {
                break;
            }
            i = (i + 1) & mask;
        }
        self.insert(id, i)
    }

    /// Adds `id`, whose probe ended at the empty slot `i`.
    #[cold]
    fn insert(&mut self, id: StackId, i: usize) -> Option<&mut PerStack> {
        if (self.vals.len() + 1) * 2 > self.slots.len() {
            if !self.grow() {
                return None;
            }
            return self.get(id);
        }
        // Room first, so that a refusal leaves the map as it was.
        if self.vals.try_reserve(1).is_err() || self.ids.try_reserve(1).is_err() {
            return None;
        }
        let at = self.vals.len() as u32;
        self.slots[i] = (id + 1, at);
        self.vals.push(PerStack {
            shared: Some(stacks::entry(id)),
            ..PerStack::default()
        });
        self.ids.push(id);
        self.recent[id as usize % RECENT] = (id + 1, at);
        Some(&mut self.vals[at as usize])
    }

    /// Doubles the index; false (the map as it was) when memory ran out.
    #[cold]
    fn grow(&mut self) -> bool {
        let cap = (self.slots.len() * 2).max(64);
        let Some(slots) = filled(cap, (0, 0)) else {
            return false;
        };
        self.slots = slots;
        let mask = cap - 1;
        for (at, &id) in self.ids.iter().enumerate() {
            let mut i = (id as usize).wrapping_mul(0x9E37_79B9) & mask;
            while self.slots[i].0 != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = (id + 1, at as u32);
        }
        true
    }

    pub fn iter(&self) -> impl Iterator<Item = (StackId, &PerStack)> {
        self.ids.iter().copied().zip(self.vals.iter())
    }
}

/// A vector of `n` copies of `v`, or None when memory ran out (where
/// `vec![v; n]` would abort the program).
fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).ok()?;
    out.resize(n, v);
    Some(out)
}

/// Counts of requested sizes: sizes up to 4 KiB in a direct array (the
/// common case, one add), larger ones in a bounded hash table. The array is
/// in pages of `SIZE_PAGE` sizes, each allocated on its first count: a
/// thread whose requests take a few sizes keeps a page or two (512 bytes
/// each) instead of the whole 32 KiB.
pub struct SizeHistogram {
    pages: Vec<Option<alloc::boxed::Box<[u64; SIZE_PAGE]>>>,
    pub large: Histogram,
}

const SMALL_SIZES: usize = 4097;
const SIZE_PAGE: usize = 64;
const SIZE_PAGES: usize = SMALL_SIZES.div_ceil(SIZE_PAGE);

impl SizeHistogram {
    pub fn new() -> Self {
        SizeHistogram {
            pages: Vec::new(),
            large: Histogram::new(),
        }
    }

    #[inline(always)]
    pub fn add(&mut self, size: u64, n: u64) {
        if (size as usize) < SMALL_SIZES {
            let size = size as usize;
            match self.pages.get_mut(size / SIZE_PAGE) {
                Some(Some(page)) => page[size % SIZE_PAGE] += n,
                _ => self.add_paged(size, n),
            }
        } else {
            self.large.add((size, 0), n);
        }
    }

    /// `add` of a size whose page is not there yet.
    #[cold]
    #[inline(never)]
    fn add_paged(&mut self, size: usize, n: u64) {
        if self.pages.is_empty() {
            if self.pages.try_reserve_exact(SIZE_PAGES).is_err() {
                self.large.dropped += n;
                return;
            }
            self.pages.resize_with(SIZE_PAGES, || None);
        }
        let slot = &mut self.pages[size / SIZE_PAGE];
        if slot.is_none() {
            // A page's worth of sizes; where memory ran out, the count is
            // dropped, as a full table's.
            // (`filled` reserves exactly: the boxed slice is not moved.)
            let page = filled(SIZE_PAGE, 0u64).map(Vec::into_boxed_slice);
            let Some(Ok(page)) = page.map(alloc::boxed::Box::<[u64; SIZE_PAGE]>::try_from) else {
                self.large.dropped += n;
                return;
            };
            *slot = Some(page);
        }
        if let Some(page) = slot {
            page[size % SIZE_PAGE] += n;
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pages
            .iter()
            .enumerate()
            .filter_map(|(p, page)| Some((p, page.as_ref()?)))
            .flat_map(|(p, page)| {
                page.iter()
                    .enumerate()
                    .filter(|(_, c)| **c != 0)
                    .map(move |(i, c)| ((p * SIZE_PAGE + i) as u64, *c))
            })
            .chain(self.large.iter().map(|((s, _), c)| (s, c)))
    }

    pub fn absorb(&mut self, o: &SizeHistogram) {
        for (s, c) in o.iter() {
            self.add(s, c);
        }
        self.large.dropped += o.large.dropped;
    }
}

/// Open addressing from a u64 key (or a pair folded into one slot) to a
/// count, bounded: once full, new keys are only counted as dropped.
pub struct Histogram {
    keys: Vec<(u64, u64)>,
    counts: Vec<u64>,
    len: usize,
    pub dropped: u64,
}

const HIST_MAX: usize = 1 << 16;

impl Histogram {
    /// An empty histogram, which allocates nothing until its first key (as
    /// `StackMap::new`).
    pub fn new() -> Self {
        Histogram {
            keys: Vec::new(),
            counts: Vec::new(),
            len: 0,
            dropped: 0,
        }
    }

    #[inline(always)]
    pub fn add(&mut self, key: (u64, u64), n: u64) {
        if self.keys.is_empty() && !self.grow() {
            self.dropped += n;
            return;
        }
        let mask = self.keys.len() - 1;
        let mut i = (key.0 ^ key.1.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize
            >> 7
            & mask;
        loop {
            let k = self.keys[i];
            if k == key {
                self.counts[i] += n;
                return;
            }
            if k.0 == u64::MAX {
                break;
            }
            i = (i + 1) & mask;
        }
        if (self.len + 1) * 2 > self.keys.len() {
            if self.keys.len() >= HIST_MAX * 2 || !self.grow() {
                self.dropped += n;
                return;
            }
            return self.add(key, n);
        }
        self.keys[i] = key;
        self.counts[i] = n;
        self.len += 1;
    }

    /// Doubles the table; false (the table as it was) when memory ran out.
    #[cold]
    fn grow(&mut self) -> bool {
        let cap = (self.keys.len() * 2).max(64);
        let (Some(new_keys), Some(new_counts)) = (filled(cap, (u64::MAX, 0)), filled(cap, 0))
        else {
            return false;
        };
        let keys = core::mem::replace(&mut self.keys, new_keys);
        let counts = core::mem::replace(&mut self.counts, new_counts);
        self.len = 0;
        for (k, c) in keys.into_iter().zip(counts) {
            if k.0 != u64::MAX {
                self.add(k, c);
            }
        }
        true
    }

    pub fn iter(&self) -> impl Iterator<Item = ((u64, u64), u64)> + '_ {
        self.keys
            .iter()
            .zip(self.counts.iter())
            .filter(|(k, _)| k.0 != u64::MAX)
            .map(|(k, c)| (*k, *c))
    }

    pub fn absorb(&mut self, o: &Histogram) {
        for (k, c) in o.iter() {
            self.add(k, c);
        }
        self.dropped += o.dropped;
    }
}
