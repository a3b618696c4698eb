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
use crate::sync::SpinLock;
use crate::unwind::Unwind;
use alloc::boxed::Box;
use core::cell::Cell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use memtrail_wire::AllocFn;

pub struct ThreadState {
    pub number: u64,
    /// True while this thread is inside a hook (the dump waits for it).
    pub busy: AtomicBool,
    pub stats: [(u64, u64, u64); AllocFn::COUNT],
    pub mem_ops: u64,
    /// Allocator calls seen, for sampling call durations.
    pub calls: u64,
    pub stacks: StackMap,
    pub sizes: SizeHistogram,
    pub jumps: Histogram,
    /// Requested bytes alive not yet added to the shared counter.
    pub pending: i64,
    pub unwind: Option<Unwind>,
    /// Set in `--sample-every` mode.
    pub sampler: Option<crate::sampler::Sampler>,
    pub unknown_frees: u64,
    pub truncated: u64,
    pub dead: bool,
    next: *mut ThreadState,
}

impl ThreadState {
    fn new(number: u64, with_unwind: bool) -> Self {
        let cfg = config::get();
        let unwind = (with_unwind && cfg.stack_mode != memtrail_wire::StackMode::None).then(|| {
            let (lo, hi) = stack_bounds();
            Unwind::new(
                cfg.max_depth as usize,
                cfg.stack_mode == memtrail_wire::StackMode::Dwarf,
                lo,
                hi,
            )
        });
        ThreadState {
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
            next: null_mut(),
        }
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
}
// SAFETY: the raw pointers are only followed under the registry lock.
unsafe impl Send for Registry {}

pub static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry {
    head: null_mut(),
    alive: 0,
    max_alive: 0,
    next_number: 0,
    retired: None,
});
pub static ORPHAN: SpinLock<Option<Box<ThreadState>>> = SpinLock::new(None);
pub static KEY: AtomicU64 = AtomicU64::new(u64::MAX);

const DEAD: *mut ThreadState = std::ptr::dangling_mut::<ThreadState>();

pub struct Tls {
    pub state: Cell<*mut ThreadState>,
    pub in_hook: Cell<bool>,
}

thread_local! {
    pub static TLS: Tls = const { Tls { state: Cell::new(null_mut()), in_hook: Cell::new(false) } };
}

extern "C" {
    static __libc_stack_end: *mut core::ffi::c_void;
}

/// Bounds of this thread's stack, for the unwinder's reads.
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
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut addr: *mut core::ffi::c_void = null_mut();
        let mut size: usize = 0;
        libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (addr as u64, addr as u64 + size as u64)
    }
}

unsafe extern "C" fn on_thread_exit(p: *mut core::ffi::c_void) {
    let st = p as *mut ThreadState;
    TLS.with(|t| {
        let was = t.in_hook.replace(true);
        retire(st);
        t.state.set(DEAD);
        t.in_hook.set(was);
    });
}

/// Folds a finished thread's counters into `retired`.
fn retire(st: *mut ThreadState) {
    let epoch = crate::counters::epoch();
    let mut reg = REGISTRY.lock();
    // SAFETY: st is a registered, live state owned by the exiting thread.
    let s = unsafe { &mut *st };
    crate::counters::ALIVE.fetch_add(s.pending, Ordering::Relaxed);
    s.pending = 0;
    let r = reg
        .retired
        .get_or_insert_with(|| Box::new(ThreadState::new(u64::MAX, false)));
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
}

/// This thread's state, creating it on first use; None once the thread is
/// ending (use the orphan state then).
#[inline(always)]
pub fn current(t: &Tls) -> *mut ThreadState {
    let s = t.state.get();
    if !s.is_null() {
        return s;
    }
    let s = create();
    t.state.set(s);
    s
}

#[inline(always)]
pub fn is_dead(s: *mut ThreadState) -> bool {
    s == DEAD
}

#[cold]
fn create() -> *mut ThreadState {
    let _e = crate::sync::ErrnoGuard::new();
    let number = {
        let mut reg = REGISTRY.lock();
        reg.next_number += 1;
        reg.next_number - 1
    };
    let st = Box::into_raw(Box::new(ThreadState::new(number, true)));
    {
        let mut reg = REGISTRY.lock();
        // SAFETY: st is fresh and ours.
        unsafe { (*st).next = reg.head };
        reg.head = st;
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

pub fn init_key() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: on_thread_exit has the destructor signature.
    if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } == 0 {
        KEY.store(key as u64, Ordering::Relaxed);
    }
}

/// Runs `f` on every thread state (live, ended) and the retired and orphan ones.
pub fn for_each_state(mut f: impl FnMut(&ThreadState)) {
    let reg = REGISTRY.lock();
    let mut p = reg.head;
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
    if let Some(r) = reg.retired.as_deref() {
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
    Box::new(ThreadState::new(u64::MAX - 1, false))
}
