//! Lock waits (seed 004, issue 35): pthread_mutex_lock, the rwlocks'
//! read and write locks, pthread_cond_wait and timedwait, pthread_join,
//! sem_wait. C++'s std::mutex, std::condition_variable and
//! std::thread::join come through these.
//!
//! Only a wait that really blocks is timed: a lock is first tried
//! (trylock), and taken at once costs the try and a look in the table of
//! locks that were ever waited for (`data::timelog::contended`), no clock
//! read. A wait is timed with `CLOCK_MONOTONIC` around the real call, made
//! outside the recorder (a thread blocked there is not inside a hook, so
//! checkpoints do not wait for it), then charged to the waiter's stack in
//! its thread's log, with the stack of the thread that took the lock last
//! after waiting for it (the holder, where known: a lock waited for once
//! has its acquirers' stacks noted from then on). Condition variables,
//! joins and semaphores always count their time: no holder is known.

use super::enter::{entered, stack};
use crate::base::clock::now_ns;
use crate::base::{config, phase, real};
use crate::data::timelog::{self, Key, Kind, TimeLog, NONE};
use crate::thread::tls;
use core::ffi::{c_int, c_void};

/// Whether waits are recorded on this thread now. (The recorder's own
/// calls into the C library are made inside the recorder, `in_hook`.)
#[inline(always)]
fn watching() -> bool {
    let t = tls::tls();
    !t.in_hook.get()
        && phase::STATE.load(core::sync::atomic::Ordering::Relaxed) == phase::State::Recording as u8
        && config::get().waits
        && !t.disabled.get()
}

/// The stack of the hook whose frame record is `fp`, as the recorder's
/// thread-state bookkeeping gives it, and `f` run on the thread's state.
fn with_stack(fp: u64, f: impl FnOnce(&mut crate::thread::state::ThreadState, u32)) {
    let t = tls::tls();
    let mut h = entered(t, true);
    let id = stack(h.st(), fp);
    f(h.st(), id);
    h.keep_errno();
}

/// A lock taken without waiting: where it was ever waited for, its
/// holder's stack is noted.
#[inline(always)]
fn taken(lock: *mut c_void, fp: u64) {
    if let Some(slot) = timelog::contended(lock as u64) {
        with_stack(fp, |_, id| timelog::set_holder(slot, id));
    }
}

/// Runs `block` (the real call, which blocks), timed, and charges the wait
/// to the caller's stack; `lock` is the lock taken by the end of it (its
/// holder is then this thread), or null.
#[inline(never)]
fn waited(kind: Kind, lock: *mut c_void, fp: u64, block: impl FnOnce() -> c_int) -> c_int {
    let slot = if lock.is_null() {
        None
    } else {
        timelog::mark_contended(lock as u64)
    };
    let other = match kind {
        Kind::Mutex | Kind::RwRead | Kind::RwWrite => slot.map_or(NONE, timelog::holder),
        _ => NONE,
    };
    let t0 = now_ns();
    let r = block();
    let dt = now_ns().saturating_sub(t0);
    // SAFETY: errno's location is valid.
    let errno = unsafe { *libc::__errno_location() };
    with_stack(fp, |st, id| {
        if let Some(slot) = slot {
            timelog::set_holder(slot, id);
        }
        st.waits
            .get_or_insert_with(|| {
                alloc::boxed::Box::new(TimeLog::new(config::get().waits_top as usize))
            })
            .record(
                Key {
                    kind,
                    stack: id,
                    other,
                },
                dt,
            );
    });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    r
}

/// A lock tried first, then waited for: `Kind`, the real lock and trylock.
#[inline(always)]
fn lock_with(
    kind: Kind,
    lock: *mut c_void,
    fp: u64,
    real_lock: Option<real::LockFn>,
    real_try: Option<real::LockFn>,
    busy: c_int,
) -> c_int {
    let Some(lk) = real_lock else {
        return libc::ENOSYS;
    };
    // SAFETY: the real functions, with the caller's lock.
    unsafe {
        match real_try {
            Some(tr) if watching() => match tr(lock) {
                0 => {
                    taken(lock, fp);
                    0
                }
                e if e == busy => waited(kind, lock, fp, || lk(lock)),
                _ => lk(lock),
            },
            _ => lk(lock),
        }
    }
}

