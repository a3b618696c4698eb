//! The clock: the CPU's tick counter, read around the calls whose duration
//! is measured (one in `CALL_SAMPLE`, or `CALL_SAMPLE_LEAN` on the lean
//! paths), and the system's clocks for the dump's times.

#[inline(always)]
pub fn ticks() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// One call in `CALL_SAMPLE` per thread, on average, has its duration
/// measured; the per-function times in the profile are scaled back up.
/// Reading the clock costs about 23 ns here, more than the rest of the
/// bookkeeping of an event. The calls timed are drawn at random, gaps of 1
/// to 2 * CALL_SAMPLE - 1 calls, so that each call is timed with the same
/// chance whatever its function and the pattern of the calls around it:
/// each function's estimate is unbiased. (Every 64th call, as before, timed
/// only frees where malloc and free alternate, and never malloc.)
const CALL_SAMPLE: u64 = 64;

/// The lean paths of `--sample-every`, where an unsampled call costs a few
/// nanoseconds, time one call in `CALL_SAMPLE_LEAN` of theirs instead.
pub const CALL_SAMPLE_LEAN: u64 = 1024;

/// Clock reads of one event whose duration is measured (one in
/// `CALL_SAMPLE`): `t0` before the real call, and the weight of the
/// duration; both 0 for the other events, which read no clock here.
pub struct Clock {
    pub t0: u64,
    scale: u64,
}

impl Clock {
    /// Starts the clock of one call. `calls` (`ThreadState::calls`) holds
    /// the calls left before the next timed one in its low 32 bits, and
    /// the state of a xorshift generator in its high 32 bits (0 in a new
    /// thread: a gap is drawn then, and its first call is not timed).
    #[inline(always)]
    pub fn start(calls: &mut u64) -> Clock {
        if (*calls as u32) > 1 {
            *calls -= 1;
            return Clock { t0: 0, scale: 0 };
        }
        let timed = *calls as u32 == 1;
        *calls = next_gap(*calls);
        if timed {
            Clock {
                t0: ticks(),
                scale: CALL_SAMPLE,
            }
        } else {
            Clock { t0: 0, scale: 0 }
        }
    }

    /// Estimated duration to add for this call.
    #[inline(always)]
    pub fn duration(&self) -> u64 {
        if self.scale != 0 {
            ticks().wrapping_sub(self.t0).wrapping_mul(self.scale)
        } else {
            0
        }
    }
}

/// The next gap between timed calls, uniform in 1..2 * CALL_SAMPLE (mean
/// CALL_SAMPLE), with the generator's new state above it (see
/// `Clock::start`).
#[inline(never)]
fn next_gap(calls: u64) -> u64 {
    let mut x = (calls >> 32) as u32;
    if x == 0 {
        // A new thread: seeded from the clock, which differs between
        // threads and runs.
        x = (ticks() as u32) | 1;
    }
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    let gap = 1 + x % (2 * CALL_SAMPLE as u32 - 1);
    ((x as u64) << 32) | gap as u64
}

/// Nanoseconds on the monotonic clock.
pub fn now_ns() -> u64 {
    ns(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds on clock `id`.
pub fn ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is writable.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
