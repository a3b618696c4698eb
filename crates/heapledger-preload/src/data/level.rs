//! The process's requested bytes alive (its level) and their peak, exact
//! over one order of every thread's events.
//!
//! Each allocation and free moves the level by its size. The peak is the
//! highest level in the order in which the moves take effect, and what each
//! stack held at the peak is the sum of its moves up to the one that set
//! the peak. So each move must know whether it came before or after the
//! last peak: the level and the peak share one 16-byte word, changed
//! together by one `lock cmpxchg16b`, which puts every move in one order
//! and tells each the peak before and after it (`Move`). Each stack entry
//! then keeps its bytes as of the last peak by the rule of
//! `counters::PerStack::add_alive`, and the entries' shares sum exactly to
//! the peak.
//!
//! Before, each thread kept up to 64 KiB of moves to itself and flushed
//! them when they could raise the peak: cheaper with threads, but a peak
//! could miss other threads' parts, and the shares at the peak did not sum
//! to it (a 4-thread program: 2.7 to 3.6 KB of shares for a 10.6 KB peak).
//! While the process has one thread, plain loads and stores do the same
//! work at no extra cost (see `sync::single_threaded`).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::base::sync::RawSpin;

/// The level (as an i64) and the peak, in one aligned 16-byte word, alone
/// in its 128 bytes (two cache lines, as the adjacent-line prefetcher
/// pairs them): with threads, the word's line passes from core to core on
/// every event, and the flags every hook reads (`phase::STATE`,
/// `degrade::LEVEL`) sat beside it, so that each of those reads missed too.
#[repr(C, align(128))]
struct Word(UnsafeCell<[u64; 2]>);

const _: () = assert!(core::mem::size_of::<Word>() == 128);

// SAFETY: every access goes through `apply`, which uses plain accesses
// only while one thread exists, and otherwise `cmpxchg16b` (with plain
// reads of a guess that it validates) or, on a CPU without it, a lock.
unsafe impl Sync for Word {}

static WORD: Word = Word(UnsafeCell::new([0, 0]));

/// What one move did to the peak: the peak before and after it (equal
/// unless this move set a new peak), and the level after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub peak_before: u64,
    pub peak_after: u64,
    pub level: i64,
}

impl Move {
    #[inline(always)]
    pub fn set_peak(&self) -> bool {
        self.peak_after != self.peak_before
    }
}

/// Moves the level by `delta` bytes.
#[inline(always)]
pub fn apply(delta: i64) -> Move {
    let p = WORD.0.get().cast::<u64>();
    if crate::base::sync::single_threaded() {
        // SAFETY: one thread: nothing else reads or writes the word (a
        // signal handler's move runs whole between two of ours).
        unsafe {
            let level = (*p as i64).wrapping_add(delta);
            *p = level as u64;
            let peak = *p.add(1);
            let after = if level > peak as i64 {
                level as u64
            } else {
                peak
            };
            *p.add(1) = after;
            return Move {
                peak_before: peak,
                peak_after: after,
                level,
            };
        }
    }
    if has_cx16() {
        apply_shared(p, delta)
    } else {
        apply_locked(p, delta)
    }
}

