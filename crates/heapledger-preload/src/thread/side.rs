//! Running a hook on a stack of the recorder's own when the program's is
//! short.
//!
//! A hook needs stack of its own: about 9 KiB for a DWARF capture (framehop
//! evaluates unwind rules in fixed buffers on the stack, so that unwinding
//! never allocates), 11 KiB for a thread's first event (its unwinder's cache
//! is built), several times that in a debug build. A thread started with
//! `PTHREAD_STACK_MIN` (glibc's own helper thread for `SIGEV_THREAD` timers
//! is one), a coroutine on a small stack, or a handler on a small
//! `sigaltstack` has less left than that, and the program, which runs fine
//! alone, would crash under heapledger.
//!
//! So each hook first compares its stack pointer with the thread's stack:
//! when it is within [`NEED`] bytes of the low end, or not on the thread's
//! stack at all, the hook's body runs on a side stack, mapped for the
//! thread the first time it needs one and unmapped when the thread ends.
//! The unwinder is not affected: it walks the program's frames from the
//! record the trampoline pushed, wherever the recorder's own frames are.

use crate::base::arena;
use crate::base::sync;
use crate::base::sync::SpinLock;
use crate::thread::bounds;
use crate::thread::state;
use crate::thread::tls::{self, Tls};
use core::mem::MaybeUninit;

/// Stack a hook may use, with room for the real allocator below it.
const NEED: u64 = if cfg!(debug_assertions) {
    192 << 10
} else {
    48 << 10
};

/// Size of a side stack (touched only as deep as it is used), and the
/// inaccessible page below it that turns an overflow into a fault.
const SIDE: usize = if cfg!(debug_assertions) {
    1 << 20
} else {
    256 << 10
};
const GUARD: usize = 4096;

/// `stack_floor` and `stack_span` of a thread whose stack is too small, or
/// unknown: every hook takes the side stack.
const NOWHERE: (u64, u32) = (1, 0);

