//! Per-thread state: the thread's counters and its unwinder, reached through
//! one thread-local pointer, plus the registry of all thread states.
//!
//! The thread-local is `const`-initialized and has no destructor (a
//! destructor would be registered with `calloc` on first use, from inside
//! `malloc`). The end of a thread is seen through a pthread key destructor,
//! which folds the thread's counters into `retired` and marks the pointer
//! dead; anything the thread still allocates after that (other destructors
//! run later) goes to one shared `orphan` state under a lock.

use crate::config;
use crate::counters::{Histogram, SizeHistogram, StackMap};
use crate::hooks::CALL_SAMPLE_LEAN;
use crate::sync::SpinLock;
use crate::unwind::Unwind;
use alloc::boxed::Box;
use core::cell::Cell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use heapledger_wire::AllocFn;

/// The fields every event touches come first, in declaration order, so that
/// they share two cache lines.
#[repr(C, align(64))]
pub struct ThreadState {
    /// Allocator calls seen, for sampling call durations.
    pub calls: u64,
    pub mem_ops: u64,
    /// True while this thread is inside a hook (the dump waits for it).
    pub busy: AtomicBool,
    /// Set in `--sample-every` mode.
    pub sampler: Option<crate::sampler::Sampler>,
    /// Per function (`AllocFn` order): calls, bytes requested, estimated ticks.
    pub stats: [(u64, u64, u64); AllocFn::COUNT],
    pub number: u64,
    pub stacks: StackMap,
    pub sizes: SizeHistogram,
    pub jumps: Histogram,
    /// Requested bytes alive not yet added to the shared counter.
    pub pending: i64,
    pub unwind: Option<Unwind>,
    pub unknown_frees: u64,
    pub truncated: u64,
    pub dead: bool,
    /// The thread's TLS block while it runs (null for the retired and
    /// orphan states), for its lean-path counters.
    pub tls: *const Tls,
    next: *mut ThreadState,
    /// xorshift state for picking the blocks whose lifetime is measured.
    lifetime_rng: u64,
    /// Blocks past their stack's head left to go before the next one whose
    /// lifetime is measured.
    lifetime_gap: u32,
    /// The thread's kernel id, to learn once it has ended whether it is
    /// gone (see `reusable`).
    tid: i32,
    /// The next state in the registry's queue of ended threads.
    ended_next: *mut ThreadState,
    /// For the [`FOLDED`] state, how many ended threads it sums.
    pub merged: u64,
}

/// The numbers of the states that are no thread's: counters of ended
/// threads (stacks, sizes), calls of threads with no state, the row of the
/// ended threads merged, and a state waiting to be reused. Rows of the
/// profile's list of threads are written for the numbers below these.
pub const RETIRED: u64 = u64::MAX;
pub const ORPHAN_NUMBER: u64 = u64::MAX - 1;
pub const FOLDED: u64 = u64::MAX - 2;
pub const SPARE: u64 = u64::MAX - 3;

/// Ended threads whose rows the profile keeps one by one: the states of
/// threads that ended before the last `KEEP_ENDED` are summed into one row
/// ([`FOLDED`]) and reused for new threads, so that a program that starts
/// threads without end (a thread per request) costs the recorder a bounded
/// memory, and its profile a bounded list.
pub const KEEP_ENDED: u64 = 1024;

impl ThreadState {
    /// Whether a block of a stack past its first blocks has its lifetime
    /// measured: one in `LIFETIME_ONE_IN`, at random, so that no period in
    /// the program's allocations lines up with the picks. The gaps between
    /// picks are drawn ahead (`lifetime_gap`), so that most blocks cost a
    /// decrement.
    #[inline(always)]
    pub fn lifetime_pick(&mut self) -> bool {
        if self.lifetime_gap != 0 {
            self.lifetime_gap -= 1;
            return false;
        }
        self.lifetime_gap = self.next_lifetime_gap();
        true
    }

    /// How many blocks fail their one-in-16 draw before one succeeds: each
    /// 4-bit nibble of a random word (xorshift64) is one draw, which
    /// succeeds when the nibble is 0.
    #[inline(never)]
    fn next_lifetime_gap(&mut self) -> u32 {
        const _: () = assert!(crate::hooks::LIFETIME_ONE_IN == 16);
        let mut gap = 0u32;
        loop {
            let mut x = self.lifetime_rng;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.lifetime_rng = x;
            // The lowest zero nibble of x sets the top bit of its nibble
            // here (higher ones may be wrong: a borrow runs up from it).
            const ONES: u64 = 0x1111_1111_1111_1111;
            let zero = x.wrapping_sub(ONES) & !x & (ONES << 3);
            if zero != 0 {
                return gap + zero.trailing_zeros() / 4;
            }
            gap = gap.saturating_add(16);
        }
    }
}

