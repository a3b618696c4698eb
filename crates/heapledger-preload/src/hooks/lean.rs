//! `malloc`'s and `free`'s entries, and their lean paths: in
//! `--sample-every` mode (and in a process that does not record), a call
//! that will not be sampled is counted in the thread's TLS block and jumps
//! to the real function, in a few instructions of assembly; with
//! `--only-lib`, so is a call from code outside the chosen libraries and
//! the runtime (`data::only`).

use super::alloc::{free_full, malloc_impl};
use crate::base::clock::{ticks, CALL_SAMPLE_LEAN};
use crate::base::real;
use crate::data::{only, sampler};
use crate::thread::tls;
use core::ffi::c_void;

/// Adds `by` to a counter of this thread's TLS block in one instruction. A
/// signal handler that allocates can run between any two instructions of a
/// lean path, and its own lean path then updates the same counters: single
/// read-modify-write instructions (not locked: no other thread writes them)
/// lose none of either's counts.
#[inline(always)]
fn add_to(c: *mut u64, by: u64) {
    // SAFETY: the counter is this thread's; one instruction reads and
    // writes it.
    unsafe {
        core::arch::asm!(
            "add qword ptr [{c}], {v}",
            c = in(reg) c,
            v = in(reg) by,
            options(nostack)
        )
    };
}

/// Ends a round of `CALL_SAMPLE_LEAN` lean calls (see `Tls::malloc_countdown`).
#[inline(always)]
fn next_round(countdown: &core::cell::Cell<i64>, rounds: &core::cell::Cell<u64>) {
    add_to(countdown.as_ptr() as *mut u64, CALL_SAMPLE_LEAN);
    add_to(rounds.as_ptr(), 1);
}

/// `malloc`'s lean path for a call whose duration is measured (one in
/// `CALL_SAMPLE_LEAN`), entered by a jump from `malloc` below, which has
/// counted the call already.
unsafe extern "C" fn malloc_lean_timed(size: usize) -> *mut c_void {
    let t = tls::tls();
    next_round(&t.malloc_countdown, &t.malloc_rounds);
    let t0 = ticks();
    // SAFETY: the real malloc, resolved when `lean` was set.
    let p = unsafe { core::mem::transmute::<usize, real::MallocFn>(t.real_malloc.get())(size) };
    let dt = ticks().wrapping_sub(t0).wrapping_mul(CALL_SAMPLE_LEAN);
    add_to(t.malloc_ticks.as_ptr(), dt);
    p
}

/// `free`'s lean path for a call whose duration is measured.
unsafe extern "C" fn free_lean_timed(p: *mut c_void) {
    let t = tls::tls();
    next_round(&t.free_countdown, &t.free_rounds);
    let t0 = ticks();
    // SAFETY: the real free, resolved when `lean` was set, on a block of
    // the real allocator (`free` checked it is not a boot block).
    unsafe { core::mem::transmute::<usize, real::FreeFn>(t.real_free.get())(p) };
    let dt = ticks().wrapping_sub(t0).wrapping_mul(CALL_SAMPLE_LEAN);
    add_to(t.free_ticks.as_ptr(), dt);
}

/// The start of `malloc`'s and `free`'s lean paths: rax = the offset of
/// this thread's TLS block from the thread pointer, so that `fs:[rax + N]`
/// is its field at N (one load fewer than forming the block's address); on
/// to label 2 (the full hook) unless `lean` is 1, `in_hook` 0 and the
/// argument (rdi) not zero. The flags are read as the single bytes they
/// are stored as: one 16-bit load over both could miss store forwarding from
/// the byte store that ended the previous hook.
macro_rules! lean_gate {
    () => {
        concat!(
            "mov rax, qword ptr [rip + __heapledger_tls_block@GOTTPOFF]\n",
            "cmp byte ptr fs:[rax + {lean}], 1\n",
            "jne 2f\n",
            "cmp byte ptr fs:[rax + {in_hook}], 0\n",
            "jne 2f\n",
            "test rdi, rdi\n",
            "jz 2f",
        )
    };
}