/// Whether the CPU has `cmpxchg16b` (every x86-64 CPU but the first
/// generation): asked once.
#[inline(always)]
fn has_cx16() -> bool {
    match CX16.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // cpuid leaf 1 exists on every x86-64 CPU.
            let ecx = core::arch::x86_64::__cpuid(1).ecx;
            let yes = ecx & (1 << 13) != 0;
            CX16.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

/// 0: not asked yet, 1: `cmpxchg16b` is there, 2: it is not.
static CX16: AtomicU8 = AtomicU8::new(0);
/// Orders the moves where `cmpxchg16b` is missing.
pub(crate) static LOCK: RawSpin = RawSpin::new();

#[cold]
fn apply_locked(p: *mut u64, delta: i64) -> Move {
    LOCK.lock();
    // SAFETY: every thread changes the word under LOCK on such a CPU.
    let m = unsafe {
        let level = (*p as i64).wrapping_add(delta);
        let peak = *p.add(1);
        let after = if level > peak as i64 {
            level as u64
        } else {
            peak
        };
        *p = level as u64;
        *p.add(1) = after;
        Move {
            peak_before: peak,
            peak_after: after,
            level,
        }
    };
    // SAFETY: taken above by this thread.
    unsafe { LOCK.unlock() };
    m
}

#[inline(always)]
fn apply_shared(p: *mut u64, delta: i64) -> Move {
    // A first guess of the word; cmpxchg16b says what it really holds.
    // SAFETY: reads of an aligned word that other threads change only
    // with cmpxchg16b; a torn read fails the exchange and is retried.
    let mut old = unsafe {
        [
            core::ptr::read_volatile(p),
            core::ptr::read_volatile(p.add(1)),
        ]
    };
    loop {
        let level = (old[0] as i64).wrapping_add(delta);
        let peak = old[1];
        let after = if level > peak as i64 {
            level as u64
        } else {
            peak
        };
        // SAFETY: p is the 16-byte aligned word.
        match unsafe { cas16(p, old, [level as u64, after]) } {
            Ok(()) => {
                return Move {
                    peak_before: peak,
                    peak_after: after,
                    level,
                }
            }
            Err(now) => old = now,
        }
    }
}

/// `lock cmpxchg16b`: replaces `*p` (16 bytes) by `new` if it holds `old`;
/// otherwise returns what it holds.
///
/// # Safety
/// `p` is 16-byte aligned and valid for reads and writes.
#[inline(always)]
unsafe fn cas16(p: *mut u64, old: [u64; 2], new: [u64; 2]) -> Result<(), [u64; 2]> {
    let (mut lo, mut hi) = (old[0], old[1]);
    let ok: u8;
    // SAFETY: rbx is reserved by the compiler, so the new low word goes
    // through another register and is swapped in and out around the
    // instruction; the caller checked that the CPU has cmpxchg16b.
    unsafe {
        core::arch::asm!(
            "xchg {nlo}, rbx",
            "lock cmpxchg16b xmmword ptr [{p}]",
            "sete {ok}",
            "mov rbx, {nlo}",
            p = in(reg) p,
            nlo = inout(reg) new[0] => _,
            in("rcx") new[1],
            inout("rax") lo,
            inout("rdx") hi,
            ok = out(reg_byte) ok,
            options(nostack),
        );
    }
    if ok != 0 {
        Ok(())
    } else {
        Err([lo, hi])
    }
}

/// The level now, read without changing the word: for the recorder's own
/// thread, which must not write it while the program's threads move it
/// with plain stores (one thread, `sync::single_threaded`).
pub fn peek() -> i64 {
    // SAFETY: an aligned word; a read racing with a move sees the level
    // before or after it.
    unsafe { core::ptr::read_volatile(WORD.0.get().cast::<i64>()) }
}

/// The level and the peak, read without changing the word (each as of
/// some moment; the recorder's thread and the API's statistics).
pub fn peek_both() -> (i64, u64) {
    let p = WORD.0.get().cast::<u64>();
    // SAFETY: aligned words; a read racing with a move sees each before or
    // after it.
    unsafe {
        (
            core::ptr::read_volatile(p) as i64,
            core::ptr::read_volatile(p.add(1)),
        )
    }
}

/// The level and the peak now.
pub fn read() -> (i64, u64) {
    let m = apply(0);
    (m.level, m.peak_after)
}

/// Level and peak back to 0: in a forked child, which counts from the fork
/// (one thread, so plain stores).
pub fn reset() {
    // SAFETY: the child has one thread, outside any hook.
    unsafe { *WORD.0.get() = [0, 0] };
}