impl ThreadState {
    /// Per-function totals and memory operations, with the lean paths'
    /// counters of a running thread added.
    pub fn totals(&self) -> (u64, [(u64, u64, u64); AllocFn::COUNT]) {
        let mut stats = self.stats;
        let mut ops = self.mem_ops;
        if !self.dead && !self.tls.is_null() {
            if let Some(t) = self.copy_of_block() {
                add_lean(&mut stats, &mut ops, &t);
            }
        }
        (ops, stats)
    }

    /// A copy of this thread's TLS block, if the thread still runs with it.
    ///
    /// A state created after its thread's key destructors ran (an event in
    /// glibc's last clean-up of the thread) is never retired, and keeps a
    /// pointer to a block that a later thread may reuse (zeroed: read as a
    /// round of lean calls) or that went with its unmapped stack (reading it
    /// crashed the program at exit). So the block is copied with
    /// `process_vm_readv`, which fails instead of faulting, and used only if
    /// it still names this state as its own.
    fn copy_of_block(&self) -> Option<Tls> {
        let own = tls();
        if core::ptr::eq(self.tls, own) && core::ptr::eq(own.state.get(), self) {
            // The calling thread's own block (the one writing the profile),
            // read directly: `process_vm_readv` may be refused by a seccomp
            // filter.
            // SAFETY: this thread's live block; Tls is plain data.
            return Some(unsafe { core::ptr::read(own) });
        }
        let mut copy = core::mem::MaybeUninit::<Tls>::uninit();
        let len = core::mem::size_of::<Tls>();
        let local = libc::iovec {
            iov_base: copy.as_mut_ptr() as *mut _,
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: self.tls as *mut _,
            iov_len: len,
        };
        let _e = crate::sync::ErrnoGuard::new();
        // SAFETY: both iovecs describe `len` bytes; the kernel checks the
        // remote one and copies nothing it cannot read.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n != len as isize {
            return None;
        }
        // SAFETY: fully written by the kernel; Tls is plain data.
        let copy = unsafe { copy.assume_init() };
        core::ptr::eq(copy.state.get(), self).then_some(copy)
    }
}

fn add_lean(stats: &mut [(u64, u64, u64); AllocFn::COUNT], ops: &mut u64, t: &Tls) {
    let (mallocs, bytes, frees) = t.lean_counts();
    let m = &mut stats[AllocFn::Malloc as usize];
    m.0 += mallocs;
    m.1 += bytes;
    m.2 += t.malloc_ticks.get();
    let f = &mut stats[AllocFn::Free as usize];
    f.0 += frees;
    f.2 += t.free_ticks.get();
    *ops += mallocs + frees;
}

impl ThreadState {
    fn new(number: u64, with_unwind: bool) -> Self {
        let cfg = config::get();
        let unwind =
            (with_unwind && cfg.stack_mode != heapledger_wire::StackMode::None).then(|| {
                let (lo, hi) = stack_bounds();
                Unwind::new(
                    cfg.max_depth as usize,
                    cfg.stack_mode == heapledger_wire::StackMode::Dwarf,
                    lo,
                    hi,
                )
            });
        let mut s = ThreadState {
            number,
            busy: AtomicBool::new(false),
            stats: [(0, 0, 0); AllocFn::COUNT],
            mem_ops: 0,
            calls: 0,
            stacks: StackMap::new(),
            sizes: SizeHistogram::new(),
            jumps: Histogram::new(),
            pending: 0,
            unwind,
            sampler: (cfg.sample_every > 0).then(|| {
                crate::sampler::Sampler::new(
                    cfg.sample_every,
                    crate::hooks::ticks() ^ (number << 32) ^ 0x5eed,
                )
            }),
            unknown_frees: 0,
            truncated: 0,
            dead: false,
            tls: core::ptr::null(),
            next: null_mut(),
            lifetime_rng: 0x9E37_79B9_7F4A_7C15 ^ (number << 17) ^ 1,
            lifetime_gap: 0,
            tid: 0,
            ended_next: null_mut(),
            merged: 0,
        };
        s.lifetime_gap = s.next_lifetime_gap();
        s
    }
}

// SAFETY: a state is used by its own thread, or under the registry/orphan lock.
unsafe impl Send for ThreadState {}

