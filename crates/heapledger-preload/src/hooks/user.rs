//! `heapledger.h`'s tracebacks and time logs (timelog.md's user API): a
//! thread pushes and pops frames of its own (code addresses, or labels
//! such as "file.py:12 in f"), snapshots its traceback as a reference,
//! makes, clears, destroys and enumerates time logs, and records time lost
//! with its traceback and another thread's (`data::traceback`,
//! `thread::user`).
//!
//! While a thread has frames pushed, its allocations are charged to them
//! in every stack mode but `--stack none` (seed 000's enter/exit stack,
//! kept by the program): the allocation's return address, then the pushed
//! frames, innermost first. Its waits are, too.
//!
//! Handles: a traceback is its node's index plus one (null: none or
//! empty), a log its address; a log is only its own thread's to use.

use super::enter::{entered, Hook};
use crate::base::config;
use crate::data::{stacks, timelog, traceback};
use crate::process::{control, start};
use crate::thread::tls;
use crate::thread::user::{release_key, User};
use core::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};

/// The handle of node `n`.
fn handle(n: u32) -> *mut c_void {
    match n {
        traceback::NONE => core::ptr::null_mut(),
        _ => (n as usize + 1) as *mut c_void,
    }
}

/// The node of handle `h` (`NONE` for null or no node ever made).
pub(super) fn node(h: *const c_void) -> u32 {
    let n = (h as usize).wrapping_sub(1);
    if h.is_null() || n >= u32::MAX as usize || !traceback::valid(n as u32) {
        traceback::NONE
    } else {
        n as u32
    }
}

/// Runs `f` on this thread's own part (made on first use), in the
/// recorder; `fail` where the process does not record or the thread has no
/// state of its own.
fn with_user<R>(fail: R, f: impl FnOnce(&mut User) -> R) -> R {
    let t = tls::tls();
    if t.in_hook.get() || !start::ready() || !control::recording() {
        return fail;
    }
    let _e = crate::base::sync::ErrnoGuard::new();
    let mut h: Hook = entered(t, true);
    if h.orphan {
        return fail;
    }
    let u = h
        .st()
        .user
        .get_or_insert_with(|| alloc::boxed::Box::new(User::new()));
    f(u)
}

fn text<'a>(s: *const c_char) -> &'a [u8] {
    if s.is_null() {
        &[]
    } else {
        // SAFETY: the caller's NUL-terminated string.
        unsafe { CStr::from_ptr(s) }.to_bytes()
    }
}

/// Pushes the frame of code address `code`: 0, or -1.
#[no_mangle]
pub extern "C" fn heapledger_push_frame(code: *const c_void) -> c_int {
    with_user(-1, |u| if u.push(code as u64) { 0 } else { -1 })
}

/// Pushes a frame labelled `label` (printable ASCII, 256 bytes at most; a
/// label `FILE:LINE in FUNCTION` is read as such): 0, or -1.
///
/// # Safety
/// `label` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn heapledger_push_label(label: *const c_char) -> c_int {
    // The label is interned inside the recorder: its memory is not the
    // program's.
    with_user(-1, |u| {
        if u.push(traceback::label(text(label))) {
            0
        } else {
            -1
        }
    })
}

/// Pops the frame pushed last: 0, or -1 where none is pushed.
#[no_mangle]
pub extern "C" fn heapledger_pop_frame() -> c_int {
    with_user(-1, |u| if u.pop() { 0 } else { -1 })
}

/// A reference on the calling thread's traceback (null where it is empty).
#[no_mangle]
pub extern "C" fn heapledger_traceback_snapshot() -> *mut c_void {
    with_user(core::ptr::null_mut(), |u| handle(u.snapshot()))
}

/// One more reference on `tb`; returns `tb`.
#[no_mangle]
pub extern "C" fn heapledger_traceback_retain(tb: *mut c_void) -> *mut c_void {
    traceback::retain(node(tb));
    tb
}

/// Gives back a reference on `tb` (null: nothing).
#[no_mangle]
pub extern "C" fn heapledger_traceback_release(tb: *mut c_void) {
    control::as_recorder(|| traceback::release(node(tb)));
}

/// The traceback under `tb`'s frame (its caller's), borrowed from `tb`:
/// null at the outermost frame.
#[no_mangle]
pub extern "C" fn heapledger_traceback_parent(tb: *const c_void) -> *mut c_void {
    handle(traceback::parent(node(tb)))
}

/// `tb`'s own frame: 0 for a code address (in `*code`), 1 for a label
/// (copied into `label`, `len` bytes with the NUL at most), -1 for none.
///
/// # Safety
/// `code` is null or writable; `label` is null or `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn heapledger_traceback_frame(
    tb: *const c_void,
    code: *mut *const c_void,
    label: *mut c_char,
    len: usize,
) -> c_int {
    let n = node(tb);
    if n == traceback::NONE {
        return -1;
    }
    let f = traceback::frame(n);
    let copied = traceback::with_label(f, |t| {
        if !label.is_null() && len > 0 {
            let k = t.len().min(len - 1);
            // SAFETY: `len` bytes at `label`, k < len.
            unsafe {
                core::ptr::copy_nonoverlapping(t.as_ptr(), label as *mut u8, k);
                *label.add(k) = 0;
            }
        }
    });
    match copied {
        Some(()) => 1,
        None => {
            if !code.is_null() {
                // SAFETY: the caller's pointer.
                unsafe { *code = f as *const c_void };
            }
            0
        }
    }
}

