//! How the process ends, for its dump: the status given to `exit` (or
//! returned from `main`, which glibc passes to `exit`) or `_exit`, or the
//! signal that kills it. `heapledger run` learns the main process's from
//! `waitpid`; a child's reaches the profile only through its dump.
//!
//! `exit`'s status is seen by an `on_exit` handler, registered when `main`
//! starts (`hooks::main`): registered then, it runs before the loader's
//! destructors, which write the dump. `_exit` and the fatal signals are
//! hooked (`hooks::signal_exit`, `signals.rs`).

use crate::base::phase;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, Ordering};
use heapledger_wire::Ending;

/// 0: not seen; else (kind << 32) | value, as `Ending::to_pair`.
static HOW: AtomicU64 = AtomicU64::new(0);

fn note(how: Ending) {
    // A vfork child runs on its parent's memory: its `_exit` is not the
    // parent's.
    if phase::owns_memory() {
        let (kind, value) = how.to_pair();
        HOW.store(kind << 32 | value, Ordering::Relaxed);
    }
}

pub fn exited(code: c_int) {
    // As the parent's `waitpid` would see it.
    note(Ending::Exited(code & 0xff));
}

pub fn signalled(sig: c_int) {
    note(Ending::Signal(sig));
}

/// How the process ended, if seen.
pub fn get() -> Option<Ending> {
    let v = HOW.load(Ordering::Relaxed);
    Ending::from_pair(v >> 32, v & 0xffff_ffff)
}

/// In a forked child: its parent's ending (an `exit` handler that forked)
/// is not its own.
pub fn forked() {
    HOW.store(0, Ordering::Relaxed);
}

extern "C" {
    fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

extern "C" fn at_exit(status: c_int, _: *mut c_void) {
    exited(status);
}

/// Registers the handler that sees `exit`'s status (once `main` starts).
pub fn watch_exit() {
    // SAFETY: a handler with on_exit's signature, valid for the process's life.
    unsafe { on_exit(at_exit, core::ptr::null_mut()) };
}
