//! Saving the profile when a fatal signal ends the program.
//!
//! For each fatal signal whose action is the default at start-up, memtrail
//! installs a one-shot handler that writes the profile, restores the default
//! action and raises the signal again, so the program still dies of it (same
//! status, same core dump). The program never sees these handlers: the
//! `sigaction`/`signal` hooks report the default action for them, and a
//! program that installs its own handler simply replaces ours. SIGINT is
//! left alone only if the program changes it; SIGKILL cannot be caught.

use crate::{dump, real};
use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};

const FATAL: [c_int; 11] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGPIPE,
    libc::SIGXCPU,
];

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
    dump::write("signal");
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

pub fn install() {
    let Some(f) = real::sigaction() else { return };
    for &sig in &FATAL {
        // SAFETY: querying and setting actions with valid structs.
        unsafe {
            let mut old: libc::sigaction = core::mem::zeroed();
            if f(sig, core::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut act: libc::sigaction = core::mem::zeroed();
            act.sa_sigaction = on_fatal as extern "C" fn(c_int) as usize;
            act.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut act.sa_mask);
            OURS.fetch_or(1 << sig, Ordering::Relaxed);
            if f(sig, &act, core::ptr::null_mut()) != 0 {
                forget(sig);
            }
        }
    }
}
