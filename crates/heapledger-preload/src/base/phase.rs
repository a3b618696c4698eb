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

/// The parent's id as recording started, for `ppid` (set by `start`).
pub static START_PPID: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// Whether the calling process owns the recorder's memory (false in the
/// child of a `vfork`, which runs on its parent's memory until it execs).
/// Where a seccomp filter refuses `getpid` (-1, as a sandboxed program's
/// may), the process cannot be told from a `vfork` child, and is taken
/// for the owner: its profile is then written, where it was lost.
pub fn owns_memory() -> bool {
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() };
    pid <= 0 || OWNER_PID.load(Ordering::Relaxed) == pid
}

/// This process's id: `getpid`, or, where a seccomp filter refuses it,
/// the id of the process that started recording (see `owns_memory`).
pub fn pid() -> i32 {
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() };
    if pid > 0 {
        pid
    } else {
        OWNER_PID.load(Ordering::Relaxed)
    }
}

/// The parent's id: `getppid`, or, where a seccomp filter refuses it, the
/// parent's as recording started.
pub fn ppid() -> i32 {
    // SAFETY: no preconditions.
    let ppid = unsafe { libc::getppid() };
    if ppid >= 0 {
        ppid
    } else {
        START_PPID.load(Ordering::Relaxed)
    }
}

/// Whether the calling thread is the process's first (its id the
/// process's); false where a seccomp filter refuses either id.
pub fn main_thread() -> bool {
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: no preconditions.
    tid > 0 && tid == unsafe { libc::getpid() }
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
