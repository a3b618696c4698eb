//! A thread's counters per stack, kept compact: a program with half a
//! million distinct stacks has that many entries in each thread that met
//! them, and at 224 bytes an entry (the dump's counters in full, plus the
//! bytes alive and the share at the peak) the recorder held 372 MB for
//! a program of 2 MB (`stacks 1000000 500000`).
//!
//! An entry (`PerStack`, 112 bytes) holds what every allocation and free
//! of the stack touches: the counts (32 bits), byte sums, size range (32
//! bits), lifetimes, temporary blocks, and the bytes alive with their share at the peak. The
//! rest is in a rare record (`Rare`), made on first use: mmap and munmap,
//! zero-sized and realloc calls, and what does not fit 32 bits (a count
//! past 2^32, whose high part moves there; sizes of 4 GiB and more, whose
//! range is kept there exactly, the entry's saturating at `u32::MAX`).
//! Every counter stays exact; `Full` is the entry and its record as one.

use crate::base::sync::{add_i64, max_u64};
use crate::data::counters::{Full, SLACK};
use crate::data::histogram::filled;
use crate::data::level::Move;
use crate::data::stacks::{self, StackId};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use heapledger_wire::MinMaxSum;

mod packed;
mod slot;
mod spill;
pub use packed::Packed;
// (Read by tests/packed.rs, not by the library's own tests.)
#[cfg(test)]
#[allow(unused_imports)]
pub use packed::REWRITTEN;
pub use slot::Slot;
use spill::slack;
pub use spill::{forked, handed, ENTRIES, HAND_OVERS};

const BIG: u32 = u32::MAX;

/// The counters of one stack in one thread (see the top of this file).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct PerStack {
    /// Part of the bytes alive (see [`PerStack::alive`]) already added to
    /// the stack's shared counter.
    flushed: i64,
    at_peak: i64,
    epoch: u64,
    alloc_sum: u64,
    free_sum: u64,
    life_sum: u64,
    /// `u64::MAX` while no lifetime was counted.
    life_min: u64,
    life_max: u64,
    /// Low 32 bits of the counts; the high part is in the rare record.
    alloc_count: u32,
    free_count: u32,
    life_count: u32,
    /// Size ranges; `BIG` (a min at `BIG` with blocks counted, a max at
    /// `BIG`) says the bound is the rare record's.
    alloc_min: u32,
    alloc_max: u32,
    free_min: u32,
    free_max: u32,
    /// Position of the rare record, plus one (0: none yet).
    rare: u32,
    id: StackId,
    /// Low 32 bits of the temporary blocks' count (see `Totals::temporary`).
    temp_count: u32,
}

const _: () = assert!(core::mem::size_of::<PerStack>() == 104);

impl PerStack {
    fn new(id: StackId) -> Self {
        PerStack {
            flushed: 0,
            at_peak: 0,
            epoch: 0,
            alloc_sum: 0,
            free_sum: 0,
            life_sum: 0,
            life_min: u64::MAX,
            life_max: 0,
            alloc_count: 0,
            free_count: 0,
            life_count: 0,
            alloc_min: BIG,
            alloc_max: 0,
            free_min: BIG,
            free_max: 0,
            rare: 0,
            id,
            temp_count: 0,
        }
    }

    /// This thread's part of the stack's bytes alive: what it allocated
    /// here less what it freed of the stack's blocks (an entry changes
    /// both sums and nothing else changes the bytes alive; kept apart,
    /// they took 8 bytes a stack: 4 MB at half a million).
    #[inline(always)]
    pub fn alive(&self) -> i64 {
        self.alloc_sum.wrapping_sub(self.free_sum) as i64
    }

    /// `add_alive` for the share at the peak only: `delta`, the event's
    /// bytes, is already in the sums.
    #[inline(always)]
    pub fn shift(&mut self, delta: i64, m: &Move) {
        let alive = self.alive();
        if self.epoch != m.peak_before {
            self.at_peak = alive.wrapping_sub(delta);
        }
        if m.set_peak() {
            self.at_peak = alive;
        }
        self.epoch = m.peak_after;
    }

