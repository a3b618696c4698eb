//! Sampling by bytes (`--sample-every BYTES`), as jemalloc, tcmalloc and
//! heapprofd do: sample points fall on the stream of allocated bytes as a
//! Poisson process of mean gap S; an allocation is sampled when at least one
//! point falls in it, which happens with probability p = 1 - e^(-n/S). A
//! sampled allocation of n bytes stands for 1/p allocations and n/p bytes,
//! so every per-stack sum is an unbiased estimate. An unsampled allocation
//! costs one subtraction.
//!
//! A free must find out cheaply whether its block was sampled: a counting
//! filter over addresses (one byte per bucket, shared, rarely written) says
//! "certainly not" for almost every unsampled block without taking a lock.

use core::cell::Cell;
use core::sync::atomic::{AtomicU8, Ordering};

/// The random part of a thread's sampler. The bytes left before the next
/// sample point live in the thread's TLS block (`Tls::left`), where the
/// lean paths in `hooks` count them down.
pub struct Sampler {
    rng: u64,
    mean: f64,
}

impl Sampler {
    pub fn new(mean: u64, seed: u64) -> Sampler {
        Sampler {
            rng: seed | 1,
            mean: mean as f64,
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn gap(&mut self) -> i64 {
        (-self.uniform().ln() * self.mean).min(i64::MAX as f64 / 2.0) as i64 + 1
    }

    /// The first gap of a thread.
    pub fn first_gap(&mut self) -> i64 {
        self.gap()
    }

    /// Whether an allocation of `size` bytes is sampled; if so, its count
    /// weight (1/p, rounded without bias). `left`, `seg` and `lean_bytes`
    /// are the thread's countdown, kept in its TLS block (`Tls::left`,
    /// `Tls::seg`, `Tls::lean_bytes`) for the lean paths.
    #[inline(always)]
    pub fn take(
        &mut self,
        left: &Cell<i64>,
        seg: &Cell<i64>,
        lean_bytes: &Cell<u64>,
        size: u64,
    ) -> Option<u64> {
        // A zero-byte request holds no sample point (its weight would be
        // infinite); it is counted in the per-function totals only.
        if size == 0 {
            return None;
        }
        let before = left.get();
        let l = before - size as i64;
        if l > 0 {
            left.set(l);
            // Bytes of a full hook: not the lean path's (see `Tls::seg`).
            seg.set(seg.get() - size as i64);
            return None;
        }
        // A sample point: what the lean path took since the last one is
        // kept, and both restart from the new gap.
        let lean = seg.get().wrapping_sub(before).max(0) as u64;
        lean_bytes.set(lean_bytes.get().wrapping_add(lean));
        let gap = self.gap();
        left.set(gap);
        seg.set(gap);
        let w = 1.0 / probability(size, self.mean);
        let whole = w.floor();
        let extra = (self.uniform() <= w - whole) as u64;
        Some(whole as u64 + extra)
    }
}

fn probability(size: u64, mean: f64) -> f64 {
    (1.0 - (-(size as f64) / mean).exp()).max(f64::MIN_POSITIVE)
}

/// Estimated bytes a sampled block of `size` stands for (a function of the
/// size alone, so a free computes the same value as the allocation did).
pub fn bytes_weight(size: u64, mean: u64) -> u64 {
    (size as f64 / probability(size, mean as f64)).round() as u64
}

pub const FILTER_BITS: u32 = 20;
pub static FILTER: [AtomicU8; 1 << FILTER_BITS] = [const { AtomicU8::new(0) }; 1 << FILTER_BITS];

/// One bucket per 4 KiB page, so that the filter is read with the heap's
/// own locality rather than a cache miss per free. Pages 4 GiB apart share
/// a bucket: a free there may take the full hook for nothing (it finds no
/// block and counts the call as the lean path would). Folding the higher
/// bits in took 4 of the lean `free`'s 19 instructions, and a program's
/// heap rarely spans 4 GiB. `free`'s lean path computes the same in
/// assembly (`hooks::lean::free`).
#[inline(always)]
fn bucket(addr: u64) -> usize {
    ((addr >> 12) & ((1 << FILTER_BITS) - 1)) as usize
}

/// A sampled block is alive at `addr`.
pub fn mark(addr: u64) {
    let b = &FILTER[bucket(addr)];
    // Saturate at 255: such a bucket stays "maybe" for good.
    let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        (v < 255).then_some(v + 1)
    });
}

/// The sampled block at `addr` was freed.
pub fn unmark(addr: u64) {
    let b = &FILTER[bucket(addr)];
    let _ = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        (v > 0 && v < 255).then(|| v - 1)
    });
}

/// Makes every page of `[lo, lo + len)` look as if it may hold a sampled
/// block, for good (255 is a bucket that `mark` and `unmark` leave as it
/// is): a `free` of a block there always takes the full hook. For the boot
/// buffer (`real::BOOT`), so that the lean `free` needs no check of its own
/// for the boot blocks, which must never reach the real `free`.
pub fn pin(lo: u64, len: u64) {
    let mut page = lo & !4095;
    while page < lo + len {
        FILTER[bucket(page)].store(255, Ordering::Relaxed);
        page += 4096;
    }
}

/// False when no sampled block can be at `addr`.
#[inline(always)]
pub fn maybe(addr: u64) -> bool {
    FILTER[bucket(addr)].load(Ordering::Relaxed) != 0
}
