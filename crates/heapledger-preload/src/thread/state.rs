//! A thread's state: its counters and its unwinder, reached through one
//! pointer in its TLS block (`tls.rs`), plus the registry of all thread
//! states. How states are made, retired and reused is `life.rs`.

use super::bounds::stack_bounds;
use super::life::create;
use super::tls::{tls, Tls};
use crate::base::clock;
use crate::base::config;
use crate::base::sync;
use crate::base::sync::SpinLock;
use crate::data::counters;
use crate::data::counters::{Histogram, SizeHistogram, StackMap};
use crate::data::sampler;
use crate::data::stackmap::Packed;
use crate::data::unwind::Unwind;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use heapledger_wire::AllocFn;

/// The fields every event touches come first, in declaration order, so that
/// they share two cache lines.
#[repr(C, align(64))]
pub struct ThreadState {
    /// Calls left before the next one timed, and the generator that draws
    /// the gaps (see `base::clock::Clock::start`).
    pub calls: u64,
    pub mem_ops: u64,
    /// True while this thread is inside a hook (the dump waits for it).
    pub busy: AtomicBool,
    /// Set while a checkpoint reads the thread's tables: the thread waits
    /// at the door of its hooks (`freeze.rs`).
    pub frozen: AtomicBool,
    /// Set in `--sample-every` mode.
    pub sampler: Option<sampler::Sampler>,
    /// Per function (`AllocFn` order): calls, bytes requested, estimated ticks.
    pub stats: [(u64, u64, u64); AllocFn::COUNT],
    /// Recorded allocations and their bytes, frees and theirs (the
    /// timeline's rates; sampled ones weighed as in the level).
    pub moves: [u64; 4],
    /// The block this thread allocated last, while it is alive (0 once it
    /// or any other block is released here, and in `--sample-every` mode):
    /// released, it is a temporary block (`Totals::temporary`).
    pub last_alloc: u64,
    /// The timeline's bucket (`timeline::EPOCH`) of `seg_high`, and the
    /// most blocks of this thread's (allocated less freed) alive in it.
    seg_epoch: u32,
    seg_high: u64,
    pub number: u64,
    pub stacks: StackMap,
    /// The retired state's counters per stack, packed (`stackmap::Packed`:
    /// the tables of threads that ended or handed them over); empty in
    /// every other state.
    pub packed: Packed,
    pub sizes: SizeHistogram,
    pub jumps: Histogram,
    /// The scatter's counts (`scatter.rs`): allocations by (time key,
    /// size cell), freed blocks by (size cell, lifetime cell).
    pub size_time: Histogram,
    pub life_size: Histogram,
    /// Events left to count one by one, and before the next pick.
    pub(super) scatter_head: u32,
    pub(super) scatter_gap: u32,
    /// The thread's stack (0, 0 for the states of no thread), the most of
    /// it in use at an allocation (bytes above the hook's frame), and the
    /// stack of that allocation.
    stack_lo: u64,
    stack_top: u64,
    pub stack_peak: u64,
    pub stack_peak_id: u32,
    pub unwind: Option<Unwind>,
    pub unknown_frees: u64,
    /// The waits this thread made (`data::timelog`), from its first.
    pub waits: Option<Box<crate::data::timelog::TimeLog>>,
    /// A wait the program began (`heapledger_wait_begin`) and has not
    /// ended: its kind's code, start (ns) and stack.
    pub open_wait: Option<(u8, u64, u32)>,
    /// The program's own traceback and time logs (`user.rs`), from its
    /// first push or log.
    pub user: Option<Box<super::user::User>>,
    pub truncated: u64,
    pub dead: bool,
    /// The thread's TLS block while it runs (null for the retired and
    /// orphan states), for its lean-path counters.
    pub tls: *const Tls,
    pub(super) next: *mut ThreadState,
    /// xorshift state for picking the blocks whose lifetime is measured.
    lifetime_rng: u64,
    /// Blocks past their stack's head left to go before the next one whose
    /// lifetime is measured.
    lifetime_gap: u32,
    /// The thread's kernel id, to learn once it has ended whether it is
    /// gone (see `reusable`).
    pub(super) tid: i32,
    /// The next state in the registry's queue of ended threads.
    pub(super) ended_next: *mut ThreadState,
    /// For the [`FOLDED`] state, how many ended threads it sums.
    pub merged: u64,
    /// An ended thread's allocations per stack (`kept.rs`).
    pub kept: super::kept::Kept,
    /// Entries this thread handed over since the slack last doubled
    /// (`stackmap::handed`).
    pub handed: u64,
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

