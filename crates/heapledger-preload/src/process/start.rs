//! Starting the recorder: on the first event (or when the library is
//! loaded), once per process; every other thread waits for it.

use crate::base::clock;
use crate::base::phase::{get, set, State, OWNER_PID, START_NS, START_TICKS, STATE};
use crate::base::{arena, config, real};
use crate::data::{modules, sampler, stacks};
use crate::process::{dump, fork, signals, unhooked};
use crate::thread::{altstack, life, tls};
use core::sync::atomic::Ordering;

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
                life::lean_when_off(tls::tls());
                false
            }
            _ => false,
        };
    }
    // Before any thread can take a lean path (they wait for this start to
    // end): see `hooks::lean::free`.
    sampler::pin(real::boot_base() as u64, real::BOOT_SIZE as u64);
    let t = tls::tls();
    let was = t.in_hook.replace(true);
    real::resolve();
    config::load();
    let cfg = config::get();
    // SAFETY: no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    OWNER_PID.store(pid, Ordering::Relaxed);
    crate::base::phase::START_PPID.store(ppid, Ordering::Relaxed);
    // Only under `heapledger run` (which names the dump directory): a program
    // that passes LD_PRELOAD on to a child but trims the rest of its
    // environment must not get dumps in its working directory.
    let has_dir = cfg.dir.is_some();
    let on = has_dir && (cfg.follow || cfg.parent == 0 || ppid == cfg.parent);
    START_TICKS.store(clock::ticks(), Ordering::Relaxed);
    START_NS.store(clock::now_ns(), Ordering::Relaxed);
    if on {
        crate::process::timeline::start();
        arena::keep_reserve();
        real::note_allocator();
        unhooked::find_unhooked();
        stacks::init();
        crate::process::control::init();
        life::init_key();
        if cfg.stack_mode == heapledger_wire::StackMode::Dwarf {
            modules::refresh(true);
        }
        crate::data::only::init(cfg.only_lib);
        fork::install();
        signals::install();
        // The starting thread's, whose state may predate recording.
        altstack::give(t);
        dump::reserve();
    }
    set(if on { State::Recording } else { State::Off });
    tls::leave_recorder(t, was);
    on
}
