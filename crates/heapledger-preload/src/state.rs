//! The recorder's life: not started, starting, recording, off (a child
//! that is not followed), finished (the profile was written).

use crate::{config, fork, modules, real, signals, stacks, thread};
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

static STATE: AtomicU8 = AtomicU8::new(State::Uninit as u8);
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

/// Whether events are recorded now; starts the recorder on first use.
#[inline(always)]
pub fn ready() -> bool {
    if STATE.load(Ordering::Relaxed) == State::Recording as u8 {
        return true;
    }
    start()
}

#[cold]
fn start() -> bool {
    if STATE
        .compare_exchange(
            State::Uninit as u8,
            State::Starting as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // Another thread is starting: wait for it (the starting thread's own
        // nested calls never get here, they are stopped by the in-hook flag).
        while get() == State::Starting {
            core::hint::spin_loop();
        }
        return match get() {
            State::Recording => true,
            State::Off => {
                thread::lean_when_off(thread::tls());
                false
            }
            _ => false,
        };
    }
    // Before any thread can take a lean path (they wait for this start to
    // end): see `hooks::free`.
    crate::sampler::pin(real::boot_base() as u64, real::BOOT_SIZE as u64);
    let t = thread::tls();
    let was = t.in_hook.replace(true);
    real::resolve();
    config::load();
    let cfg = config::get();
    // SAFETY: no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    OWNER_PID.store(pid, Ordering::Relaxed);
    // Only under `heapledger run` (which names the dump directory): a program
    // that passes LD_PRELOAD on to a child but trims the rest of its
    // environment must not get dumps in its working directory.
    let has_dir = cfg.dir.is_some();
    let on = has_dir && (cfg.follow || cfg.parent == 0 || ppid == cfg.parent);
    START_TICKS.store(crate::hooks::ticks(), Ordering::Relaxed);
    START_NS.store(crate::dump::now_ns(), Ordering::Relaxed);
    if on {
        crate::hooks::find_unhooked();
        stacks::init();
        thread::init_key();
        if cfg.stack_mode == heapledger_wire::StackMode::Dwarf {
            modules::refresh(true);
        }
        fork::install();
        signals::install();
        // The starting thread's, whose state may predate recording.
        crate::altstack::give(t);
        crate::dump::reserve();
    }
    set(if on { State::Recording } else { State::Off });
    thread::leave_recorder(t, was);
    on
}
