//! Holding the threads at the door of their hooks for a moment, so that
//! another thread (the checkpoint's, `process::checkpoint`) reads their
//! tables while nothing changes them: a table being grown or a histogram
//! being replaced is never read, and each thread's counters are those
//! between two of its events.
//!
//! A thread marks its state `busy` when it enters a hook (a plain store),
//! then looks at the state's `frozen` flag (a plain load): when it is set,
//! it clears `busy` and waits (`wait_thawed`). The reader sets `frozen` on
//! every state, then waits until none is `busy`. Between the two, one
//! `membarrier` (expedited, private: an interrupt to each CPU that runs a
//! thread of the process, a few microseconds) stands for the full fence
//! that each event would otherwise pay between its store and its load:
//! after it, a thread either is seen `busy` or sees `frozen`. A thread
//! inside a hook is waited for, but not forever (`limit_ns`): one that
//! waits inside its hook on another frozen at the door (a lock of the
//! program or of libc held by that one) would wait for good, so past the
//! limit everything is let go and nothing is read.

use super::state::{ThreadState, ORPHAN, REGISTRY};
use crate::base::clock;
use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicU8, Ordering};

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: i32 = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: i32 = 1 << 4;

/// 0: not asked yet; 1: expedited membarrier registered; 2: none.
static BARRIER: AtomicU8 = AtomicU8::new(0);

/// Registers the process for expedited membarriers (once, before the first
/// `with_states_frozen`); false where the kernel refuses them (then no
/// thread is ever frozen).
pub fn can_freeze() -> bool {
    if BARRIER.load(Ordering::Relaxed) == 0 {
        // SAFETY: a system call with no memory argument; errno is the
        // calling (recorder) thread's own.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
            )
        };
        BARRIER.store(if r == 0 { 1 } else { 2 }, Ordering::Relaxed);
    }
    BARRIER.load(Ordering::Relaxed) == 1
}

/// In a forked child: its registration is its parent's (the kernel keeps
/// it across fork), but ask again.
pub fn forked() {
    BARRIER.store(0, Ordering::Relaxed);
}

fn membarrier() -> bool {
    // SAFETY: as in `can_freeze`.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0 }
}

/// The door of a hook, for a state whose `frozen` was seen set: waits,
/// out of the hook, until it is cleared.
#[cold]
#[inline(never)]
pub fn wait_thawed(s: &ThreadState) {
    loop {
        s.busy.store(false, Ordering::Release);
        while s.frozen.load(Ordering::Acquire) {
            // SAFETY: no preconditions; it cannot fail (errno untouched).
            unsafe { libc::sched_yield() };
        }
        s.busy.store(true, Ordering::Relaxed);
        // This slow path pays the fence itself (see the top).
        fence(Ordering::SeqCst);
        if !s.frozen.load(Ordering::Relaxed) {
            return;
        }
    }
}

/// Runs `f` on every thread state (as `state::with_states`, and the
/// registry's largest number of threads alive at once) with every thread
/// held out of its hooks; None, with nothing read, where a thread stayed
/// inside a hook for `limit_ns` or no membarrier could be had. Never
/// called from a hook (the caller is the checkpoint's own thread).
pub fn with_states_frozen<R>(
    limit_ns: u64,
    f: impl FnOnce(&[&ThreadState], u64) -> R,
) -> Option<R> {
    frozen(limit_ns, |all, max_alive| {
        let mut refs: Vec<&ThreadState> = Vec::new();
        refs.try_reserve(all.len()).ok()?;
        // SAFETY: registered states are never freed; only read here.
        refs.extend(all.iter().map(|&s| unsafe { &*s }));
        Some(f(&refs, max_alive))
    })
    .flatten()
}

/// Empties every thread's counters (and those of the ended threads) with
/// every thread held out of its hooks, after `before` ran with them held
/// (`process::control::reset`); false where they could not be held.
pub fn forget_all_counts(limit_ns: u64, before: impl FnOnce()) -> bool {
    frozen(limit_ns, |all, _| {
        before();
        for &s in all {
            // SAFETY: registered states are never freed, and none is used
            // meanwhile: their threads wait at their hooks' door, the
            // ended ones' under the registry's lock, the orphan's under its
            // own, both held.
            unsafe { (*s).forget_counts() };
        }
    })
    .is_some()
}

/// `with_states_frozen` on the states themselves.
fn frozen<R>(limit_ns: u64, f: impl FnOnce(&[*mut ThreadState], u64) -> R) -> Option<R> {
    if !can_freeze() {
        return None;
    }
    let mut reg = REGISTRY.lock();
    let mut all: Vec<*mut ThreadState> = Vec::new();
    let mut p = reg.head;
    while !p.is_null() {
        all.try_reserve(1).ok()?;
        all.push(p);
        // SAFETY: registered states are never freed.
        p = unsafe { (*p).next };
    }
    let threads = all.len();
    let max_alive = reg.max_alive;
    let r = &mut *reg;
    for s in [r.retired.as_deref_mut(), r.folded.as_deref_mut()]
        .into_iter()
        .flatten()
    {
        all.try_reserve(1).ok()?;
        all.push(s as *mut ThreadState);
    }
    let thaw = |all: &[*mut ThreadState]| {
        for &s in &all[..threads] {
            // SAFETY: as above.
            unsafe { (*s).frozen.store(false, Ordering::Release) };
        }
    };
    for &s in &all[..threads] {
        // SAFETY: as above.
        unsafe { (*s).frozen.store(true, Ordering::Relaxed) };
    }
    if !membarrier() {
        thaw(&all);
        return None;
    }
    let deadline = clock::now_ns() + limit_ns;
    for &s in &all[..threads] {
        // SAFETY: as above.
        while unsafe { (*s).busy.load(Ordering::Acquire) } {
            if clock::now_ns() > deadline {
                thaw(&all);
                return None;
            }
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    // The orphan state's users hold its lock for their hook's length.
    let Some(mut orphan) = ORPHAN.try_lock_for(1000) else {
        thaw(&all);
        return None;
    };
    if let Some(o) = orphan.as_deref_mut() {
        if all.try_reserve(1).is_ok() {
            all.push(o as *mut ThreadState);
        }
    }
    let r = f(&all, max_alive);
    thaw(&all);
    drop(orphan);
    drop(reg);
    Some(r)
}
