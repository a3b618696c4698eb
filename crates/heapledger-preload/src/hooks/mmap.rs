//! mmap, munmap and mremap: the bytes mapped and unmapped, per stack.

use super::enter::{enter, stack};
use crate::base::{degrade, real};
use crate::thread::side;
use core::ffi::{c_int, c_void};

trampoline!(munmap, munmap_impl, "rdx", (a: *mut c_void, len: usize) -> c_int);
trampoline!(mremap, mremap_impl, "r9", (a: *mut c_void, old: usize, new: usize, flags: c_int, new_addr: *mut c_void) -> *mut c_void);
trampoline6!(mmap, mmap_impl, (a: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t) -> *mut c_void);
trampoline6!(mmap64, mmap_impl, (a: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t) -> *mut c_void);

fn on_map(fp: u64, len: usize, unmap: bool) {
    side::roomy(|_| {
        let Some(mut h) = enter() else { return };
        let st = h.st();
        let id = stack(st, fp);
        let Some(mut c) = st.stacks.get(id) else {
            degrade::stop(degrade::Cause::RecorderMemory);
            return;
        };
        c.add_map(len as u64, unmap);
    })
}

/// # Safety
/// Called as C's mmap.
unsafe extern "C" fn mmap_impl(
    a: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
    fp: u64,
) -> *mut c_void {
    let r = match real::mmap() {
        // SAFETY: the real mmap with the caller's arguments.
        Some(f) => unsafe { f(a, len, prot, flags, fd, off) },
        // SAFETY: the raw system call, same arguments.
        None => unsafe {
            libc::syscall(libc::SYS_mmap, a, len, prot, flags, fd, off) as *mut c_void
        },
    };
    if r != libc::MAP_FAILED {
        on_map(fp, len, false);
    }
    r
}

/// # Safety
/// Called as C's munmap.
unsafe extern "C" fn munmap_impl(a: *mut c_void, len: usize, fp: u64) -> c_int {
    let r = match real::munmap() {
        // SAFETY: the real munmap.
        Some(f) => unsafe { f(a, len) },
        // SAFETY: the raw system call.
        None => unsafe { libc::syscall(libc::SYS_munmap, a, len) as c_int },
    };
    if r == 0 {
        on_map(fp, len, true);
    }
    r
}

/// # Safety
/// Called as C's mremap (variadic in C; the optional fifth argument is
/// passed in a register either way on x86-64).
unsafe extern "C" fn mremap_impl(
    a: *mut c_void,
    old: usize,
    new: usize,
    flags: c_int,
    new_addr: *mut c_void,
    fp: u64,
) -> *mut c_void {
    let r = match real::mremap() {
        // SAFETY: the real mremap.
        Some(f) => unsafe { f(a, old, new, flags, new_addr) },
        None => libc::MAP_FAILED,
    };
    if r != libc::MAP_FAILED {
        on_map(fp, old, true);
        on_map(fp, new, false);
    }
    r
}