pub struct Registry {
    pub head: *mut ThreadState,
    pub alive: u64,
    pub max_alive: u64,
    next_number: u64,
    /// Counters of threads that ended.
    pub retired: Option<Box<ThreadState>>,
    /// The states of ended threads, oldest first, and how many.
    ended_head: *mut ThreadState,
    ended_tail: *mut ThreadState,
    ended: u64,
    /// The row of the ended threads whose states were reused.
    pub folded: Option<Box<ThreadState>>,
}
// SAFETY: the raw pointers are only followed under the registry lock.
unsafe impl Send for Registry {}

pub static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: null_mut(),
    alive: 0,
    max_alive: 0,
    next_number: 0,
    retired: None,
    ended_head: null_mut(),
    ended_tail: null_mut(),
    ended: 0,
    folded: None,
});
pub static ORPHAN: SpinLock<Option<Box<ThreadState>>> = SpinLock::new(None);
pub static KEY: AtomicU64 = AtomicU64::new(u64::MAX);

const DEAD: *mut ThreadState = std::ptr::dangling_mut::<ThreadState>();

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
    /// are counted there; see `hooks::count_call`).
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
    /// (see `hooks::unrecorded`).
    pub own_calls: Cell<bool>,
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
        crate::signals::deferred();
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
fn stack_bounds() -> (u64, u64) {
    // SAFETY: pthread_self is always valid; the attr is initialized by
    // pthread_getattr_np and destroyed below. Any allocation it makes is
    // forwarded untracked (we are inside a hook).
    unsafe {
        // SAFETY: exported by ld.so.
        let main_end = __libc_stack_end as u64;
        if libc::getpid() == libc::gettid() {
            let hi = (main_end + 4095) & !4095;
            return (hi.saturating_sub(1 << 30), hi);
        }
        if tls().getattr_of.get() == libc::pthread_self() {
            return crate::maps::mapping_of(thread_pointer()).unwrap_or((0, 0));
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

/// This thread's stack as far as it may grow (the main thread's, down to
/// its size limit), for `side.rs`; (0, 0) if unknown.
pub fn room_bounds() -> (u64, u64) {
    // SAFETY: system calls with no preconditions; `__libc_stack_end` is
    // set by ld.so before any code runs.
    unsafe {
        if libc::getpid() == libc::gettid() {
            let hi = (__libc_stack_end as u64 + 4095) & !4095;
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

unsafe extern "C" fn on_thread_exit(p: *mut core::ffi::c_void) {
    let st = p as *mut ThreadState;
    let t = tls();
    let was = t.in_hook.replace(true);
    if core::ptr::eq(t.state.get(), st) {
        t.retired.set(st);
    }
    retire(st);
    t.state.set(DEAD);
    crate::side::thread_ends(t);
    crate::altstack::thread_ends(t);
    leave_recorder(t, was);
}

/// Folds a finished thread's counters into `retired`.
fn retire(st: *mut ThreadState) {
    let epoch = crate::counters::epoch();
    let mut reg = REGISTRY.lock();
    // SAFETY: st is a registered, live state owned by the exiting thread.
    let s = unsafe { &mut *st };
    let t = tls();
    // The exiting thread's own block, if it still names this state: glibc
    // may hand a destructor a value that an earlier thread on the same
    // (cached) stack set in its last clean-up; that thread's counters are
    // gone with it.
    if core::ptr::eq(s.tls, t) && core::ptr::eq(t.state.get(), st) {
        t.lean.set(false);
        add_lean(&mut s.stats, &mut s.mem_ops, t);
        t.reset_lean(t.left.get());
    }
    s.tls = core::ptr::null();
    crate::counters::ALIVE.fetch_add(s.pending, Ordering::Relaxed);
    s.pending = 0;
    let r = reg
        .retired
        .get_or_insert_with(|| Box::new(ThreadState::new(RETIRED, false)));
    for (id, ps) in s.stacks.iter() {
        let pending = ps.alive - ps.flushed;
        if pending != 0 {
            crate::stacks::entry(id)
                .alive
                .fetch_add(pending, Ordering::Relaxed);
        }
        let mut ps = *ps;
        ps.flushed = ps.alive;
        r.stacks.get(id).absorb(&ps, epoch);
    }
    r.sizes.absorb(&s.sizes);
    r.jumps.absorb(&s.jumps);
    r.unknown_frees += s.unknown_frees;
    r.truncated += s.truncated;
    s.unknown_frees = 0;
    s.truncated = 0;
    s.stacks = StackMap::new();
    s.sizes = SizeHistogram::new();
    s.jumps = Histogram::new();
    s.unwind = None;
    s.dead = true;
    reg.alive -= 1;
    // Queued to be reused once enough threads have ended after it.
    s.ended_next = null_mut();
    match reg.ended_tail.is_null() {
        true => reg.ended_head = st,
        // SAFETY: a registered state, under the lock.
        false => unsafe { (*reg.ended_tail).ended_next = st },
    }
    reg.ended_tail = st;
    reg.ended += 1;
}

/// The oldest ended state, taken off the queue with its row summed into
/// [`FOLDED`] (its number set to [`SPARE`]), if more than [`KEEP_ENDED`]
/// threads have ended after it and its thread is gone.
///
/// "Gone" is the kernel's word: a thread still runs its last clean-up
/// after heapledger's key destructor retired its state (other libraries'
/// destructors, whose calls still count in that state; see
/// `hooks::count_call`), so the state is reused only once `tgkill` no
/// longer finds the thread. (A new thread given the same id meanwhile
/// makes it wait for that one: late, never early.) A thread that lingers
/// goes to the back of the queue, and the next oldest is tried, so that
/// it holds up no other: two system calls at most per new thread.
fn reusable(reg: &mut Registry) -> Option<*mut ThreadState> {
    for _ in 0..2 {
        if reg.ended <= KEEP_ENDED {
            return None;
        }
        let st = reg.ended_head;
        // SAFETY: a registered state, under the lock.
        let s = unsafe { &mut *st };
        reg.ended_head = s.ended_next;
        s.ended_next = null_mut();
        // SAFETY: no memory is passed; errno is restored by the caller.
        let gone = unsafe {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), s.tid, 0) == -1
                && *libc::__errno_location() == libc::ESRCH
        };
        if gone {
            if reg.ended_head.is_null() {
                reg.ended_tail = null_mut();
            }
            reg.ended -= 1;
            return Some(fold(reg, s));
        }
        // SAFETY: the tail is a registered state (the queue held more than
        // one, as KEEP_ENDED > 0), under the lock.
        unsafe { (*reg.ended_tail).ended_next = st };
        reg.ended_tail = st;
    }
    None
}

/// Sums the row of `s`, an ended thread's state, into [`FOLDED`], and
/// marks `s` spare.
fn fold(reg: &mut Registry, s: &mut ThreadState) -> *mut ThreadState {
    let f = reg
        .folded
        .get_or_insert_with(|| Box::new(ThreadState::new(FOLDED, false)));
    for (sum, one) in f.stats.iter_mut().zip(s.stats) {
        sum.0 += one.0;
        sum.1 += one.1;
        sum.2 += one.2;
    }
    f.mem_ops += s.mem_ops;
    f.merged += 1;
    s.stats = [(0, 0, 0); AllocFn::COUNT];
    s.mem_ops = 0;
    s.number = SPARE;
    s
}

/// This thread's state, creating it on first use; None once the thread is
/// ending (use the orphan state then).
#[inline(always)]
pub fn current(t: &Tls) -> *mut ThreadState {
    let s = t.state.get();
    if !s.is_null() {
        return s;
    }
    create(t)
}

/// This thread's state if it has one (it may be [`DEAD`]); null if not.
#[inline(always)]
pub fn existing(t: &Tls) -> *mut ThreadState {
    t.state.get()
}

#[inline(always)]
pub fn is_dead(s: *mut ThreadState) -> bool {
    s == DEAD
}

/// Neither null nor [`DEAD`], in one comparison: both sit below every
/// real state's address.
#[inline(always)]
pub fn is_live(s: *mut ThreadState) -> bool {
    const _: () = assert!(core::mem::align_of::<ThreadState>() < 4096);
    s as usize > DEAD as usize
}

/// In a process that does not record (`State::Off`), opens the lean paths
/// of this thread for good, with no sample point ever: its `malloc` and
/// `free` then cost a few instructions, not a full hook's entry each.
#[cold]
pub fn lean_when_off(t: &Tls) {
    let r = &crate::real::REAL;
    let (m, f) = (
        r.malloc.load(Ordering::Acquire),
        r.free.load(Ordering::Acquire),
    );
    if m != 0 && f != 0 && !t.lean.get() {
        t.reset_lean(i64::MAX);
        t.real_malloc.set(m);
        t.real_free.set(f);
        t.lean.set(true);
    }
}

/// Creates this thread's state (`t` is its TLS block) and, when sampling,
/// opens its lean paths.
#[cold]
fn create(t: &Tls) -> *mut ThreadState {
    let _e = crate::sync::ErrnoGuard::new();
    let s = new_state();
    t.state.set(s);
    // SAFETY: just created, ours.
    let st = unsafe { &mut *s };
    st.tls = t;
    // Zero counts (a zero-filled block would read as one round of calls).
    t.reset_lean(0);
    // Where heapledger's handler saves the profile if the thread overflows
    // its stack.
    if crate::state::get() == crate::state::State::Recording {
        crate::altstack::give(t);
    }
    if let Some(sampler) = st.sampler.as_mut() {
        let r = &crate::real::REAL;
        let (m, f) = (
            r.malloc.load(Ordering::Acquire),
            r.free.load(Ordering::Acquire),
        );
        t.reset_lean(sampler.first_gap());
        if m != 0 && f != 0 {
            t.real_malloc.set(m);
            t.real_free.set(f);
            t.lean.set(true);
        }
    }
    s
}

fn new_state() -> *mut ThreadState {
    let (number, spare) = {
        let mut reg = REGISTRY.lock();
        reg.next_number += 1;
        (reg.next_number - 1, reusable(&mut reg))
    };
    let mut fresh = ThreadState::new(number, true);
    // SAFETY: no memory is passed.
    fresh.tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    let st = match spare {
        Some(st) => {
            let _reg = REGISTRY.lock();
            // SAFETY: a spare state, linked in the registry and used by no
            // thread (its own is gone); written under the lock, as the
            // profile reads it. What it held is summed in FOLDED, and its
            // tables are empty (emptied when its thread ended), so the
            // drop frees nothing.
            unsafe {
                fresh.next = (*st).next;
                *st = fresh;
            }
            st
        }
        None => Box::into_raw(Box::new(fresh)),
    };
    {
        let mut reg = REGISTRY.lock();
        if spare.is_none() {
            // SAFETY: st is fresh and ours.
            unsafe { (*st).next = reg.head };
            reg.head = st;
        }
        reg.alive += 1;
        reg.max_alive = reg.max_alive.max(reg.alive);
    }
    let key = KEY.load(Ordering::Relaxed);
    if key != u64::MAX {
        // SAFETY: the key was created in init; setspecific does not allocate
        // for the first 32 keys and is forwarded untracked otherwise.
        unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, st as *const _) };
    }
    st
}

/// In a child after `fork`: the forking thread, the child's one thread,
/// has a new kernel id, which its state must carry (see `reusable`).
pub fn forked() {
    let s = tls().state.get();
    if is_live(s) {
        // SAFETY: this thread's own state; no other thread exists.
        unsafe { (*s).tid = libc::syscall(libc::SYS_gettid) as i32 };
    }
}

pub fn init_key() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: on_thread_exit has the destructor signature.
    if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } == 0 {
        KEY.store(key as u64, Ordering::Relaxed);
    }
}

