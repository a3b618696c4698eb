//! The thread-local block: one per thread, in initial-exec TLS, read and
//! written by the lean paths in assembly (`hooks/lean.rs`) at the `TLS_*`
//! offsets below. It is `const`-initialized (zero-filled) and has no
//! destructor (a destructor would be registered with `calloc` on first use,
//! from inside `malloc`).

use super::state::ThreadState;
use crate::base::clock::CALL_SAMPLE_LEAN;
// cycle kept: a fatal signal that arrives while the thread is inside the
// recorder is put off (`signals::on_fatal` sets `pending_signal`) until the
// thread leaves it, here; acting on it is the signals' work, and the way
// out of the recorder is this block's, so each side calls the other.
use crate::process::signals;
use core::cell::Cell;

/// A thread's TLS block. The first line is what the lean paths of
/// `--sample-every` read and write (the `malloc` entry reaches it from
/// assembly, at the `TLS_*` offsets below); everything else of the thread
/// is behind `state`.
#[repr(C, align(64))]
pub struct Tls {
    pub state: Cell<*mut ThreadState>,
    pub in_hook: Cell<bool>,
    /// The lean paths may run: a sampling thread with live state, or any
    /// thread of a process that does not record (`lean_when_off`).
    pub lean: Cell<bool>,
    /// A terminating signal that arrived while this thread was inside the
    /// recorder, to be acted on when it leaves (see `signals::on_fatal`).
    pub pending_signal: Cell<u8>,
    /// Where a hook may run in place: at a stack pointer `sp` with
    /// `sp - stack_floor <= stack_span` (both 0 until the first hook
    /// learns them); elsewhere it takes the side stack (see `side.rs`).
    pub stack_span: Cell<u32>,
    /// Bytes left before the next sample point.
    pub left: Cell<i64>,
    /// Lean calls left before the next one whose duration is measured. A
    /// lean call subtracts one; the call that brings it to zero or below
    /// adds `CALL_SAMPLE_LEAN` back and counts a round. The calls so far
    /// are then `rounds * N + N - countdown` (`Tls::lean_counts`): one
    /// read-modify-write per call counts the call and picks the timed ones.
    pub malloc_countdown: Cell<i64>,
    pub free_countdown: Cell<i64>,
    /// The real functions, copied here so that the lean paths touch one line.
    pub real_malloc: Cell<usize>,
    pub real_free: Cell<usize>,
    /// See `stack_span`.
    pub stack_floor: Cell<u64>,
    // Second line: touched once in `CALL_SAMPLE_LEAN` lean calls, or by the
    // full hooks.
    pub malloc_rounds: Cell<u64>,
    pub free_rounds: Cell<u64>,
    /// `left` as it would be if only the full hooks had taken bytes since
    /// the last sample point: `seg - left` is what the lean `malloc` took.
    pub seg: Cell<i64>,
    /// Bytes the lean `malloc` took before the last sample point.
    pub lean_bytes: Cell<u64>,
    /// Estimated ticks spent in the lean paths' calls (one in
    /// `CALL_SAMPLE_LEAN` is measured).
    pub malloc_ticks: Cell<u64>,
    pub free_ticks: Cell<u64>,
    /// The state this thread had, once retired (its last clean-up's calls
    /// are counted there; see `hooks::alloc::count_call`).
    pub retired: Cell<*mut ThreadState>,
    /// The thread a call of `pthread_getattr_np` made by this thread is
    /// about, while it runs (0 otherwise); see `stack_bounds`.
    pub getattr_of: Cell<u64>,
    // Third line: rarely touched.
    /// Top of this thread's side stack, 0 while it has none (`side.rs`).
    pub side_top: Cell<u64>,
    /// The mapping of this thread's alternate signal stack, 0 while it has
    /// none of heapledger's (`altstack.rs`).
    pub alt_base: Cell<u64>,
    /// A frame of this thread runs on the side stack.
    pub side_busy: Cell<bool>,
    /// This thread's stack as `pthread_getattr_np` gave it, once asked
    /// (see `stack_bounds`).
    pub bounds: Cell<(u64, u64)>,
    /// The recorder itself is calling a C library function that may
    /// allocate: those calls are passed through and are not the program's
    /// (see `hooks::enter::unrecorded`).
    pub own_calls: Cell<bool>,
    /// The program switched recording off for this thread
    /// (`heapledger_disable`): its allocations are not recorded; its frees
    /// still are, of blocks recorded before or by other threads.
    pub disabled: Cell<bool>,
    /// `--stack enter-exit`: the call sites of the functions this thread
    /// entered and has not left (`hooks::enter_exit`), outermost first, in
    /// a buffer of `shadow::CAP` (null until the first entry), and how many
    /// it is in (past the buffer's end too).
    pub shadow: Cell<*mut u64>,
    pub shadow_depth: Cell<u32>,
}