    /// Counts `delta` (already in the sums) in this entry's bytes alive, in the place `m` gave
    /// the event in the order of all (see `data::level`). `at_peak` keeps
    /// the entry's bytes as of the peak `epoch`: where a peak was set since
    /// the entry's last change, its bytes then are its bytes now; and the
    /// event that sets a peak counts in it.
    #[inline(always)]
    pub fn add_alive(&mut self, id: StackId, delta: i64, m: &Move) {
        self.shift(delta, m);
        let alive = self.alive();
        let pending = alive - self.flushed;
        let e = stacks::entry(id);
        if delta > 0 {
            let cand = e.alive.load(Ordering::Relaxed) + pending;
            if cand > e.max_alive.load(Ordering::Relaxed) as i64 {
                let now = add_i64(&e.alive, pending);
                self.flushed = alive;
                max_u64(&e.max_alive, now.max(0) as u64);
            }
        } else if pending < -SLACK {
            add_i64(&e.alive, pending);
            self.flushed = alive;
        }
    }
}

/// What an entry holds beyond the per-event counters (see the top).
#[derive(Clone, Copy, Default)]
struct Rare {
    mmap: MinMaxSum,
    munmap: MinMaxSum,
    zeros: u64,
    realloc_count: u64,
    realloc_delta: i64,
    /// High parts of the counts (multiples of 2^32).
    alloc_hi: u64,
    free_hi: u64,
    life_hi: u64,
    temp_hi: u64,
    /// Range of the sizes of `BIG` bytes and more (min, max; `u64::MAX`
    /// and 0 while there is none).
    alloc_big: (u64, u64),
    free_big: (u64, u64),
}

impl Rare {
    fn new() -> Self {
        Rare {
            alloc_big: (u64::MAX, 0),
            free_big: (u64::MAX, 0),
            ..Rare::default()
        }
    }
}

/// A count's parts, a range from its 32-bit and big parts, as `MinMaxSum`.
fn series(count: u64, (min, max): (u32, u32), (bmin, bmax): (u64, u64), sum: u64) -> MinMaxSum {
    if count == 0 {
        return MinMaxSum::default();
    }
    MinMaxSum {
        count,
        min: if min == BIG { bmin } else { min as u64 },
        max: if max == BIG { bmax } else { max as u64 },
        sum,
    }
}

/// The 32-bit range and the big range of a series (see `range`).
fn split_range(m: &MinMaxSum) -> ((u32, u32), (u64, u64)) {
    if m.count == 0 {
        return ((BIG, 0), (u64::MAX, 0));
    }
    let small = |v: u64| v.min(BIG as u64) as u32;
    let big_min = if m.min >= BIG as u64 { m.min } else { u64::MAX };
    let big_max = if m.max >= BIG as u64 { m.max } else { 0 };
    ((small(m.min), small(m.max)), (big_min, big_max))
}

/// Stack id -> counters: each id's position among entries kept densely in
/// order of first use (their capacity beyond their number is mapped, never
/// touched: it costs no memory), in pages of `PAGE` ids made as ids are
/// met. Ids are given in order of first use in the process, so a thread's
/// pages are mostly full: 4 bytes a stack, where a hash index of (id,
/// position) pairs, kept half empty, took 16 (8 MB at half a million). A
/// thread that meets one stack in each page pays 256 bytes for it, beside
/// its 104-byte entry: pages are small for that.
pub struct StackMap {
    /// Page `id / PAGE`, none until an id there is met: position plus one
    /// of each id (0: none).
    pages: Vec<Option<Box<[u32; PAGE]>>>,
    vals: Vec<PerStack>,
    rare: Vec<Rare>,
    /// Ids looked up lately, plus one, with their positions, direct-mapped
    /// on the id: a loop's few stacks take turns (Python making a string
    /// allocates from three), and one compare here finds each of them
    /// (callgrind, Python building strings: a malloc's `get` took 23
    /// instructions on average when only the last id was kept, 11 now).
    recent: [(u32, u32); RECENT],
    /// A live thread's map, counted in [`ENTRIES`].
    counted: bool,
    /// Set when this map should be handed over (see [`ENTRIES`]).
    spill: bool,
}

