//! A thread's scatter counts (MALT's `scatter`): allocations by time and
//! size, freed blocks by size and lifetime, each in cells of powers of two
//! (sizes, lifetimes) or of a run-long linear time axis, kept in the
//! thread's bounded histograms (`data::histogram::Histogram`) and summed
//! into the dump.
//!
//! Every event of a thread's first `HEAD` is counted; after that, one in 16
//! at random (the gaps drawn as the lifetimes' are), counted 16 times: a
//! hash insert for every event would cost a program of many stacks more
//! than the rest of its bookkeeping, while the picks keep each cell an
//! unbiased estimate.
//!
//! Time cells: an allocation `dt` ticks after the start lies in cell
//! `dt >> s` with `s` the smallest shift (at least `MIN_SHIFT`) that puts
//! it below 64; the key keeps `s`, so cells of any fineness merge into the
//! coarsest one the run needed when the profile is made.

use super::state::ThreadState;

/// Events of each thread counted one by one before the picks.
pub const HEAD: u32 = 4096;
/// The finest time cell: 2^MIN_SHIFT ticks (about 0.4 ms at 2.5 GHz).
pub const MIN_SHIFT: u32 = 20;

/// The power-of-two cell of `v`: 0 for 0, k for 2^(k-1) <= v < 2^k.
#[inline(always)]
pub fn log_cell(v: u64) -> u64 {
    (64 - v.leading_zeros()) as u64
}

/// The time key of an allocation `dt` ticks after the start: the shift in
/// the high byte, the cell below.
#[inline(always)]
pub fn time_key(dt: u64) -> u64 {
    let s = (64 - dt.leading_zeros()).saturating_sub(6).max(MIN_SHIFT);
    ((s as u64) << 8) | (dt >> s)
}

impl ThreadState {
    /// Whether this event is counted in the scatter, and its weight.
    #[inline(always)]
    fn scatter_weight(&mut self) -> u64 {
        if self.scatter_head != 0 {
            self.scatter_head -= 1;
            return 1;
        }
        if self.scatter_gap != 0 {
            self.scatter_gap -= 1;
            return 0;
        }
        self.scatter_gap = self.next_gap16();
        16
    }

    /// An allocation of `size` bytes, at `now` ticks (0: not read), that
    /// stands for `cw` allocations.
    #[inline(always)]
    pub fn scatter_alloc(&mut self, size: u64, now: u64, cw: u64) {
        let w = self.scatter_weight();
        if w != 0 {
            self.scatter_alloc_slow(size, now, cw * w);
        }
    }

    #[inline(never)]
    fn scatter_alloc_slow(&mut self, size: u64, now: u64, n: u64) {
        let now = if now != 0 {
            now
        } else {
            crate::base::clock::ticks()
        };
        let start = crate::base::phase::START_TICKS.load(core::sync::atomic::Ordering::Relaxed);
        self.size_time
            .add((time_key(now.saturating_sub(start)), log_cell(size)), n);
    }

    /// A freed block of `size` bytes that lived `lifetime` ticks, standing
    /// for `lw` blocks.
    #[inline(always)]
    pub fn scatter_free(&mut self, size: u64, lifetime: u64, lw: u64) {
        let w = self.scatter_weight();
        if w != 0 {
            self.life_size
                .add((log_cell(size), log_cell(lifetime)), lw * w);
        }
    }
}
