//! Saving the profile when a fatal signal ends the program.
//!
//! For each fatal signal whose action is the default at start-up, memtrail
//! installs a one-shot handler that writes the profile, restores the default
//! action and raises the signal again, so the program still dies of it (same
//! status, same core dump). The program never sees these handlers: the
//! `sigaction`/`signal` hooks report the default action for them, and a
//! program that installs its own handler (or ignores the signal) replaces
//! ours. A program that sets the default action back (the usual clean-up
//! and re-raise) gets memtrail's handler, which does the default action
//! after saving. SIGKILL cannot be caught.

use crate::{dump, real};
use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};

/// Faults and aborts: the program's own doing.
const FAULTS: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];

/// Signals that end the program from outside.
const TERMINATING: [c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGPIPE,
    libc::SIGXCPU,
];

fn fatal() -> impl Iterator<Item = c_int> {
    FAULTS.into_iter().chain(TERMINATING)
}

/// Bit n set: our handler is installed for signal n and the program has not
/// replaced it.
static OURS: AtomicU64 = AtomicU64::new(0);

pub fn ours(sig: c_int) -> bool {
    (0..64).contains(&sig) && OURS.load(Ordering::Relaxed) & (1 << sig) != 0
}

pub fn forget(sig: c_int) {
    if (0..64).contains(&sig) {
        OURS.fetch_and(!(1u64 << sig), Ordering::Relaxed);
    }
}

extern "C" fn on_fatal(sig: c_int) {
    forget(sig);
    // The recorder's locks are only held while its thread is inside a hook;
    // a signal that interrupted this thread there cannot write the dump
    // without deadlocking on them: the program then dies without a profile
    // (and says so), as it would without memtrail.
    let inside = crate::thread::tls().in_hook.get();
    if inside {
        let msg =
            b"memtrail: a fatal signal arrived inside the recorder; no profile for this process\n";
        // SAFETY: writing a static buffer to fd 2.
        unsafe { libc::write(2, msg.as_ptr() as *const _, msg.len()) };
    } else {
        dump::write("signal");
    }
    if let Some(f) = real::sigaction() {
        // SAFETY: a zeroed sigaction with SIG_DFL is valid.
        unsafe {
            let mut dfl: libc::sigaction = core::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            f(sig, &dfl, core::ptr::null_mut());
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
            libc::raise(sig);
        }
    }
}

/// Whether `sig` ends the program by default and memtrail saves the profile
/// when it does (while recording).
pub fn is_fatal(sig: c_int) -> bool {
    fatal().any(|s| s == sig) && crate::state::get() == crate::state::State::Recording
}

/// Installs memtrail's handler for `sig` (whose action is, or is being set
/// to, the default).
pub fn install_one(sig: c_int) -> bool {
    let Some(f) = real::sigaction() else {
        return false;
    };
    // SAFETY: setting an action with a valid struct.
    unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = on_fatal as extern "C" fn(c_int) as usize;
        // While the profile is written, a second termination signal (the
        // same one again: `timeout` signals its whole group, and `memtrail
        // run` passes its own on) waits: it would end the process with the
        // dump cut short. The handler then dies of the first signal.
        act.sa_flags = libc::SA_RESETHAND;
        libc::sigemptyset(&mut act.sa_mask);
        for s in TERMINATING {
            libc::sigaddset(&mut act.sa_mask, s);
        }
        OURS.fetch_or(1 << sig, Ordering::Relaxed);
        if f(sig, &act, core::ptr::null_mut()) != 0 {
            forget(sig);
            return false;
        }
    }
    true
}

pub fn install() {
    let Some(f) = real::sigaction() else { return };
    for sig in fatal() {
        // SAFETY: querying an action into a valid struct.
        let dfl = unsafe {
            let mut old: libc::sigaction = core::mem::zeroed();
            f(sig, core::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_DFL
        };
        if dfl {
            install_one(sig);
        }
    }
}