    /// After an allocation: this thread's count of its blocks alive, if the
    /// most in the timeline's current bucket.
    #[inline(always)]
    pub fn note_blocks(&mut self) {
        let net = self.moves[0].wrapping_sub(self.moves[2]);
        let e = crate::data::timeline::EPOCH.load(Ordering::Relaxed);
        if self.seg_epoch != e {
            self.seg_epoch = e;
            self.seg_high = net;
        } else if (net as i64) > (self.seg_high as i64) {
            self.seg_high = net;
        }
    }

    /// An allocation of stack `id` whose hook's frame is at `fp`: the
    /// thread's stack in use, if the most so far (a frame on another stack,
    /// a signal handler's, is left out).
    /// The top of the traceback the program pushed on this thread
    /// (`data::traceback::NONE`: none).
    #[inline(always)]
    pub fn user_top(&self) -> u32 {
        self.user
            .as_ref()
            .map_or(crate::data::traceback::NONE, |u| u.top)
    }

    /// Whether `addr` lies on this thread's own stack.
    pub fn on_stack(&self, addr: u64) -> bool {
        addr > self.stack_lo && addr <= self.stack_top
    }

    #[inline(always)]
    pub fn note_stack_use(&mut self, fp: u64, id: u32) {
        let used = self.stack_top.wrapping_sub(fp);
        if used > self.stack_peak && used <= self.stack_top - self.stack_lo {
            self.stack_peak = used;
            self.stack_peak_id = id;
        }
    }

    /// A gap of the scatter's picks (`scatter.rs`), drawn as the lifetimes'.
    pub(super) fn next_gap16(&mut self) -> u32 {
        self.next_lifetime_gap()
    }

