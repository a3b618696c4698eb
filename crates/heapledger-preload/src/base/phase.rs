//! The recorder's phase: not started, starting, recording, off (a child
//! that is not followed), finished (the profile was written). Moved on by
//! `process::start` and the dump; read by every layer above.

use core::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum State {
    Uninit = 0,
    Starting = 1,
    Recording = 2,
    Off = 3,
    Finished = 4,
}

pub static STATE: AtomicU8 = AtomicU8::new(State::Uninit as u8);
pub static START_TICKS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
pub static START_NS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
/// The process the recorder's memory belongs to (updated in a forked child).
/// A `vfork` child shares that memory but has another pid, and must leave
/// it alone.
pub static OWNER_PID: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// Whether the calling process owns the recorder's memory (false in the
/// child of a `vfork`, which runs on its parent's memory until it execs).
pub fn owns_memory() -> bool {
    // SAFETY: no preconditions.
    OWNER_PID.load(Ordering::Relaxed) == unsafe { libc::getpid() }
}

pub fn get() -> State {
    match STATE.load(Ordering::Acquire) {
        0 => State::Uninit,
        1 => State::Starting,
        2 => State::Recording,
        3 => State::Off,
        _ => State::Finished,
    }
}

pub fn set(s: State) {
    STATE.store(s as u8, Ordering::Release);
}
