//! _exit and _Exit (the profile is written first, as exit() would have),
//! and sigaltstack, sigaction and signal: heapledger's alternate stack and
//! fatal-signal handlers stay invisible to the program.

use crate::base::real;
use crate::process::{dump, end, signals};
use crate::thread::{altstack, tls};
use core::ffi::c_int;

/// Writes the profile, then leaves through the real function (or the
/// system call, if it could not be found).
fn exit_after_dump(real: Option<real::ExitFn>, code: c_int) -> ! {
    end::exited(code);
    dump::write("_exit");
    match real {
        // SAFETY: the real _exit or _Exit.
        Some(f) => unsafe { f(code) },
        // SAFETY: the raw system call never returns.
        None => unsafe {
            libc::syscall(libc::SYS_exit_group, code);
            core::hint::unreachable_unchecked()
        },
    }
}

/// # Safety
/// Called as _exit: writes the profile first, as exit() would have.
#[no_mangle]
pub unsafe extern "C" fn _exit(code: c_int) -> ! {
    exit_after_dump(real::exit_(), code)
}

/// # Safety
/// Called as _Exit.
#[no_mangle]
pub unsafe extern "C" fn _Exit(code: c_int) -> ! {
    exit_after_dump(real::exit2(), code)
}

/// heapledger's alternate signal stack reads as none (see `altstack.rs`).
///
/// # Safety
/// Called as sigaltstack.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    // SAFETY: the caller's arguments, as sigaltstack takes them.
    unsafe { altstack::program_call(tls::tls(), ss, old) }
}

/// # Safety
/// Called as sigaction.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(f) = real::sigaction() else {
        // SAFETY: errno location is valid.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    // SAFETY: act, when not null, is the caller's valid struct.
    let wants_default =
        !act.is_null() && unsafe { (*act).sa_sigaction } == libc::SIG_DFL && signals::is_fatal(sig);
    if signals::ours(sig) {
        if !act.is_null() && !wants_default {
            // SAFETY: the real sigaction with the caller's new action.
            let r = unsafe { f(sig, act, core::ptr::null_mut()) };
            if r != 0 {
                return r;
            }
            signals::forget(sig);
        }
        if !old.is_null() {
            // The program never set a handler: it sees the default one.
            // SAFETY: old is the caller's writable struct.
            unsafe {
                core::ptr::write_bytes(old, 0, 1);
                (*old).sa_sigaction = libc::SIG_DFL;
            }
        }
        return 0;
    }
    if wants_default {
        // Back to the default action: heapledger's handler does it, after saving.
        if !old.is_null() {
            // SAFETY: querying into the caller's struct.
            let r = unsafe { f(sig, core::ptr::null(), old) };
            if r != 0 {
                return r;
            }
        }
        if signals::install_one(sig) {
            return 0;
        }
    }
    // SAFETY: the real sigaction with the caller's arguments.
    unsafe { f(sig, act, old) }
}

/// # Safety
/// Called as signal.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let Some(f) = real::signal() else {
        return libc::SIG_ERR;
    };
    let wants_default = handler == libc::SIG_DFL && signals::is_fatal(sig);
    if signals::ours(sig) {
        if wants_default {
            return libc::SIG_DFL;
        }
        // SAFETY: the real signal.
        let prev = unsafe { f(sig, handler) };
        if prev == libc::SIG_ERR {
            return prev;
        }
        signals::forget(sig);
        return libc::SIG_DFL;
    }
    // SAFETY: the real signal.
    let prev = unsafe { f(sig, handler) };
    if prev != libc::SIG_ERR && wants_default {
        signals::install_one(sig);
    }
    prev
}