    /// How many blocks fail their one-in-16 draw before one succeeds: each
    /// 4-bit nibble of a random word (xorshift64) is one draw, which
    /// succeeds when the nibble is 0.
    #[inline(never)]
    fn next_lifetime_gap(&mut self) -> u32 {
        const _: () = assert!(counters::LIFETIME_ONE_IN == 16);
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
        let _e = sync::ErrnoGuard::new();
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

impl ThreadState {
    /// Empties the counters (not the unwinder, nor the sampler's and the
    /// timing's countdowns): a forked child counts from the fork.
    pub(super) fn forget_counts(&mut self) {
        self.stats = [(0, 0, 0); AllocFn::COUNT];
        self.moves = [0; 4];
        self.last_alloc = 0;
        self.mem_ops = 0;
        self.stacks.empty();
        self.packed.clear();
        self.sizes = SizeHistogram::new();
        self.jumps = Histogram::new();
        self.size_time = Histogram::new();
        self.life_size = Histogram::new();
        self.scatter_head = super::scatter::HEAD;
        self.stack_peak = 0;
        self.stack_peak_id = u32::MAX;
        self.unknown_frees = 0;
        self.truncated = 0;
        self.waits = None;
        self.open_wait = None;
        super::kept::forget(self);
        self.handed = 0;
    }
}

pub(super) fn add_lean(stats: &mut [(u64, u64, u64); AllocFn::COUNT], ops: &mut u64, t: &Tls) {
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
    pub(super) fn new(number: u64, with_unwind: bool) -> Self {
        let cfg = config::get();
        let (lo, hi) = if with_unwind { stack_bounds() } else { (0, 0) };
        let unwind = (with_unwind
            && !matches!(
                cfg.stack_mode,
                heapledger_wire::StackMode::None | heapledger_wire::StackMode::EnterExit
            ))
        .then(|| {
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
            frozen: AtomicBool::new(false),
            stats: [(0, 0, 0); AllocFn::COUNT],
            moves: [0; 4],
            last_alloc: 0,
            seg_epoch: 0,
            seg_high: 0,
            mem_ops: 0,
            calls: 0,
            // A thread's own map counts in the entries threads hold
            // (`stackmap::ENTRIES`); the retired, folded and orphan states'
            // do not.
            stacks: if with_unwind {
                StackMap::for_thread()
            } else {
                StackMap::new()
            },
            packed: Packed::new(),
            sizes: SizeHistogram::new(),
            jumps: Histogram::new(),
            size_time: Histogram::new(),
            life_size: Histogram::new(),
            scatter_head: super::scatter::HEAD,
            scatter_gap: 0,
            stack_lo: lo,
            stack_top: if with_unwind {
                super::bounds::use_top(hi)
            } else {
                hi
            },
            stack_peak: 0,
            stack_peak_id: u32::MAX,
            unwind,
            sampler: (cfg.sample_every > 0).then(|| {
                sampler::Sampler::new(cfg.sample_every, clock::ticks() ^ (number << 32) ^ 0x5eed)
            }),
            unknown_frees: 0,
            waits: None,
            open_wait: None,
            user: None,
            truncated: 0,
            dead: false,
            tls: core::ptr::null(),
            next: null_mut(),
            lifetime_rng: 0x9E37_79B9_7F4A_7C15 ^ (number << 17) ^ 1,
            lifetime_gap: 0,
            tid: 0,
            ended_next: null_mut(),
            merged: 0,
            kept: super::kept::Kept::new(),
            handed: 0,
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
    pub(super) next_number: u64,
    /// Counters of threads that ended.
    pub retired: Option<Box<ThreadState>>,
    /// The states of ended threads, oldest first, and how many.
    pub(super) ended_head: *mut ThreadState,
    pub(super) ended_tail: *mut ThreadState,
    pub(super) ended: u64,
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

pub(super) const DEAD: *mut ThreadState = std::ptr::dangling_mut::<ThreadState>();

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
/// Runs `f` on every thread state (live, ended) and the retired and orphan
/// ones, all at once: the states stay locked (no thread starts or ends, and
/// the orphan's calls wait) until `f` returns.
///
/// When a frame of this thread below the caller holds the registry (the
/// profile written from an `_exit` in a signal handler that interrupted a
/// thread's start or end), the list is read without the lock: states are
/// linked in whole and never unlinked (a reused state is rewritten in
/// place: its row may then be read half old, half new, with empty tables
/// either way), and no other thread can change it meanwhile. The retired
/// and folded states, which may be half merged, are left out.
pub fn with_states<R>(f: impl FnOnce(&[&ThreadState]) -> R) -> R {
    let reg = REGISTRY.lock_unless_held_here();
    // SAFETY: the lock is held, or held by a frame of this thread that
    // cannot run until this returns (see above); only read here.
    let r = reg
        .as_deref()
        .unwrap_or_else(|| unsafe { &*REGISTRY.get_unchecked() });
    let mut all: Vec<&ThreadState> = Vec::new();
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
        // (Without memory for the list, states are left out.)
        if all.try_reserve(1).is_ok() {
            all.push(s);
        }
        p = s.next;
    }
    let kept = [
        reg.as_ref().and_then(|g| g.retired.as_deref()),
        reg.as_ref().and_then(|g| g.folded.as_deref()),
    ];
    for s in kept.into_iter().flatten() {
        if all.try_reserve(1).is_ok() {
            all.push(s);
        }
    }
    let orphan = ORPHAN.try_lock_for(1000);
    if let Some(o) = orphan.as_ref().and_then(|g| g.as_deref()) {
        if all.try_reserve(1).is_ok() {
            all.push(o);
        }
    }
    f(&all)
}

/// A number that changes when any thread makes a memory operation (their
/// sum), read without holding the threads (a checkpoint's test for change).
pub fn activity() -> u64 {
    let Some(reg) = REGISTRY.try_lock_for(1000) else {
        return 0;
    };
    let mut sum = 0u64;
    let mut p = reg.head;
    while !p.is_null() {
        // SAFETY: registered states are never freed.
        let s = unsafe { &*p };
        sum = sum.wrapping_add(s.totals().0);
        p = s.next;
    }
    for s in [reg.retired.as_deref(), reg.folded.as_deref()]
        .into_iter()
        .flatten()
    {
        sum = sum.wrapping_add(s.mem_ops);
    }
    sum
}

/// The threads' recorded allocations and bytes, frees and bytes, summed
/// (the timeline's rates), and the most blocks alive in the current bucket
/// as the threads' own highest counts tell (see `note_blocks`), read
/// without holding the threads; None where the registry is busy.
pub fn moves() -> Option<([u64; 4], u64)> {
    let reg = REGISTRY.try_lock_for(1000)?;
    let mut sum = [0u64; 4];
    let mut high = 0i64;
    let epoch = crate::data::timeline::EPOCH.load(Ordering::Relaxed);
    let mut add = |s: &ThreadState| {
        for (a, b) in sum.iter_mut().zip(s.moves) {
            *a = a.wrapping_add(b);
        }
        let net = s.moves[0].wrapping_sub(s.moves[2]) as i64;
        high = high.wrapping_add(if s.seg_epoch == epoch {
            net.max(s.seg_high as i64)
        } else {
            net
        });
    };
    let mut p = reg.head;
    while !p.is_null() {
        // SAFETY: registered states are never freed.
        let s = unsafe { &*p };
        add(s);
        p = s.next;
    }
    for s in [reg.retired.as_deref(), reg.folded.as_deref()]
        .into_iter()
        .flatten()
    {
        add(s);
    }
    Some((sum, high.max(0) as u64))
}

pub fn new_orphan() -> Box<ThreadState> {
    Box::new(ThreadState::new(ORPHAN_NUMBER, false))
}