unsafe extern "C" fn mutex_lock_impl(m: *mut c_void, fp: u64) -> c_int {
    lock_with(
        Kind::Mutex,
        m,
        fp,
        real::mutex_lock(),
        real::mutex_trylock(),
        libc::EBUSY,
    )
}
trampoline!(pthread_mutex_lock, mutex_lock_impl, "rsi", (m: *mut c_void) -> c_int);

unsafe extern "C" fn rwlock_rdlock_impl(l: *mut c_void, fp: u64) -> c_int {
    lock_with(
        Kind::RwRead,
        l,
        fp,
        real::rwlock_rdlock(),
        real::rwlock_tryrdlock(),
        libc::EBUSY,
    )
}
trampoline!(pthread_rwlock_rdlock, rwlock_rdlock_impl, "rsi", (l: *mut c_void) -> c_int);

unsafe extern "C" fn rwlock_wrlock_impl(l: *mut c_void, fp: u64) -> c_int {
    lock_with(
        Kind::RwWrite,
        l,
        fp,
        real::rwlock_wrlock(),
        real::rwlock_trywrlock(),
        libc::EBUSY,
    )
}
trampoline!(pthread_rwlock_wrlock, rwlock_wrlock_impl, "rsi", (l: *mut c_void) -> c_int);

/// sem_wait answers -1 with errno EAGAIN where sem_trywait would block.
unsafe extern "C" fn sem_wait_impl(s: *mut c_void, fp: u64) -> c_int {
    let (Some(w), Some(tr)) = (real::sem_wait(), real::sem_trywait()) else {
        return -1;
    };
    // SAFETY: the real functions, with the caller's semaphore.
    unsafe {
        if !watching() {
            return w(s);
        }
        if tr(s) == 0 {
            return 0;
        }
        if *libc::__errno_location() != libc::EAGAIN {
            return w(s);
        }
        waited(Kind::Sem, core::ptr::null_mut(), fp, || w(s))
    }
}
trampoline!(sem_wait, sem_wait_impl, "rsi", (s: *mut c_void) -> c_int);

unsafe extern "C" fn cond_wait_impl(c: *mut c_void, m: *mut c_void, fp: u64) -> c_int {
    let Some(w) = real::cond_wait() else {
        return libc::ENOSYS;
    };
    // SAFETY: the real function, with the caller's arguments.
    unsafe {
        if !watching() {
            return w(c, m);
        }
        waited(Kind::Cond, core::ptr::null_mut(), fp, || w(c, m))
    }
}
trampoline!(pthread_cond_wait, cond_wait_impl, "rdx", (c: *mut c_void, m: *mut c_void) -> c_int);

unsafe extern "C" fn cond_timedwait_impl(
    c: *mut c_void,
    m: *mut c_void,
    at: *const libc::timespec,
    fp: u64,
) -> c_int {
    let Some(w) = real::cond_timedwait() else {
        return libc::ENOSYS;
    };
    // SAFETY: the real function, with the caller's arguments.
    unsafe {
        if !watching() {
            return w(c, m, at);
        }
        waited(Kind::Cond, core::ptr::null_mut(), fp, || w(c, m, at))
    }
}
trampoline!(pthread_cond_timedwait, cond_timedwait_impl, "rcx", (c: *mut c_void, m: *mut c_void, at: *const libc::timespec) -> c_int);

unsafe extern "C" fn join_impl(th: libc::pthread_t, ret: *mut *mut c_void, fp: u64) -> c_int {
    let Some(j) = real::join() else {
        return libc::ENOSYS;
    };
    // SAFETY: the real function, with the caller's arguments.
    unsafe {
        if !watching() {
            return j(th, ret);
        }
        waited(Kind::Join, core::ptr::null_mut(), fp, || j(th, ret))
    }
}
trampoline!(pthread_join, join_impl, "rdx", (th: libc::pthread_t, ret: *mut *mut c_void) -> c_int);
