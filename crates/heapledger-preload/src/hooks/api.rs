//! The calls a program makes to steer the recorder (`heapledger.h`, the
//! `heapledger-api` crate, Python's `ctypes`): the stack switch, the
//! counters, the leak report, snapshots. `heapledger.h` finds them with
//! `dlsym`, so a program built with it runs without heapledger too. Each
//! runs as the recorder's own work (its allocations unrecorded, `errno`
//! kept: `process::control::as_recorder`). None may be called from a
//! signal handler.

use crate::process::control::{self, as_recorder, Stats};
use crate::process::start;
use core::ffi::{c_char, c_int, CStr};

/// The version of these calls (1), or 0 where the process does not record.
#[no_mangle]
pub extern "C" fn heapledger_api_version() -> c_int {
    as_recorder(|| {
        if start::ready() && control::recording() {
            1
        } else {
            0
        }
    })
}

/// Switches stack capture on (`on` ≠ 0) or off for every thread: 0, or -1
/// where stacks cannot be taken (not recording, `--stack none`, stopped for
/// want of memory).
#[no_mangle]
pub extern "C" fn heapledger_set_backtrace_enabled(on: c_int) -> c_int {
    as_recorder(|| {
        if start::ready() && control::set_stacks(on != 0) {
            0
        } else {
            -1
        }
    })
}

/// 1 while allocations get their stacks, else 0.
#[no_mangle]
pub extern "C" fn heapledger_is_backtrace_enabled() -> c_int {
    as_recorder(|| c_int::from(start::ready() && control::stacks_on()))
}

/// Fills `*out` with the counters now: 0, or -1 (`*out` zeroed) where the
/// process does not record.
///
/// # Safety
/// `out` is null or points to a writable `struct heapledger_stats`.
#[no_mangle]
pub unsafe extern "C" fn heapledger_get_stats(out: *mut Stats) -> c_int {
    as_recorder(|| {
        let s = if start::ready() {
            control::stats()
        } else {
            None
        };
        if !out.is_null() {
            // SAFETY: the caller's struct.
            unsafe { *out = s.unwrap_or_default() };
        }
        if s.is_some() {
            0
        } else {
            -1
        }
    })
}

/// The leak report as text, in a block of the C library's `malloc`: free
/// it with `heapledger_free_leak_report` or `free`. Null where memory ran
/// out.
#[no_mangle]
pub extern "C" fn heapledger_get_leak_report() -> *mut c_char {
    as_recorder(|| {
        start::ready();
        control::c_string(&control::leak_report())
    })
}

/// Releases a report of `heapledger_get_leak_report`.
///
/// # Safety
/// `report` is null or a report not yet released.
#[no_mangle]
pub unsafe extern "C" fn heapledger_free_leak_report(report: *mut c_char) {
    as_recorder(|| {
        if let Some(free) = crate::base::real::free() {
            // SAFETY: a block of the real malloc (`control::c_string`).
            unsafe { free(report as *mut _) };
        }
    })
}

/// Recording off for the calling thread (as MALT's `malt_disable`): its
/// allocations are not recorded, nor counted, until `heapledger_enable`;
/// its frees of recorded blocks still are. 0, or -1 where the process does
/// not record.
#[no_mangle]
pub extern "C" fn heapledger_disable() -> c_int {
    switch_thread(true)
}

/// Recording on again for the calling thread: 0, or -1.
#[no_mangle]
pub extern "C" fn heapledger_enable() -> c_int {
    switch_thread(false)
}

fn switch_thread(off: bool) -> c_int {
    as_recorder(|| {
        crate::thread::tls::tls().disabled.set(off);
        if start::ready() && control::recording() {
            0
        } else {
            -1
        }
    })
}

/// Resets the counters: from here on they hold what is allocated after
/// the call, and frees of older blocks are counted apart (never as
/// errors). 0, or -1 where the process does not record (or its threads
/// could not be held).
#[no_mangle]
pub extern "C" fn heapledger_reset_stats() -> c_int {
    as_recorder(|| {
        if start::ready() && control::reset() {
            0
        } else {
            -1
        }
    })
}

/// Stores a snapshot of every counter, labelled `label` (null: "snapshot"),
/// in the profile: its number (1, 2, ...), or -1.
///
/// # Safety
/// `label` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn heapledger_snapshot(label: *const c_char) -> c_int {
    as_recorder(|| {
        if !start::ready() {
            return -1;
        }
        let label = if label.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller's NUL-terminated string.
            unsafe { CStr::from_ptr(label) }.to_bytes()
        };
        control::snapshot(label).map_or(-1, |n| n.min(c_int::MAX as u64) as c_int)
    })
}
