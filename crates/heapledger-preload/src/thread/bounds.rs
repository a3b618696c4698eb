//! The bounds of this thread's stack: for the unwinder's reads, and for
//! how deep a hook may run in place (`side.rs`).

use super::tls::tls;
use crate::data::maps;
use core::ptr::null_mut;

extern "C" {
    static __libc_stack_end: *mut core::ffi::c_void;
}

/// Bounds of this thread's stack, for the unwinder's reads.
///
/// `pthread_getattr_np` holds the thread's descriptor lock while it
/// allocates (glibc's `realloc` of a CPU set). When a thread's first
/// recorded event comes from inside that call (its own first allocation,
/// or, under an allocator of the program's own such as rustc's jemalloc,
/// the `mmap` that allocation makes), asking it again for the same thread
/// waited for that lock forever: the program hung. heapledger's
/// `pthread_getattr_np` notes which thread a call is about, and then the
/// bounds come from the mapping that holds the thread's descriptor, found
/// in `/proc/self/maps` (glibc keeps the descriptor at the top of the
/// thread's stack block).
pub(super) fn stack_bounds() -> (u64, u64) {
    // SAFETY: pthread_self is always valid; the attr is initialized by
    // pthread_getattr_np and destroyed below. Any allocation it makes is
    // forwarded untracked (we are inside a hook).
    unsafe {
        // SAFETY: exported by ld.so.
        let main_end = __libc_stack_end as u64;
        if crate::base::phase::main_thread() {
            let hi = (main_end + 4095) & !4095;
            return (hi.saturating_sub(1 << 30), hi);
        }
        if tls().getattr_of.get() == libc::pthread_self() {
            return maps::mapping_of(thread_pointer()).unwrap_or((0, 0));
        }
        let t = tls();
        if t.bounds.get().1 != 0 {
            return t.bounds.get();
        }
        let own = t.own_calls.replace(true);
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        let mut addr: *mut core::ffi::c_void = null_mut();
        let mut size: usize = 0;
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
        }
        t.own_calls.set(own);
        t.bounds.set((addr as u64, addr as u64 + size as u64));
        t.bounds.get()
    }
}

/// Where this thread's stack use is measured from: the stack pointer the
/// main thread started with (`__libc_stack_end`: not the page above it,
/// whose arguments and environment are no frame's, and whose offset in its
/// page differs from run to run), or the top of another thread's stack.
pub(super) fn use_top(hi: u64) -> u64 {
    // SAFETY: system calls with no preconditions; `__libc_stack_end` is
    // set by ld.so before any code runs.
    unsafe {
        if crate::base::phase::main_thread() && (__libc_stack_end as u64) <= hi {
            return __libc_stack_end as u64;
        }
    }
    hi
}

/// This thread's stack as far as it may grow (the main thread's, down to
/// its size limit), for `side.rs`; (0, 0) if unknown.
///
/// The main thread's limit counts from the top of its stack's mapping,
/// above the arguments, the environment and the auxiliary vector (tens of
/// KiB where the environment is large), not from `__libc_stack_end`.
pub fn room_bounds() -> (u64, u64) {
    // SAFETY: system calls with no preconditions; `__libc_stack_end` is
    // set by ld.so before any code runs.
    unsafe {
        if crate::base::phase::main_thread() {
            let end = __libc_stack_end as u64;
            let _e = crate::base::sync::ErrnoGuard::new();
            let hi = maps::mapping_of(end)
                .map(|(_, top)| top)
                .filter(|&top| top > end)
                .unwrap_or((end + 4095) & !4095);
            let mut r: libc::rlimit = core::mem::zeroed();
            let limit = if libc::getrlimit(libc::RLIMIT_STACK, &mut r) == 0 {
                r.rlim_cur.min(1 << 30)
            } else {
                8 << 20
            };
            return (hi.saturating_sub(limit), hi);
        }
    }
    stack_bounds()
}

/// The thread pointer: the address of glibc's descriptor of this thread.
fn thread_pointer() -> u64 {
    let p: u64;
    // SAFETY: fs:0 holds the thread pointer on x86-64 Linux.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(pure, readonly, nostack)
        )
    };
    p
}
