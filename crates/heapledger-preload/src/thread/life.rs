//! A thread state's life: created on a thread's first event, retired when
//! the thread ends (seen through a pthread key destructor, which folds the
//! thread's counters into `retired` and marks the pointer dead; anything
//! the thread still allocates after that goes to one shared orphan state
//! under a lock), and reused once enough threads have ended after it.

use super::state::*;
use super::tls::{leave_recorder, tls, Tls};
use crate::base::phase;
use crate::base::real;
use crate::base::sync;
use crate::data::counters;
use crate::data::counters::{Histogram, SizeHistogram};
use crate::thread::altstack;
use crate::thread::side;
use alloc::boxed::Box;
use core::ptr::null_mut;
use core::sync::atomic::Ordering;
use heapledger_wire::AllocFn;

unsafe extern "C" fn on_thread_exit(p: *mut core::ffi::c_void) {
    let st = p as *mut ThreadState;
    let t = tls();
    let was = t.in_hook.replace(true);
    if core::ptr::eq(t.state.get(), st) {
        t.retired.set(st);
        // SAFETY: this thread's live state, in the recorder.
        super::shadow::charge_deepest(unsafe { &mut *st });
    }
    retire(st);
    t.state.set(DEAD);
    side::thread_ends(t);
    altstack::thread_ends(t);
    leave_recorder(t, was);
}

/// Folds a finished thread's counters into `retired`.
fn retire(st: *mut ThreadState) {
    let epoch = counters::peak();
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
    if let Some(mut u) = s.user.take() {
        u.ends();
    }
    let r = reg.retired.get_or_insert_with(new_retired);
    s.stacks.flush_all();
    super::kept::keep(s);
    // Without memory for the merged counters, the thread's are lost
    // (recording stopped: the arena could not serve them).
    r.packed.push_map(&s.stacks, epoch);
    r.sizes.absorb(&s.sizes);
    r.jumps.absorb(&s.jumps);
    r.size_time.absorb(&s.size_time);
    r.life_size.absorb(&s.life_size);
    r.unknown_frees += s.unknown_frees;
    r.truncated += s.truncated;
    s.unknown_frees = 0;
    s.truncated = 0;
    s.stacks.empty();
    s.sizes = SizeHistogram::new();
    s.jumps = Histogram::new();
    s.size_time = Histogram::new();
    s.life_size = Histogram::new();
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

/// The retired state: the counters of the threads that ended, and of the
/// tables threads handed over, packed (`stackmap::Packed`). They count in
/// `stackmap::ENTRIES` with the live threads': the entries all hold,
/// against the distinct stacks.
fn new_retired() -> Box<ThreadState> {
    Box::new(ThreadState::new(RETIRED, false))
}

/// The entries whose room a thread keeps when it hands its table over
/// (7 MB; see `StackMap::empty_keeping`).
const SPILL_KEEP: usize = 1 << 16;

/// Hands the per-stack counters of `s`, a live thread's state, to the
/// retired state's (the process's), as `retire` does when a thread ends,
/// and empties its map, so that threads running the same code do not each
/// keep an entry for every stack (see `stackmap::ENTRIES`). What the thread
/// allocated at each stack is kept in its rows (`kept`). The thread's next
/// event at one of these stacks makes a new entry, from zero: the counters
/// add up, and the bytes at the peak follow `Full::absorb`'s rule, since
/// what is handed over no longer changes. Called inside a hook of the
/// thread itself (its state `busy`); where the registry's lock is not free
/// at once (a checkpoint reading the states, a thread starting or ending),
/// the map is kept and handed over at a later new entry.
#[cold]
#[inline(never)]
pub fn spill(s: &mut ThreadState) {
    if s.number >= SPARE || s.dead {
        return;
    }
    let _e = sync::ErrnoGuard::new();
    let Some(mut reg) = REGISTRY.try_lock_for(1) else {
        return;
    };
    let epoch = counters::peak();
    s.stacks.flush_all();
    let r = reg.retired.get_or_insert_with(new_retired);
    // Without memory for the process's counters, the thread keeps its
    // table, and its rows with it (and asks again at its next new entry).
    if r.packed.push_map(&s.stacks, epoch) {
        super::kept::spill(s);
        crate::data::stackmap::handed(s.stacks.len() as u64, &mut s.handed);
        s.stacks.empty_keeping(SPILL_KEEP);
    }
}

/// The oldest ended state, taken off the queue with its row summed into
/// [`FOLDED`] (its number set to [`SPARE`]), if more than [`KEEP_ENDED`]
/// threads have ended after it and its thread is gone.
///
/// "Gone" is the kernel's word: a thread still runs its last clean-up
/// after heapledger's key destructor retired its state (other libraries'
/// destructors, whose calls still count in that state; see
/// `hooks::alloc::count_call`), so the state is reused only once `tgkill` no
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
    for (a, b) in f.moves.iter_mut().zip(s.moves) {
        *a += b;
    }
    if s.stack_peak > f.stack_peak {
        f.stack_peak = s.stack_peak;
        f.stack_peak_id = s.stack_peak_id;
    }
    if let Some(mut w) = s.waits.take() {
        f.waits
            .get_or_insert_with(|| Box::new(crate::data::timelog::TimeLog::new(w.capacity())))
            .absorb(&mut w);
    }
    f.merged += 1;
    super::kept::forget(s);
    s.stats = [(0, 0, 0); AllocFn::COUNT];
    s.moves = [0; 4];
    s.mem_ops = 0;
    s.number = SPARE;
    s
}

