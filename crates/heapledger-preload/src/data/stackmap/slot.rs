//! The per-event side of a thread's counters of a stack: an entry found
//! by `StackMap::get`, with the map's rare records for what overflows it.

use super::{PerStack, Rare, BIG};
use crate::base::degrade;
use alloc::vec::Vec;

/// `c += w` on a 32-bit count; true where the high part must take a carry
/// (`hi_of`).
#[inline(always)]
fn bump(c: &mut u32, w: u64) -> bool {
    let (n, o) = c.overflowing_add(w as u32);
    *c = n;
    o | (w >> 32 != 0)
}

/// What goes to the high part when `bump(c, w)` said so (`c` bumped).
#[inline(always)]
fn hi_of(c: u32, w: u64) -> u64 {
    // The low add wrapped when the new low part is below the added one.
    (w >> 32) + ((c < w as u32) as u64)
}

/// Takes `v` into a 32-bit range; true where it is `BIG` or more (its
/// range is then the rare record's).
#[inline(always)]
fn range(min: &mut u32, max: &mut u32, v: u64) -> bool {
    if v >= BIG as u64 {
        *max = BIG;
        return true;
    }
    let v = v as u32;
    *min = (*min).min(v);
    *max = (*max).max(v);
    false
}

/// An entry found or made by `StackMap::get`, with the map's rare records.
pub struct Slot<'a> {
    pub ps: &'a mut PerStack,
    pub(super) rare: &'a mut Vec<Rare>,
}

impl Slot<'_> {
    /// The entry's rare record, made on first use; None (the count is
    /// lost, and recording stops) when memory ran out.
    #[cold]
    #[inline(never)]
    fn rare(&mut self) -> Option<&mut Rare> {
        if self.ps.rare == 0 {
            if self.rare.try_reserve(1).is_err() {
                degrade::stop(degrade::Cause::RecorderMemory);
                return None;
            }
            self.rare.push(Rare::new());
            self.ps.rare = self.rare.len() as u32;
        }
        self.rare.get_mut(self.ps.rare as usize - 1)
    }

    /// Whether fewer than `n` blocks were allocated here.
    #[inline(always)]
    pub fn allocs_below(&self, n: u64) -> bool {
        let hi = match self.ps.rare {
            0 => 0,
            r => self.rare[r as usize - 1].alloc_hi,
        };
        (self.ps.alloc_count as u64 | hi) < n
    }

    /// `cw` blocks of `size` bytes allocated, weighing `bw` bytes.
    #[inline(always)]
    pub fn add_alloc(&mut self, size: u64, cw: u64, bw: u64) {
        let ps = &mut *self.ps;
        ps.alloc_sum = ps.alloc_sum.wrapping_add(bw);
        let big = range(&mut ps.alloc_min, &mut ps.alloc_max, size);
        if bump(&mut ps.alloc_count, cw) | big {
            self.alloc_spill(size, cw, big);
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_spill(&mut self, size: u64, cw: u64, big: bool) {
        let c = self.ps.alloc_count;
        let Some(r) = self.rare() else { return };
        r.alloc_hi += hi_of(c, cw) << 32;
        if big {
            r.alloc_big = (r.alloc_big.0.min(size), r.alloc_big.1.max(size));
        }
    }

    /// `cw` blocks of `size` bytes freed, weighing `bw` bytes.
    #[inline(always)]
    pub fn add_free(&mut self, size: u64, cw: u64, bw: u64) {
        let ps = &mut *self.ps;
        ps.free_sum = ps.free_sum.wrapping_add(bw);
        let big = range(&mut ps.free_min, &mut ps.free_max, size);
        if bump(&mut ps.free_count, cw) | big {
            self.free_spill(size, cw, big);
        }
    }

    #[cold]
    #[inline(never)]
    fn free_spill(&mut self, size: u64, cw: u64, big: bool) {
        let c = self.ps.free_count;
        let Some(r) = self.rare() else { return };
        r.free_hi += hi_of(c, cw) << 32;
        if big {
            r.free_big = (r.free_big.0.min(size), r.free_big.1.max(size));
        }
    }

    /// A lifetime `lt` standing for `w` blocks whose lifetimes sum to `sum`.
    #[inline(always)]
    pub fn add_lifetime(&mut self, lt: u64, w: u64, sum: u64) {
        let ps = &mut *self.ps;
        ps.life_min = ps.life_min.min(lt);
        ps.life_max = ps.life_max.max(lt);
        ps.life_sum = ps.life_sum.wrapping_add(sum);
        if bump(&mut ps.life_count, w) {
            let c = ps.life_count;
            if let Some(r) = self.rare() {
                r.life_hi += hi_of(c, w) << 32;
            }
        }
    }

    /// `cw` temporary blocks (`Totals::temporary`).
    #[inline(always)]
    pub fn add_temporary(&mut self, cw: u64) {
        if bump(&mut self.ps.temp_count, cw) {
            let c = self.ps.temp_count;
            if let Some(r) = self.rare() {
                r.temp_hi += hi_of(c, cw) << 32;
            }
        }
    }

    #[cold]
    pub fn add_zeros(&mut self, n: u64) {
        if let Some(r) = self.rare() {
            r.zeros += n;
        }
    }

    #[cold]
    pub fn add_realloc(&mut self, delta: i64) {
        if let Some(r) = self.rare() {
            r.realloc_count += 1;
            r.realloc_delta += delta;
        }
    }

    #[cold]
    pub fn add_map(&mut self, len: u64, unmap: bool) {
        if let Some(r) = self.rare() {
            match unmap {
                true => r.munmap.add(len),
                false => r.mmap.add(len),
            }
        }
    }
}
