//! The clock: the CPU's tick counter, read around the calls whose duration
//! is measured (one in `CALL_SAMPLE`, or `CALL_SAMPLE_LEAN` on the lean
//! paths), and the system's clocks for the dump's times.

#[inline(always)]
pub fn ticks() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// One call in `CALL_SAMPLE` per thread has its duration measured; the
/// per-function times in the profile are scaled back up (an unbiased
/// estimate). Reading the clock costs about 23 ns here, more than the rest
/// of the bookkeeping of an event.
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
    /// Starts the clock of one call; `calls` counts the thread's calls
    /// (`ThreadState::calls`).
    #[inline(always)]
    pub fn start(calls: &mut u64) -> Clock {
        *calls = calls.wrapping_add(1);
        let sampled = calls.is_multiple_of(CALL_SAMPLE);
        let t0 = if sampled { ticks() } else { 0 };
        Clock {
            t0,
            scale: if sampled { CALL_SAMPLE } else { 0 },
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