/// `malloc`'s entry: in `--sample-every` mode, the lean path, which
/// counts a call that will not be sampled and jumps to the real malloc with
/// the caller's frame untouched; otherwise, or for any call the full hook
/// must see, the trampoline above.
///
/// The lean path runs when the thread's TLS block says `lean` (a sampling
/// thread with live state) and not `in_hook`, the request is not zero-size,
/// no sample point falls in it, and its duration is not to be measured (one
/// call in `CALL_SAMPLE_LEAN` goes to `malloc_lean_timed`). It reads and
/// writes only the first line of the TLS block. The real malloc then runs
/// after the hook has returned, so `in_hook` is not set during it: an
/// allocator preloaded after heapledger that maps memory through the PLT has
/// those mappings recorded, as a program's would be.
///
/// # Safety
/// Called as C's malloc.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    core::arch::naked_asm!(
        ".cfi_startproc",
        lean_gate!(),
        // `--only-lib`: a caller in a chosen library or in the runtime
        // goes to the full hook (`data::only`).
        "mov ecx, dword ptr [rip + {gate_n}]",
        "test ecx, ecx",
        "jz 5f",
        "mov rdx, qword ptr [rsp]",
        "lea r8, [rip + {gate}]",
        "6:",
        "cmp rdx, qword ptr [r8]",
        "jb 7f",
        "cmp rdx, qword ptr [r8 + 8]",
        "jb 2f",
        "7:",
        "add r8, 16",
        "dec ecx",
        "jnz 6b",
        "5:",
        // Each counter changes in one instruction (see `add_to`).
        "sub qword ptr fs:[rax + {left}], rdi",
        "jle 4f",
        // Counts the call; one in CALL_SAMPLE_LEAN is timed.
        "sub qword ptr fs:[rax + {countdown}], 1",
        "jle 3f",
        "jmp qword ptr fs:[rax + {real}]",
        "3:",
        "jmp {timed}",
        "4:",
        // A sample point falls in this request: give the bytes back, and
        // let the full hook take it.
        "add qword ptr fs:[rax + {left}], rdi",
        "2:",
        frame_and_call!("rsi"),
        ".cfi_endproc",
        lean = const tls::TLS_LEAN,
        in_hook = const tls::TLS_IN_HOOK,
        left = const tls::TLS_LEFT,
        countdown = const tls::TLS_MALLOC_COUNTDOWN,
        real = const tls::TLS_REAL_MALLOC,
        timed = sym malloc_lean_timed,
        imp = sym malloc_impl,
        gate = sym only::GATE,
        gate_n = sym only::GATE_N,
    )
}

/// `free`'s entry: in `--sample-every` mode (and in a process that does not
/// record), the lean path, which counts a free whose block certainly was not
/// sampled and jumps to the real free; otherwise `free_full`.
///
/// The block certainly was not sampled when the counting filter's bucket
/// for its page is zero (`sampler::bucket`, computed the same way here).
/// Null pointers and the recorder's own boot blocks take the full hook,
/// which knows them: the gate sends null there, and the boot buffer's pages
/// are pinned in the filter before any thread can take a lean path
/// (`start::start`), which took 5 of this path's 22 instructions off (a
/// check of its own before). Like `malloc`'s, this path reads and writes
/// only the first line of the TLS block, and one byte of the filter.
///
/// # Safety
/// Called as C's free.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        lean_gate!(),
        // bucket = (p >> 12) & mask (`sampler::bucket`).
        "mov rcx, rdi",
        "shr rcx, 12",
        "and ecx, {mask}",
        "lea rdx, [rip + {filter}]",
        "cmp byte ptr [rdx + rcx], 0",
        "jne 2f",
        "sub qword ptr fs:[rax + {countdown}], 1",
        "jle 3f",
        "jmp qword ptr fs:[rax + {real}]",
        "3:",
        "jmp {timed}",
        "2:",
        "jmp {full}",
        ".cfi_endproc",
        lean = const tls::TLS_LEAN,
        in_hook = const tls::TLS_IN_HOOK,
        mask = const (1u64 << sampler::FILTER_BITS) - 1,
        filter = sym sampler::FILTER,
        countdown = const tls::TLS_FREE_COUNTDOWN,
        real = const tls::TLS_REAL_FREE,
        timed = sym free_lean_timed,
        full = sym free_full,
    )
}