/// Frames alive in the process now (pushed and not popped, or held by a
/// snapshot or a log's entry).
#[no_mangle]
pub extern "C" fn heapledger_traceback_frames_alive() -> u64 {
    traceback::alive()
}

/// A time log of the calling thread keeping its `top` entries of most time
/// lost (1 to 64; 0: `--waits-top`'s); null where the process does not
/// record.
#[no_mangle]
pub extern "C" fn heapledger_timelog_create(top: c_uint) -> *mut c_void {
    let cap = match top {
        0 => config::get().waits_top as usize,
        n => n as usize,
    };
    with_user(core::ptr::null_mut(), |u| {
        let l = alloc::boxed::Box::new(crate::thread::user::UserLog {
            log: timelog::TimeLog::new(cap),
        });
        let h = &*l as *const _ as *mut c_void;
        u.logs.push(l);
        h
    })
}

/// Empties the log: 0, or -1 where it is none of this thread's.
#[no_mangle]
pub extern "C" fn heapledger_timelog_clear(log: *mut c_void) -> c_int {
    with_user(-1, |u| match u.log(log as usize) {
        Some(l) => {
            l.clear();
            0
        }
        None => -1,
    })
}

/// Destroys the log: 0, or -1 where it is none of this thread's.
#[no_mangle]
pub extern "C" fn heapledger_timelog_destroy(log: *mut c_void) -> c_int {
    with_user(-1, |u| if u.destroy(log as usize) { 0 } else { -1 })
}

/// This thread's logs, up to `max` of them into `out`: how many it has.
///
/// # Safety
/// `out` is null or holds `max` writable pointers.
#[no_mangle]
pub unsafe extern "C" fn heapledger_timelogs(out: *mut *mut c_void, max: usize) -> c_long {
    with_user(-1, |u| {
        for (i, l) in u.logs.iter().take(max).enumerate() {
            if !out.is_null() {
                // SAFETY: `max` pointers at `out`.
                unsafe { *out.add(i) = &**l as *const _ as *mut c_void };
            }
        }
        u.logs.len() as c_long
    })
}

/// One entry of a log, as `heapledger.h` declares it.
#[repr(C)]
pub struct LogEntry {
    kind: [c_char; 64],
    count: u64,
    total_ns: u64,
    max_ns: u64,
    traceback: *mut c_void,
    other: *mut c_void,
}

/// The log's entries, most time first, up to `max` into `out`: how many it
/// holds, or -1 where it is none of this thread's. The tracebacks are the
/// entries' (valid while they are in the log; retain one to keep it).
///
/// # Safety
/// `out` is null or holds `max` writable entries.
#[no_mangle]
pub unsafe extern "C" fn heapledger_timelog_entries(
    log: *mut c_void,
    out: *mut LogEntry,
    max: usize,
) -> c_long {
    with_user(-1, |u| {
        let Some(l) = u.log(log as usize) else {
            return -1;
        };
        if let Some(k) = l.log.flush() {
            release_key(k);
        }
        let entries = l.log.entries();
        for (i, e) in entries.iter().take(max).enumerate() {
            if out.is_null() {
                break;
            }
            let mut kind = [0 as c_char; 64];
            let name = timelog::kind_name(e.key.kind);
            for (d, &b) in kind.iter_mut().zip(name.as_bytes().iter().take(63)) {
                *d = b as c_char;
            }
            // SAFETY: `max` entries at `out`.
            unsafe {
                *out.add(i) = LogEntry {
                    kind,
                    count: e.count,
                    total_ns: e.total_ns,
                    max_ns: e.max_ns,
                    traceback: handle(e.key.stack),
                    other: handle(e.key.other),
                }
            };
        }
        entries.len() as c_long
    })
}

/// The stack of an allocation (or a wait) whose hook's frame record is
/// `fp`, on a thread whose pushed frames end at `top`: its return address,
/// then those frames, innermost first, interned; 0 where it cannot be kept.
pub(super) fn user_stack(top: u32, fp: u64) -> u32 {
    // SAFETY: the trampoline's frame record: saved rbp, return address.
    let ret = unsafe { *((fp + 8) as *const u64) };
    frames_stack(Some(ret), top)
}

/// The frames `first` (if any), then those of the traceback `top` (as
/// return addresses: each plus one), interned as a stack of at most
/// `--max-depth` frames; 0 where it cannot be kept.
pub(super) fn frames_stack(first: Option<u64>, top: u32) -> u32 {
    let max = (config::get().max_depth as usize).max(1);
    let mut buf = [0u64; 256];
    let mut len = 0;
    if let Some(f) = first {
        buf[0] = f;
        len = 1;
    }
    let mut n = top;
    while n != traceback::NONE && len < max.min(buf.len()) {
        buf[len] = traceback::frame(n).wrapping_add(1);
        len += 1;
        n = traceback::parent(n);
    }
    let frames = &buf[..len];
    let mut hash = stacks::HASH_SEED;
    for &f in frames {
        hash = stacks::mix(hash, f);
    }
    let eq = |f: stacks::Frames| f.is(frames);
    stacks::intern(hash, len, &eq, |out| out.copy_from_slice(frames)).unwrap_or(0)
}