/// In a process that does not record (`State::Off`), opens the lean paths
/// of this thread for good, with no sample point ever: its `malloc` and
/// `free` then cost a few instructions, not a full hook's entry each.
#[cold]
pub fn lean_when_off(t: &Tls) {
    if !t.lean.get() {
        open_lean(t, i64::MAX);
    }
}

/// Opens this thread's lean paths, `left` bytes before the first sample
/// point (the count restarts), once the real functions are known.
fn open_lean(t: &Tls, left: i64) {
    let r = &real::REAL;
    let (m, f) = (
        r.malloc.load(Ordering::Acquire),
        r.free.load(Ordering::Acquire),
    );
    t.reset_lean(left);
    if m != 0 && f != 0 {
        t.real_malloc.set(m);
        t.real_free.set(f);
        t.lean.set(true);
    }
}

/// Creates this thread's state (`t` is its TLS block) and, when sampling,
/// opens its lean paths.
#[cold]
pub(super) fn create(t: &Tls) -> *mut ThreadState {
    let _e = sync::ErrnoGuard::new();
    let s = side::with_room(side::STATE_NEED, new_state);
    t.state.set(s);
    // SAFETY: just created, ours.
    let st = unsafe { &mut *s };
    st.tls = t;
    // Zero counts (a zero-filled block would read as one round of calls).
    t.reset_lean(0);
    // Where heapledger's handler saves the profile if the thread overflows
    // its stack.
    if phase::get() == phase::State::Recording {
        altstack::give(t);
    }
    if crate::data::only::active() {
        // `--only-lib`: the lean paths for the calls of other code, with
        // no sample point ever (see `data::only`).
        open_lean(t, i64::MAX);
    } else if let Some(sampler) = st.sampler.as_mut() {
        open_lean(t, sampler.first_gap());
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

/// In a forked child that is recorded: it counts from the fork, as if it
/// had started there. Its one thread, the one that forked, keeps its state
/// with its counters emptied, as thread 0; the other threads' states
/// (their threads are not in the child), the retired, ended and orphan
/// states go. The states left out stay allocated, unused (a state is never
/// freed: see `for_each_state`). Called with no lock held and one thread.
pub fn start_afresh() {
    let t = tls();
    let s = t.state.get();
    let mut reg = REGISTRY.lock();
    reg.head = null_mut();
    reg.alive = 0;
    if is_live(s) {
        // SAFETY: this thread's own state; no other thread exists.
        let st = unsafe { &mut *s };
        st.forget_counts();
        st.number = 0;
        st.next = null_mut();
        st.ended_next = null_mut();
        reg.head = s;
        reg.alive = 1;
        // The lean paths' counts, from the sample point they were at.
        t.reset_lean(t.left.get());
    }
    super::kept::forked();
    crate::data::stackmap::forked();
    reg.max_alive = reg.alive;
    reg.next_number = reg.alive;
    reg.retired = None;
    reg.folded = None;
    reg.ended_head = null_mut();
    reg.ended_tail = null_mut();
    reg.ended = 0;
    drop(reg);
    *ORPHAN.lock() = None;
}

pub fn init_key() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: on_thread_exit has the destructor signature.
    if unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } == 0 {
        KEY.store(key as u64, Ordering::Relaxed);
    }
}
