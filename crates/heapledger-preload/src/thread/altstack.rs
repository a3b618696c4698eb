//! A signal stack of the recorder's own for each recording thread, so that a
//! program that dies of a stack overflow still leaves its profile.
//!
//! A thread that overflows its stack faults on the guard page below it, and
//! the kernel, with no room left there for a handler's frame, kills the
//! process outright: heapledger's handler for `SIGSEGV` (`signals.rs`) never
//! ran, and the profile was lost ("left no profile data"), where heaptrack,
//! which streams its data as the program runs, keeps everything up to the
//! crash. heapledger's handlers are installed with `SA_ONSTACK`, and each
//! thread that records gets an alternate signal stack when its state is
//! created, unless the program gave it one already: the handler then runs
//! there, moves to the thread's side stack to write the profile
//! (`side::deep`), and the program dies of the signal as before.
//!
//! The program does not see it. `sigaltstack` is heapledger's: asked while
//! the thread's alternate stack is heapledger's, it says there is none, as it
//! would without heapledger; a program that sets its own (Rust's standard
//! library does in every thread; it asks first, and is told there is
//! none) replaces heapledger's, which is given back, and heapledger's handlers
//! then run on the program's stack. Two differences remain: a program that
//! installs a handler with `SA_ONSTACK` and no alternate stack has it run on
//! heapledger's (256 KiB, touched only as deep as it is used) rather than on
//! the thread's own stack; and a runtime that makes the system call itself
//! (Go's, in a program that uses cgo) sees heapledger's stack, and may use it
//! (it is given back only as the thread ends).
//!
//! Each stack is one mapping with an inaccessible page below it (an
//! overflow of the handler faults rather than writing over a neighbour),
//! given back when the thread ends; a forked child keeps its parent's.

use crate::base::arena;
use crate::base::sync;
use crate::thread::tls::Tls;
use core::ffi::c_int;

/// Usable size: the kernel's frame (with AVX-512 about 3 KiB, with AMX
/// 11 KiB), heapledger's handler until it moves to the side stack, and room
/// for a program's own `SA_ONSTACK` handler.
const SIZE: usize = 256 << 10;
const GUARD: usize = 4096;

/// The system call, which the C library's `sigaltstack` only wraps (and
/// which, unlike that, is not heapledger's own hook).
///
/// # Safety
/// `ss`, when not null, is a valid `stack_t`; `old`, when not null, is
/// writable.
unsafe fn raw(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    // SAFETY: the caller's pointers, as the system call takes them.
    unsafe { libc::syscall(libc::SYS_sigaltstack, ss, old) as c_int }
}

fn disabled() -> libc::stack_t {
    libc::stack_t {
        ss_sp: core::ptr::null_mut(),
        ss_flags: libc::SS_DISABLE,
        ss_size: 0,
    }
}

/// Whether the alternate stack registered now, `cur`, is the one heapledger
/// gave this thread.
fn is_ours(t: &Tls, cur: &libc::stack_t) -> bool {
    let base = t.alt_base.get();
    base != 0 && cur.ss_flags & libc::SS_DISABLE == 0 && cur.ss_sp as u64 == base + GUARD as u64
}

/// Gives this thread an alternate signal stack, where it has none. Called
/// as the thread's state is created (inside the recorder).
pub fn give(t: &Tls) {
    if t.alt_base.get() != 0 {
        return;
    }
    let _e = sync::ErrnoGuard::new();
    let mut cur = disabled();
    // SAFETY: querying into a local.
    if unsafe { raw(core::ptr::null(), &mut cur) } != 0 || cur.ss_flags & libc::SS_DISABLE == 0 {
        // The program's own (or one it inherited): left as it is.
        return;
    }
    let base = arena::map_stack(SIZE + GUARD);
    if base.is_null() {
        return;
    }
    let ss = libc::stack_t {
        // SAFETY: inside the mapping just made.
        ss_sp: unsafe { base.add(GUARD) }.cast(),
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: the first page of the mapping just made; then a valid stack_t.
    let ok = unsafe {
        libc::syscall(libc::SYS_mprotect, base, GUARD, libc::PROT_NONE) == 0
            && raw(&ss, core::ptr::null_mut()) == 0
    };
    if ok {
        t.alt_base.set(base as u64);
    } else {
        // SAFETY: the mapping just made, unused.
        unsafe { arena::unmap_stack(base, SIZE + GUARD) };
    }
}

/// Gives the mapping back (it is no longer registered, or is being
/// unregistered with no frame on it).
fn release(t: &Tls) {
    let base = t.alt_base.replace(0);
    if base != 0 {
        // SAFETY: the mapping `give` made; nothing runs on it.
        unsafe { arena::unmap_stack(base as *mut u8, SIZE + GUARD) };
    }
}

/// At the thread's end: unregisters heapledger's stack, if it is still the
/// thread's and not in use, and gives it back.
pub fn thread_ends(t: &Tls) {
    if t.alt_base.get() == 0 {
        return;
    }
    let _e = sync::ErrnoGuard::new();
    let mut cur = disabled();
    // SAFETY: querying into a local.
    if unsafe { raw(core::ptr::null(), &mut cur) } != 0 {
        return;
    }
    if is_ours(t, &cur) {
        if cur.ss_flags & libc::SS_ONSTACK != 0 {
            // A handler runs on it (the thread ends from inside one): kept.
            return;
        }
        let off = disabled();
        // SAFETY: a valid stack_t.
        if unsafe { raw(&off, core::ptr::null_mut()) } != 0 {
            return;
        }
    }
    release(t);
}

/// The program's `sigaltstack`: as the system call, except that heapledger's
/// own stack reads as none, and is given back once the program replaces it.
///
/// # Safety
/// As `sigaltstack`.
pub unsafe fn program_call(t: &Tls, ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    if t.alt_base.get() == 0 {
        // SAFETY: the caller's arguments.
        return unsafe { raw(ss, old) };
    }
    let mut cur = disabled();
    // SAFETY: querying into a local.
    let r = unsafe { raw(core::ptr::null(), &mut cur) };
    if r != 0 {
        return r;
    }
    let ours = is_ours(t, &cur);
    if !ss.is_null() {
        // SAFETY: the caller's new stack.
        let r = unsafe { raw(ss, core::ptr::null_mut()) };
        if r != 0 {
            return r;
        }
        if ours {
            // Replaced (or disabled): not in use, or the kernel would have
            // refused the change.
            release(t);
        }
    }
    if !old.is_null() {
        // SAFETY: the caller's writable struct.
        unsafe { *old = if ours { disabled() } else { cur } };
    }
    0
}
