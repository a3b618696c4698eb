//! `__libc_start_main`, which the executable's `_start` calls: so that a
//! process's exit status reaches its dump (`process::end`).
//!
//! glibc passes the status given to `exit` (or returned from `main`) to
//! `on_exit` handlers only, and runs them in the reverse order of their
//! registration; the dump is written by the loader's destructors
//! (`rtld_fini`), which `__libc_start_main` registers first. So this entry
//! registers `rtld_fini` itself, then heapledger's handler, and hands the
//! real function no `rtld_fini`: at exit, the program's handlers run, then
//! heapledger's (which notes the status), then the loader's destructors.
//!
//! The entry jumps to the real function with the caller's stack as it
//! found it, so that no frame of heapledger's stands under `main` in the
//! stacks.

use crate::process::end;
use core::ffi::{c_int, c_void};

extern "C" {
    fn __cxa_atexit(f: *mut c_void, arg: *mut c_void, dso: *mut c_void) -> c_int;
}

/// The real `__libc_start_main` (rax) and the `rtld_fini` to hand it (rdx).
#[repr(C)]
struct Next {
    real: usize,
    rtld_fini: usize,
}

extern "C" fn prepare(rtld_fini: usize) -> Next {
    // SAFETY: a NUL-terminated name.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__libc_start_main".as_ptr()) } as usize;
    if real == 0 {
        let msg = b"heapledger: cannot find __libc_start_main\n";
        // SAFETY: a static buffer to fd 2; abort never returns.
        unsafe {
            libc::write(2, msg.as_ptr() as *const _, msg.len());
            libc::abort();
        }
    }
    // SAFETY: as glibc registers it (a function of no argument called with
    // one, harmless in this ABI).
    if rtld_fini != 0 && unsafe { __cxa_atexit(rtld_fini as *mut c_void, 0 as _, 0 as _) } != 0 {
        return Next { real, rtld_fini };
    }
    end::watch_exit();
    Next { real, rtld_fini: 0 }
}

/// # Safety
/// Called as glibc's `__libc_start_main` (main, argc, argv, init, fini,
/// rtld_fini, stack_end), by `_start`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __libc_start_main() {
    core::arch::naked_asm!(
        ".cfi_startproc",
        // Six register arguments kept; rsp 16-aligned for the call.
        push_cfi!("rdi", "rsi", "rdx", "rcx", "r8", "r9"),
        "sub rsp, 8",
        ".cfi_adjust_cfa_offset 8",
        "mov rdi, r9",
        "call {prepare}",
        "mov r11, rax",
        "mov r10, rdx",
        "add rsp, 8",
        ".cfi_adjust_cfa_offset -8",
        pop_cfi!("r9", "r8", "rcx", "rdx", "rsi", "rdi"),
        "mov r9, r10",
        "jmp r11",
        ".cfi_endproc",
        prepare = sym prepare,
    )
}