/// Runs `f` on every thread state (live, ended) and the retired and orphan ones.
///
/// When a frame of this thread below the caller holds the registry (the
/// profile written from an `_exit` in a signal handler that interrupted a
/// thread's start or end), the list is read without the lock: states are
/// linked in whole and never unlinked (a reused state is rewritten in
/// place: its row may then be read half old, half new, with empty tables
/// either way), and no other thread can change it meanwhile. The retired
/// and folded states, which may be half merged, are left out.
pub fn for_each_state(mut f: impl FnMut(&ThreadState)) {
    let reg = REGISTRY.lock_unless_held_here();
    // SAFETY: the lock is held, or held by a frame of this thread that
    // cannot run until this returns (see above); only read here.
    let r = reg
        .as_deref()
        .unwrap_or_else(|| unsafe { &*REGISTRY.get_unchecked() });
    let mut p = r.head;
    while !p.is_null() {
        // SAFETY: registered states are never freed.
        let s = unsafe { &*p };
        // Give a thread inside a hook a moment to leave it.
        for _ in 0..1000 {
            if !s.busy.load(Ordering::Acquire) {
                break;
            }
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
        f(s);
        p = s.next;
    }
    if let Some(r) = reg.as_ref().and_then(|g| g.retired.as_deref()) {
        f(r);
    }
    if let Some(r) = reg.as_ref().and_then(|g| g.folded.as_deref()) {
        f(r);
    }
    drop(reg);
    if let Some(g) = ORPHAN.try_lock_for(1000) {
        if let Some(o) = g.as_deref() {
            f(o);
        }
    }
}

pub fn new_orphan() -> Box<ThreadState> {
    Box::new(ThreadState::new(ORPHAN_NUMBER, false))
}
