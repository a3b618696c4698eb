//! Saving the profile when a fatal signal ends the program.
//!
//! For each fatal signal whose action is the default at start-up, heapledger
//! installs a one-shot handler that writes the profile, restores the default
//! action and raises the signal again, so the program still dies of it (same
//! status, same core dump). The program never sees these handlers: the
//! `sigaction`/`signal` hooks report the default action for them, and a
//! program that installs its own handler (or ignores the signal) replaces
//! ours. A program that sets the default action back (the usual clean-up
//! and re-raise) gets heapledger's handler, which does the default action
//! after saving. SIGKILL cannot be caught.
//!
//! A signal can arrive while its thread is inside the recorder, holding its
//! locks, where writing the profile would deadlock. A fault there (SIGSEGV
//! in the recorder) cannot wait, and the process dies without a profile,
//! saying so. A signal sent from outside (`timeout`'s SIGTERM, Ctrl-C) is
//! held instead: the thread notes it and returns to the recorder, which
//! acts on it as it leaves, microseconds later (`deferred`). Before, such a
//! signal cost the whole profile as often as the program was inside the
//! recorder: five times in six for `timeout` on a malloc loop.

use crate::base::{phase, real};
use crate::process::{dump, end};
use crate::thread::tls;
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

/// Signals that end the program from outside (or from a timer), whose
/// default action is to terminate it.
const TERMINATING: [c_int; 12] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGHUP,
    libc::SIGPIPE,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGUSR1,
    libc::SIGUSR2,
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
    // The recorder's locks are only held while its thread is inside it; a
    // signal that interrupted this thread there cannot write the dump
    // without deadlocking on them.
    let t = tls::tls();
    if t.in_hook.get() {
        if TERMINATING.contains(&sig) {
            // Held until the thread leaves the recorder. The handler stays
            // (it is installed again, as it was), so that the same signal
            // again meanwhile is held too.
            t.pending_signal.set(sig as u8);
            install_one(sig);
            return;
        }
        forget(sig);
        let msg =
            b"heapledger: a fatal signal arrived inside the recorder; no profile for this process\n";
        // SAFETY: writing a static buffer to fd 2.
        unsafe { libc::write(2, msg.as_ptr() as *const _, msg.len()) };
    } else {
        forget(sig);
        end::signalled(sig);
        dump::write("signal");
    }
    die_of(sig);
}

/// Acts on a terminating signal held while this thread was inside the
/// recorder (see `on_fatal`): writes the profile and dies of the signal,
/// unless the program has since taken the signal over.
#[cold]
pub fn deferred() {
    let t = tls::tls();
    let sig = t.pending_signal.replace(0) as c_int;
    if sig == 0 {
        return;
    }
    if !ours(sig) {
        // Another thread gave it a handler (or SIG_IGN) meanwhile: the
        // signal goes to that.
        // SAFETY: no preconditions.
        unsafe { libc::raise(sig) };
        return;
    }
    forget(sig);
    end::signalled(sig);
    dump::write("signal");
    die_of(sig);
}

/// Dies of `sig` with its default action (core dump and status included).
fn die_of(sig: c_int) {
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

/// Whether `sig` ends the program by default and heapledger saves the profile
/// when it does (while recording).
pub fn is_fatal(sig: c_int) -> bool {
    fatal().any(|s| s == sig) && phase::get() == phase::State::Recording
}

/// Installs heapledger's handler for `sig` (whose action is, or is being set
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
        // same one again: `timeout` signals its whole group, and `heapledger
        // run` passes its own on) waits: it would end the process with the
        // dump cut short. The handler then dies of the first signal.
        // SA_ONSTACK: on the thread's alternate stack (`altstack.rs`),
        // where there is room after a stack overflow.
        // No SA_RESETHAND for those: the kernel resets the action to the
        // default as it takes the signal, but blocks the handler's mask
        // only once the handler's frame is set up; a second SIGTERM sent
        // in between (`timeout` signals the whole group right after
        // `heapledger run` passed one on) found the default action and
        // killed the process with no profile, 1 time in 40. The handler
        // puts the default back itself before it dies (`die_of`). A fault
        // (SIGSEGV...) keeps it: a second one inside the handler must kill.
        act.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
        if !TERMINATING.contains(&sig) {
            act.sa_flags |= libc::SA_RESETHAND;
        }
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
