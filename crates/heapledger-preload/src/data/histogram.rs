//! Histograms of a thread's requested sizes and realloc jumps (moved out
//! of `counters.rs`, unchanged).

use alloc::vec::Vec;

/// A vector of `n` copies of `v`, or None when memory ran out (where
/// `vec![v; n]` would abort the program).
pub(super) fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
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

impl Default for SizeHistogram {
    fn default() -> Self {
        Self::new()
    }
}

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

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

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

    /// Keys held.
    pub fn keys_held(&self) -> usize {
        self.len
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