const RECENT: usize = 16;
const PAGE: usize = 64;

impl Default for StackMap {
    fn default() -> Self {
        Self::new()
    }
}

impl StackMap {
    /// An empty map, which allocates nothing until its first stack: a
    /// thread that never records, or one whose state is retired, keeps no
    /// table (states are never freed; see `thread::state::for_each_state`).
    pub const fn new() -> Self {
        StackMap {
            pages: Vec::new(),
            vals: Vec::new(),
            rare: Vec::new(),
            recent: [(0, 0); RECENT],
            counted: false,
            spill: false,
        }
    }

    pub fn len(&self) -> usize {
        self.vals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vals.is_empty()
    }

    /// The counters of `id`, added if the thread has none yet; None when
    /// memory for them ran out (the caller degrades: `base::degrade`).
    #[inline(always)]
    pub fn get(&mut self, id: StackId) -> Option<Slot<'_>> {
        let at = self.position(id)?;
        // SAFETY: `position` answers positions of `vals` only, which never
        // shrinks.
        let ps = unsafe { self.vals.get_unchecked_mut(at) };
        Some(Slot {
            ps,
            rare: &mut self.rare,
        })
    }

    /// Whether the map has `id` (nothing is added; a hit is remembered as
    /// `get`'s is).
    #[inline(always)]
    pub fn has(&mut self, id: StackId) -> bool {
        let key = id + 1;
        let r = id as usize % RECENT;
        if self.recent[r].0 == key {
            return true;
        }
        match self.find(id) {
            Some(at) => {
                self.recent[r] = (key, at as u32);
                true
            }
            None => false,
        }
    }

    #[inline(always)]
    fn position(&mut self, id: StackId) -> Option<usize> {
        let key = id + 1;
        let r = id as usize % RECENT;
        let (k, at) = self.recent[r];
        if k == key {
            // (Key 0, never an id's, marks an empty entry.)
            return Some(at as usize);
        }
        match self.find(id) {
            Some(at) => {
                self.recent[r] = (key, at as u32);
                Some(at)
            }
            None => self.insert(id),
        }
    }

    /// The position of `id`, if the map has it (nothing is added).
    #[inline(always)]
    pub fn find(&self, id: StackId) -> Option<usize> {
        let page = self.pages.get(id as usize / PAGE)?.as_ref()?;
        match page[id as usize % PAGE] {
            0 => None,
            at => Some(at as usize - 1),
        }
    }

    /// [`find`](Self::find) for ids asked in increasing order: `next` is
    /// where the entry after the last one found lies, if in order. A thread
    /// meets most stacks first (their ids are given in order of first use
    /// in the process), so its entries mostly follow the ids, and reading
    /// every stack this way touches the entries in order, not the index at
    /// random: writing a checkpoint of half a million stacks held the
    /// threads 120 to 280 ms with an index lookup per stack.
    pub fn find_next(&self, id: StackId, next: &mut usize) -> Option<usize> {
        let at = match self.vals.get(*next) {
            Some(ps) if ps.id == id => *next,
            _ => self.find(id)?,
        };
        *next = at + 1;
        Some(at)
    }

    /// Adds `id`, which the map does not have.
    #[cold]
    fn insert(&mut self, id: StackId) -> Option<usize> {
        let p = id as usize / PAGE;
        // Room first, so that a refusal leaves the map as it was.
        if p >= self.pages.len() {
            self.pages.try_reserve(p + 1 - self.pages.len()).ok()?;
            self.pages.resize_with(p + 1, || None);
        }
        if self.pages[p].is_none() {
            self.pages[p] = Some(filled(PAGE, 0)?.into_boxed_slice().try_into().ok()?);
        }
        self.vals.try_reserve(1).ok()?;
        let at = self.vals.len() as u32;
        if let Some(page) = &mut self.pages[p] {
            page[id as usize % PAGE] = at + 1;
        }
        self.vals.push(PerStack::new(id));
        self.recent[id as usize % RECENT] = (id + 1, at);
        if self.counted {
            let all = ENTRIES.fetch_add(1, Ordering::Relaxed) + 1;
            let cfg = crate::base::config::get();
            // Threads hand their tables over where all of them hold more
            // than the distinct stacks and the slack; the one thread of a
            // process of one thread, where its table holds the slack (its
            // counters are then packed with the process's: about 22 bytes
            // a stack, not 108; see `spill.rs`).
            let n = self.vals.len();
            if n >= cfg.spill_min
                && match crate::base::sync::single_threaded() {
                    false => all > stacks::count() as u64 + slack(),
                    true => n as u64 >= slack(),
                }
            {
                self.spill = true;
            }
        }
        Some(at as usize)
    }

    /// The allocations of the entry at `at`, and their bytes (what
    /// [`full`](Self::full) says of them, without the rest).
    #[inline]
    pub fn allocated(&self, at: usize) -> (u64, u64) {
        let ps = &self.vals[at];
        let hi = match ps.rare {
            0 => 0,
            i => self.rare[i as usize - 1].alloc_hi,
        };
        (ps.alloc_count as u64 + hi, ps.alloc_sum)
    }

    /// The entry at `at` in full.
    pub fn full(&self, at: usize) -> Full {
        let ps = &self.vals[at];
        let r = match ps.rare {
            0 => Rare::new(),
            i => self.rare[i as usize - 1],
        };
        let alloc_count = ps.alloc_count as u64 + r.alloc_hi;
        let free_count = ps.free_count as u64 + r.free_hi;
        let life_count = ps.life_count as u64 + r.life_hi;
        let temporary = ps.temp_count as u64 + r.temp_hi;
        let alloc = (ps.alloc_min, ps.alloc_max);
        let free = (ps.free_min, ps.free_max);
        let mut t = heapledger_wire::Totals {
            alloc: series(alloc_count, alloc, r.alloc_big, ps.alloc_sum),
            free: series(free_count, free, r.free_big, ps.free_sum),
            lifetime: MinMaxSum::default(),
            mmap: r.mmap,
            munmap: r.munmap,
            zeros: r.zeros,
            realloc_count: r.realloc_count,
            realloc_delta: r.realloc_delta,
            temporary,
        };
        if life_count != 0 {
            t.lifetime = MinMaxSum {
                count: life_count,
                min: ps.life_min,
                max: ps.life_max,
                sum: ps.life_sum,
            };
        }
        Full {
            t,
            alive: ps.alive(),
            flushed: ps.flushed,
            at_peak: ps.at_peak,
            epoch: ps.epoch,
        }
    }

    /// Sets the entry at `at` to `f`; false (the entry as it was) when
    /// memory for its rare record ran out.
    fn store(&mut self, at: usize, f: &Full) -> bool {
        let t = &f.t;
        let lo = |c: u64| c as u32;
        let hi = |c: u64| c & !(u32::MAX as u64);
        let (alloc, alloc_big) = split_range(&t.alloc);
        let (free, free_big) = split_range(&t.free);
        let rare = Rare {
            mmap: t.mmap,
            munmap: t.munmap,
            zeros: t.zeros,
            realloc_count: t.realloc_count,
            realloc_delta: t.realloc_delta,
            alloc_hi: hi(t.alloc.count),
            free_hi: hi(t.free.count),
            life_hi: hi(t.lifetime.count),
            temp_hi: hi(t.temporary),
            alloc_big,
            free_big,
        };
        let needs_rare = t.mmap.count != 0
            || t.munmap.count != 0
            || t.zeros != 0
            || t.realloc_count != 0
            || t.realloc_delta != 0
            || (rare.alloc_hi | rare.free_hi | rare.life_hi | rare.temp_hi) != 0
            || alloc.1 == BIG
            || free.1 == BIG;
        let mut ri = self.vals[at].rare;
        if needs_rare && ri == 0 {
            if self.rare.try_reserve(1).is_err() {
                return false;
            }
            self.rare.push(Rare::new());
            ri = self.rare.len() as u32;
        }
        if ri != 0 {
            self.rare[ri as usize - 1] = rare;
        }
        let (life_min, life_max) = match t.lifetime.count {
            0 => (u64::MAX, 0),
            _ => (t.lifetime.min, t.lifetime.max),
        };
        // Its bytes alive follow from the sums (see `PerStack::alive`).
        debug_assert_eq!(f.alive, t.alloc.sum.wrapping_sub(t.free.sum) as i64);
        let ps = &mut self.vals[at];
        *ps = PerStack {
            flushed: f.flushed,
            at_peak: f.at_peak,
            epoch: f.epoch,
            alloc_sum: t.alloc.sum,
            free_sum: t.free.sum,
            life_sum: t.lifetime.sum,
            life_min,
            life_max,
            alloc_count: lo(t.alloc.count),
            free_count: lo(t.free.count),
            life_count: lo(t.lifetime.count),
            alloc_min: alloc.0,
            alloc_max: alloc.1,
            free_min: free.0,
            free_max: free.1,
            rare: ri,
            id: ps.id,
            temp_count: lo(t.temporary),
        };
        true
    }

    /// Merges `o` into the counters of `id` (see `Full::absorb`); false
    /// when memory for them ran out.
    pub fn absorb(&mut self, id: StackId, o: &Full, epoch_now: u64) -> bool {
        let Some(at) = self.position(id) else {
            return false;
        };
        let mut f = self.full(at);
        f.absorb(o, epoch_now);
        self.store(at, &f)
    }

    /// Marks every entry's bytes alive as added to its stack's shared
    /// counter (a thread that ends hands its pending part over).
    pub fn flush_all(&mut self) {
        for ps in self.vals.iter_mut() {
            let alive = ps.alive();
            let pending = alive - ps.flushed;
            if pending != 0 {
                stacks::entry(ps.id)
                    .alive
                    .fetch_add(pending, Ordering::Relaxed);
            }
            ps.flushed = alive;
        }
    }

    /// (id, position) of every entry, in order of first use.
    pub fn iter(&self) -> impl Iterator<Item = (StackId, usize)> + '_ {
        self.vals.iter().enumerate().map(|(at, ps)| (ps.id, at))
    }

    /// Fetches the entry at `at` into the cache ahead of its reading (an
    /// entry is two cache lines).
    #[inline]
    pub fn prefetch(&self, at: usize) {
        if let Some(ps) = self.vals.get(at) {
            let p = ps as *const PerStack as *const i8;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch reads nothing and cannot fault; the
            // addresses are of the entry.
            unsafe {
                use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(p);
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(core::mem::size_of::<PerStack>() - 1));
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = p;
        }
    }

    /// [`iter`](Self::iter) in the order of the ids (through the pages of
    /// the index, in order).
    pub fn iter_by_id(&self) -> impl Iterator<Item = (StackId, usize)> + '_ {
        self.pages.iter().enumerate().flat_map(|(p, page)| {
            page.iter().flat_map(move |pg| {
                pg.iter()
                    .enumerate()
                    .filter(|&(_, &at)| at != 0)
                    .map(move |(k, &at)| ((p * PAGE + k) as StackId, at as usize - 1))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids far apart take a page each; each finds its entry, in order of
    /// first use, and ids never met find none.
    #[test]
    fn ids_find_their_entries_across_pages() {
        let mut m = StackMap::new();
        let ids = [5, 3000, 1_000_000, 63, 64];
        for (k, &id) in ids.iter().enumerate() {
            assert!(m.get(id).is_some());
            assert_eq!(m.find(id), Some(k));
        }
        assert!(m.get(5).is_some(), "met again: no new entry");
        assert_eq!(m.len(), ids.len());
        for id in [0, 6, 2999, 999_999, 2_000_000] {
            assert_eq!(m.find(id), None);
        }
        assert_eq!(m.pages.iter().filter(|p| p.is_some()).count(), 4);
        let mut next = 0;
        assert_eq!(m.find_next(5, &mut next), Some(0));
        assert_eq!(m.find_next(3000, &mut next), Some(1));
        assert_eq!(m.iter().map(|(id, _)| id).collect::<Vec<_>>(), ids.to_vec());
    }
}