impl Tls {
    /// Calls and bytes the lean paths handled: (mallocs, malloc bytes,
    /// frees). They are folded into the thread's `stats` when it ends or
    /// is dumped.
    pub fn lean_counts(&self) -> (u64, u64, u64) {
        let n = CALL_SAMPLE_LEAN as i64;
        let calls = |rounds: &Cell<u64>, countdown: &Cell<i64>| {
            (rounds.get() as i64)
                .wrapping_mul(n)
                .wrapping_add(n - countdown.get())
                .max(0) as u64
        };
        let bytes = (self.seg.get().wrapping_sub(self.left.get())).max(0) as u64;
        (
            calls(&self.malloc_rounds, &self.malloc_countdown),
            self.lean_bytes.get().wrapping_add(bytes),
            calls(&self.free_rounds, &self.free_countdown),
        )
    }

    /// Sets the lean counters to zero, with `left` bytes before the next
    /// sample point.
    pub fn reset_lean(&self, left: i64) {
        let n = CALL_SAMPLE_LEAN as i64;
        self.left.set(left);
        self.seg.set(left);
        self.lean_bytes.set(0);
        self.malloc_countdown.set(n);
        self.free_countdown.set(n);
        self.malloc_rounds.set(0);
        self.free_rounds.set(0);
        self.malloc_ticks.set(0);
        self.free_ticks.set(0);
    }
}

pub const TLS_IN_HOOK: usize = core::mem::offset_of!(Tls, in_hook);
pub const TLS_LEAN: usize = core::mem::offset_of!(Tls, lean);
pub const TLS_LEFT: usize = core::mem::offset_of!(Tls, left);
pub const TLS_MALLOC_COUNTDOWN: usize = core::mem::offset_of!(Tls, malloc_countdown);
pub const TLS_FREE_COUNTDOWN: usize = core::mem::offset_of!(Tls, free_countdown);
pub const TLS_REAL_MALLOC: usize = core::mem::offset_of!(Tls, real_malloc);
pub const TLS_REAL_FREE: usize = core::mem::offset_of!(Tls, real_free);
const _: () = assert!(TLS_REAL_FREE + 8 <= 64);
// Read by every full hook as it leaves, beside `in_hook`.
const _: () = assert!(core::mem::offset_of!(Tls, pending_signal) < 64);

/// Leaves the recorder on this thread (`in_hook` back to `was`); from the
/// outermost level, acts on a terminating signal that arrived meanwhile.
#[inline(always)]
pub fn leave_recorder(t: &Tls, was: bool) {
    t.in_hook.set(was);
    if !was && t.pending_signal.get() != 0 {
        signals::deferred();
    }
}

// The thread-local block, in initial-exec TLS.
//
// Rust's `thread_local!` in a cdylib uses the general-dynamic model: every
// access calls `__tls_get_addr`, which cost about 5% of a workload that only
// forwards allocator calls (Python building strings: 0.66 s against 0.61 s
// with initial-exec). Stable Rust has no `#[thread_local]`, so the block is
// declared here in assembly and reached as initial-exec code is: the dynamic
// linker stores its offset from the thread pointer in a GOT slot
// (R_X86_64_TPOFF64), and an access is two loads. A library with
// initial-exec TLS must be loaded at start-up (LD_PRELOAD), which is the only
// way heapledger's is loaded; `dlopen` of it may be refused for lack of static
// TLS space, as it is for other such libraries. The block is zero-filled:
// a null state pointer, `in_hook` and `lean` false, counters at zero.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".balign 64",
    ".globl __heapledger_tls_block",
    ".hidden __heapledger_tls_block",
    ".type __heapledger_tls_block,@object",
    ".size __heapledger_tls_block, 192",
    "__heapledger_tls_block:",
    ".zero 192",
    ".popsection",
);

const _: () = assert!(core::mem::size_of::<Tls>() <= 192 && core::mem::align_of::<Tls>() <= 64);
// The full hooks' fields (state, in_hook, the stack check) share the first line.
const _: () = assert!(core::mem::offset_of!(Tls, stack_floor) < 64);

/// This thread's block.
#[inline(always)]
pub fn tls() -> &'static Tls {
    let p: *const Tls;
    // SAFETY: fs:0 holds the thread pointer on x86-64 Linux; the GOT slot
    // holds the block's offset from it, fixed for the process's life.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + __heapledger_tls_block@GOTTPOFF]",
            p = out(reg) p,
            options(pure, readonly, nostack)
        );
        // SAFETY: the block is this thread's, zero-filled (a valid `Tls`),
        // and lives as long as the thread; it is only used by this thread.
        &*p
    }
}
