//! `--stack enter-exit` (seed 000's enter/exit stack): for a program built
//! with `-finstrument-functions`, whose every function calls
//! `__cyg_profile_func_enter(fn, call_site)` on entry and
//! `__cyg_profile_func_exit` on leaving, the recorder keeps each thread's
//! stack of call sites and charges an allocation to it, instead of
//! unwinding.
//!
//! An allocation's stack is then its return address (into the function
//! that called the allocator) followed by the call sites of the functions
//! entered, innermost first: return addresses, as an unwound stack's are,
//! so everything after (symbols, reports, exports) reads it the same. Code
//! built without the instrumentation (the C library) has no frames in it:
//! a `strdup` is charged to the instrumented function that called it, at
//! the line of its own caller. A thread deeper than `CAP` keeps its
//! outermost `CAP` frames.
//!
//! Each thread's deepest stack is exact in this mode: every entry compares
//! the stack address of the entry hook's frame with the lowest seen, and a
//! deeper one copies the call sites that changed since the last copy (so a
//! recursion 1 000 deep copies each of its frames once). The copy is
//! charged to the thread's stack use at its next allocation, at its end,
//! or at the process's end (`thread::shadow::charge_deepest`), where the
//! recorder may intern a stack.

use crate::base::config;
use crate::data::stacks;
use crate::thread::shadow::{deeper, deepest, Deepest, CAP};
use crate::thread::tls;
use core::ffi::c_void;

/// The thread's buffer, mapped on its first entry (a system call, no lock:
/// entries come from anywhere, signal handlers included); never unmapped
/// (a thread's end may still run instrumented code).
#[cold]
#[inline(never)]
fn buffer(t: &tls::Tls) -> *mut u64 {
    // SAFETY: an anonymous private mapping.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            2 * CAP * 8 + core::mem::size_of::<Deepest>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return core::ptr::null_mut();
    }
    t.shadow.set(p as *mut u64);
    p as *mut u64
}

/// # Safety
/// Called by code built with `-finstrument-functions` on entering a
/// function.
#[no_mangle]
pub unsafe extern "C" fn __cyg_profile_func_enter(_this_fn: *mut c_void, call_site: *mut c_void) {
    let t = tls::tls();
    let d = t.shadow_depth.get();
    if (d as usize) < CAP {
        let mut b = t.shadow.get();
        if b.is_null() {
            if config::get().stack_mode != heapledger_wire::StackMode::EnterExit {
                return;
            }
            // SAFETY: errno is kept around the mapping.
            let errno = unsafe { *libc::__errno_location() };
            b = buffer(t);
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            if b.is_null() {
                return;
            }
        }
        // SAFETY: within the thread's buffer of CAP.
        unsafe { *b.add(d as usize) = call_site as u64 };
        // SAFETY: this thread's buffer.
        let deep = unsafe { deepest(b) };
        let d = d as usize;
        if d < deep.same {
            deep.same = d;
        }
        let here = 0u8;
        let sp = core::hint::black_box(&here) as *const u8 as u64;
        if sp < deep.low || deep.low == 0 {
            deeper(deep, b, d, sp);
        }
    }
    t.shadow_depth.set(d + 1);
}

/// # Safety
/// Called by code built with `-finstrument-functions` on leaving a
/// function.
#[no_mangle]
pub unsafe extern "C" fn __cyg_profile_func_exit(_this_fn: *mut c_void, _call_site: *mut c_void) {
    let t = tls::tls();
    if t.shadow.get().is_null() {
        return;
    }
    let d = t.shadow_depth.get();
    t.shadow_depth.set(d.saturating_sub(1));
}

/// The stack of an allocation whose hook's frame record is `fp`: interned
/// in the table of distinct stacks; 0 (the empty stack) where it cannot be
/// kept.
pub(super) fn shadow_stack(fp: u64) -> u32 {
    let t = tls::tls();
    let b = t.shadow.get();
    let depth = (t.shadow_depth.get() as usize).min(CAP);
    let max = config::get().max_depth as usize;
    // SAFETY: the trampoline's frame record: saved rbp, return address.
    let ret = unsafe { *((fp + 8) as *const u64) };
    let kept = if b.is_null() {
        0
    } else {
        depth.min(max.saturating_sub(1))
    };
    // Leaf first: the return address, then the call sites from the
    // innermost (`b[depth - 1]`) out.
    // SAFETY: b holds `depth` call sites (and kept <= depth).
    let site = |i: usize| unsafe { *b.add(depth - 1 - i) };
    let frame = |i: usize| if i == 0 { ret } else { site(i - 1) };
    let len = 1 + kept;
    let mut hash = stacks::HASH_SEED;
    for i in 0..len {
        hash = stacks::mix(hash, frame(i));
    }
    let eq = |f: stacks::Frames| f.len() == len && f.iter().enumerate().all(|(i, v)| v == frame(i));
    stacks::intern(hash, len, &eq, |out| {
        for (i, o) in out.iter_mut().enumerate() {
            *o = frame(i);
        }
    })
    .unwrap_or(0)
}
