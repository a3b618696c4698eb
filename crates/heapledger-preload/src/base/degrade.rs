//! Degrading when memory runs out, never aborting: first the recorder
//! stops taking stacks (allocations are charged to the empty stack), then
//! it stops recording (every hook forwards). Each step happens once per
//! process, says why and when, and is written to the profile
//! (`heapledger_wire::Degraded`).
//!
//! A step is taken where the recorder cannot get memory for its tables (a
//! stack, a thread's counters, the live blocks), and, to stop, where the
//! program's own allocation failed while the recorder held memory that
//! could serve it (`hooks::alloc` then gives the live-block tables back
//! and tries the call again): the program's allocations should fail as
//! they would alone, not earlier because the recorder holds the address
//! space they need.

use crate::base::clock::ticks;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
pub use heapledger_wire::DegradeCause as Cause;

/// 0: recording in full; `NO_STACKS`; `STOPPED`.
static LEVEL: AtomicU8 = AtomicU8::new(0);
const NO_STACKS: u8 = 1;
const STOPPED: u8 = 2;

static STACKS_CAUSE: AtomicU8 = AtomicU8::new(0);
static STACKS_TICKS: AtomicU64 = AtomicU64::new(0);
static STOPPED_CAUSE: AtomicU8 = AtomicU8::new(0);
static STOPPED_TICKS: AtomicU64 = AtomicU64::new(0);
/// Allocations charged to the empty stack because stacks stopped.
pub static WITHOUT_STACK: AtomicU64 = AtomicU64::new(0);
/// Calls forwarded unrecorded because recording stopped.
pub static NOT_RECORDED: AtomicU64 = AtomicU64::new(0);
/// Bytes of tables given back when recording stopped.
pub static RELEASED: AtomicU64 = AtomicU64::new(0);

/// Whether stacks are no longer taken (also once recording stopped).
#[inline(always)]
pub fn no_stacks() -> bool {
    LEVEL.load(Ordering::Relaxed) >= NO_STACKS
}

/// Whether recording stopped: every hook forwards.
#[inline(always)]
pub fn stopped() -> bool {
    LEVEL.load(Ordering::Relaxed) >= STOPPED
}

/// Stops taking stacks, for `cause`; the first call counts.
#[cold]
pub fn stop_stacks(cause: Cause) {
    if LEVEL
        .compare_exchange(0, NO_STACKS, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        STACKS_TICKS.store(ticks(), Ordering::Relaxed);
        STACKS_CAUSE.store(cause as u8, Ordering::Relaxed);
    }
}

/// Stops recording (and taking stacks), for `cause`. True for the call
/// that stopped it. Where stacks had not stopped before, they stop with
/// it, and the report names one step.
#[cold]
pub fn stop(cause: Cause) -> bool {
    let first = LEVEL.swap(STOPPED, Ordering::AcqRel) != STOPPED;
    if first {
        STOPPED_TICKS.store(ticks(), Ordering::Relaxed);
        STOPPED_CAUSE.store(cause as u8, Ordering::Relaxed);
    }
    first
}

/// What to write to the profile, with times relative to `start_ticks`;
/// None where recording never degraded.
pub fn report(start_ticks: u64) -> Option<heapledger_wire::Degraded> {
    if LEVEL.load(Ordering::Acquire) == 0 {
        return None;
    }
    let since = |t: &AtomicU64| match t.load(Ordering::Relaxed) {
        0 => 0,
        t => t.saturating_sub(start_ticks),
    };
    Some(heapledger_wire::Degraded {
        stacks_cause: STACKS_CAUSE.load(Ordering::Relaxed) as u64,
        stacks_ticks: since(&STACKS_TICKS),
        stopped_cause: STOPPED_CAUSE.load(Ordering::Relaxed) as u64,
        stopped_ticks: since(&STOPPED_TICKS),
        allocs_without_stack: WITHOUT_STACK.load(Ordering::Relaxed),
        calls_not_recorded: NOT_RECORDED.load(Ordering::Relaxed),
        released_bytes: RELEASED.load(Ordering::Relaxed),
    })
}