#[inline(always)]
fn stack_pointer() -> u64 {
    let sp: u64;
    // SAFETY: reads rsp.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// Runs `f`, a hook's body, on the side stack if this thread's stack is
/// short here. In place, it costs a load, a subtraction and a comparison.
#[inline(always)]
pub fn roomy<R>(f: impl FnOnce(&Tls) -> R) -> R {
    let t = tls::tls();
    if stack_pointer().wrapping_sub(t.stack_floor.get()) <= t.stack_span.get() as u64 {
        f(t)
    } else {
        elsewhere(t, f, true)
    }
}

/// Stack that making a thread's state takes: the state and the unwinder's
/// caches are built on the stack before they are moved to the recorder's
/// memory (framehop's `gimli::UnwindContext` alone is about 30 KiB), more
/// than a hook's `NEED` in a test build. Under `ulimit -s 64` the main
/// thread made its state in place and died of SIGSEGV in one run in two.
pub const STATE_NEED: u64 = 128 << 10;

/// Runs `f`, a cold path that needs up to `need` bytes of stack, in place
/// where this thread's stack has that much below the stack pointer (or a
/// frame of this thread is on its side stack already), and otherwise on
/// its side stack (in place where none can be made).
pub fn with_room<R>(need: u64, f: impl FnOnce() -> R) -> R {
    let t = tls::tls();
    let (floor, span) = (t.stack_floor.get(), t.stack_span.get() as u64);
    let above = stack_pointer().wrapping_sub(floor);
    // The floor lies `NEED` above the lowest address the stack may reach.
    let room = if span != 0 && above <= span {
        above + NEED
    } else {
        0
    };
    if room >= need || t.side_busy.get() {
        return f();
    }
    on_side(t, f)
}

/// `roomy` for writing the profile, which needs more stack than a hook and
/// may run where a hook would only forward (inside the recorder, after the
/// thread's state was retired): `exit` called from a thread with a small
/// stack writes it there.
pub fn deep<R>(f: impl FnOnce() -> R) -> R {
    let t = tls::tls();
    if stack_pointer().wrapping_sub(t.stack_floor.get()) <= t.stack_span.get() as u64 {
        f()
    } else {
        elsewhere(t, |_| f(), false)
    }
}

#[cold]
#[inline(never)]
fn elsewhere<R>(t: &Tls, f: impl FnOnce(&Tls) -> R, hook: bool) -> R {
    // In place: a hook called from inside the recorder (it only forwards),
    // or after the thread's state was retired (the orphan state captures no
    // stack); anything while a frame of this thread uses the side stack
    // (on it, it goes on below; elsewhere, a handler on an alternate signal
    // stack that interrupted it must not run over it).
    if (hook && (t.in_hook.get() || state::is_dead(t.state.get()))) || t.side_busy.get() {
        return f(t);
    }
    let sp = stack_pointer();
    if t.stack_floor.get() == 0 && t.stack_span.get() == 0 {
        learn_aside(t);
        if sp.wrapping_sub(t.stack_floor.get()) <= t.stack_span.get() as u64 {
            return f(t);
        }
    }
    on_side(t, || f(tls::tls()))
}

/// Runs `f` on this thread's side stack (mapped when first needed), which
/// no frame of this thread uses (`side_busy` is clear); in place where no
/// memory for it can be had, as it would run without this.
fn on_side<R>(t: &Tls, f: impl FnOnce() -> R) -> R {
    let top = match t.side_top.get() {
        0 => map_side(t),
        top => top,
    };
    if top == 0 {
        return f();
    }
    t.side_busy.set(true);
    // SAFETY: `top` is the top of this thread's side stack, unused: no
    // frame of this thread runs on it (`side_busy`, checked by the caller).
    let r = unsafe { call_on(top, f) };
    t.side_busy.set(false);
    r
}

/// The stack `learn` runs on, one for all threads, taken in turn (a thread
/// learns once). Learning calls the C library's `pthread_getattr_np`,
/// whose first call in a process binds `realloc` lazily, and glibc's lazy
/// binder saves the vector registers on the stack: on a CPU with AVX-512
/// about 3 KiB more than elsewhere (more again with AMX), which a thread
/// started with `PTHREAD_STACK_MIN` that has used 8 KiB of it does not
/// have (`tests/small_stacks.rs` crashed there on an AMD EPYC).
#[repr(C, align(16))]
pub struct LearnStack([u8; LEARN_STACK]);

const LEARN_STACK: usize = 64 << 10;

pub static LEARNING: SpinLock<LearnStack> = SpinLock::new(LearnStack([0; LEARN_STACK]));

/// `learn` on the learning stack; in place where this thread holds it
/// already (a signal handler that interrupted its learning).
fn learn_aside(t: &Tls) {
    match LEARNING.lock_unless_held_here() {
        Some(mut stack) => {
            let top = stack.0.as_mut_ptr_range().end as u64;
            // SAFETY: the top of a 16-byte aligned stack that only the
            // holder of `LEARNING` uses.
            unsafe { call_on(top, || learn(t)) }
        }
        None => learn(t),
    }
}

/// Sets the thread's stack floor and span, the first time.
fn learn(t: &Tls) {
    let was = t.in_hook.replace(true);
    let (lo, hi) = bounds::room_bounds();
    tls::leave_recorder(t, was);
    // A stack over 4 GiB runs hooks in place in its top 4 GiB only.
    let floor = lo
        .saturating_add(NEED)
        .max(hi.saturating_sub(u32::MAX as u64));
    let (floor, span) = if lo != 0 && hi > floor {
        (floor, (hi - floor) as u32)
    } else {
        NOWHERE
    };
    t.stack_floor.set(floor);
    t.stack_span.set(span);
}

fn map_side(t: &Tls) -> u64 {
    let base = arena::map_stack(SIDE + GUARD);
    if base.is_null() {
        return 0;
    }
    let _e = sync::ErrnoGuard::new();
    // SAFETY: the first page of the mapping just made.
    unsafe { libc::syscall(libc::SYS_mprotect, base, GUARD, libc::PROT_NONE) };
    let top = base as u64 + (SIDE + GUARD) as u64;
    t.side_top.set(top);
    top
}

/// At the thread's end (its state retired): gives the side stack back; the
/// hooks that still come run in place (see `elsewhere`).
pub fn thread_ends(t: &Tls) {
    let top = t.side_top.replace(0);
    if top != 0 {
        // SAFETY: the mapping made by `map_side`; no frame runs on it (the
        // thread's end is not reached from inside a hook).
        unsafe { arena::unmap_stack((top - (SIDE + GUARD) as u64) as *mut u8, SIDE + GUARD) };
    }
}

/// Calls `f` with the stack pointer at `top`, and returns its value.
///
/// # Safety
/// `top` must be the 16-byte aligned top of a stack that nothing else uses.
unsafe fn call_on<R, F: FnOnce() -> R>(top: u64, f: F) -> R {
    let mut slot: (MaybeUninit<F>, MaybeUninit<R>) = (MaybeUninit::new(f), MaybeUninit::uninit());
    extern "C" fn run<R, F: FnOnce() -> R>(slot: *mut (MaybeUninit<F>, MaybeUninit<R>)) {
        // SAFETY: `call_on` passes its slot, whose closure is initialized
        // and taken once, here.
        let s = unsafe { &mut *slot };
        let f = unsafe { s.0.assume_init_read() };
        s.1.write(f());
    }
    // SAFETY: r12 (callee-saved) keeps the program's stack pointer across
    // the call; `run` is an ordinary C function on a fresh stack.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {run}",
            "mov rsp, r12",
            top = in(reg) top,
            run = sym run::<R, F>,
            in("rdi") &raw mut slot,
            out("r12") _,
            clobber_abi("C"),
        );
        slot.1.assume_init()
    }
}
