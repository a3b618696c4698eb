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
use core::ffi::{c_char, c_int, c_void};

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

/// Adds a wait of `dt` ns of kind `kind` (a code) at `stack` to the
/// thread's log (and to the program's own logs of the thread, with its
/// traceback).
fn log(st: &mut crate::thread::state::ThreadState, kind: u8, stack: u32, other: u32, dt: u64) {
    log_with(st, kind, stack, other, crate::data::traceback::NONE, dt);
}

/// `log`, with another thread's traceback `other_tb` for the program's
/// logs (`thread::user`).
fn log_with(
    st: &mut crate::thread::state::ThreadState,
    kind: u8,
    stack: u32,
    other: u32,
    other_tb: u32,
    dt: u64,
) {
    let _ = st
        .waits
        .get_or_insert_with(|| {
            alloc::boxed::Box::new(TimeLog::new(config::get().waits_top as usize))
        })
        .record(Key { kind, stack, other }, dt);
    if let Some(u) = st.user.as_mut() {
        u.record(kind, other_tb, dt);
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
        log(st, kind as u8, id, other, dt);
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

// ---- Cancellation points: condition waits, joins, sem_wait ----
//
// These may be left by `pthread_cancel`'s forced unwinding while they
// block, which no Rust frame may see (this library aborts on unwinding).
// So the real call is made from the entry's own assembly, whose frame the
// unwinder steps through by its CFI; Rust runs only before (`wait_begin`)
// and after (`wait_end`) it.

/// What `wait_begin` answers: the call is not recorded.
const UNWATCHED: u64 = 0;
/// The call is done already (a semaphore taken by `sem_trywait`), with 0.
const DONE: u64 = 1;

/// Before a cancellation point's real call: the clock (the wait will be
/// recorded), `UNWATCHED`, or `DONE`. The real function is resolved here.
extern "C" fn wait_begin(kind: u64, first: *mut c_void) -> u64 {
    real::resolve();
    if !watching() {
        return UNWATCHED;
    }
    if kind == Kind::Sem as u64 {
        if let Some(tr) = real::sem_trywait() {
            // SAFETY: the real function, with the caller's semaphore; its
            // errno is put back if it fails (the wait sets its own).
            let errno = unsafe { *libc::__errno_location() };
            if unsafe { tr(first) } == 0 {
                return DONE;
            }
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
        }
    }
    now_ns().max(2)
}

/// After it: charges the wait that began at `t0` to the stack of the
/// entry's frame record `fp`.
extern "C" fn wait_end(t0: u64, fp: u64, kind: u64) {
    if t0 < 2 {
        return;
    }
    let dt = now_ns().saturating_sub(t0);
    // SAFETY: errno's location is valid.
    let errno = unsafe { *libc::__errno_location() };
    let kind = match kind {
        4 => Kind::Join,
        5 => Kind::Sem,
        _ => Kind::Cond,
    };
    with_stack(fp, |st, id| {
        log(st, kind as u8, id, NONE, dt);
    });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// An entry that calls the real function (the `REAL` slot at `$slot`)
/// between `wait_begin` and `wait_end`, with a frame record (rbp) that
/// stack capture starts from. Up to four arguments, kept on the frame.
macro_rules! timed_entry {
    ($name:ident, $kind:expr, $slot:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        /// # Safety
        /// Called as the C function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                ".cfi_rel_offset rbp, 0",
                "mov rbp, rsp",
                ".cfi_def_cfa_register rbp",
                "push r12",
                ".cfi_offset r12, -24",
                "push r13",
                ".cfi_offset r13, -32",
                "sub rsp, 32",
                "mov qword ptr [rsp], rdi",
                "mov qword ptr [rsp + 8], rsi",
                "mov qword ptr [rsp + 16], rdx",
                "mov qword ptr [rsp + 24], rcx",
                "mov rsi, rdi",
                "mov edi, {kind}",
                "call {begin}",
                "mov r12, rax",
                "xor r13d, r13d",
                "cmp rax, {done}",
                "je 2f",
                "mov rdi, qword ptr [rsp]",
                "mov rsi, qword ptr [rsp + 8]",
                "mov rdx, qword ptr [rsp + 16]",
                "mov rcx, qword ptr [rsp + 24]",
                "call qword ptr [rip + {real} + {off}]",
                "mov r13, rax",
                "mov rdi, r12",
                "mov rsi, rbp",
                "mov edx, {kind}",
                "call {end}",
                "2:",
                "mov rax, r13",
                "add rsp, 32",
                "pop r13",
                "pop r12",
                "pop rbp",
                ".cfi_def_cfa rsp, 8",
                "ret",
                ".cfi_endproc",
                kind = const $kind as u8,
                done = const DONE,
                begin = sym wait_begin,
                end = sym wait_end,
                real = sym real::REAL,
                off = const core::mem::offset_of!(real::Real, $slot),
            )
        }
    };
}

timed_entry!(pthread_cond_wait, Kind::Cond, cond_wait, (c: *mut c_void, m: *mut c_void) -> c_int);
timed_entry!(pthread_cond_timedwait, Kind::Cond, cond_timedwait, (c: *mut c_void, m: *mut c_void, at: *const libc::timespec) -> c_int);
timed_entry!(pthread_join, Kind::Join, join, (th: libc::pthread_t, ret: *mut *mut c_void) -> c_int);
timed_entry!(sem_wait, Kind::Sem, sem_wait, (s: *mut c_void) -> c_int);

// ---- Time lost the program records itself (heapledger.h) ----

fn kind_of(name: *const c_char) -> u8 {
    let bytes = if name.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller's NUL-terminated string.
        unsafe { core::ffi::CStr::from_ptr(name) }.to_bytes()
    };
    timelog::user_kind(bytes)
}

/// Closes this thread's open wait, if any, at `now`.
fn close_open(st: &mut crate::thread::state::ThreadState, now: u64) {
    if let Some((kind, t0, stack)) = st.open_wait.take() {
        log(st, kind, stack, NONE, now.saturating_sub(t0));
    }
}

/// `heapledger_time_lost(kind, ns)`: `ns` lost, of the kind named `kind`,
/// at the caller's stack.
unsafe extern "C" fn time_lost_impl(kind: *const c_char, ns: u64, fp: u64) -> c_int {
    if !watching() {
        return -1;
    }
    let k = kind_of(kind);
    with_stack(fp, |st, id| log(st, k, id, NONE, ns));
    0
}
trampoline!(heapledger_time_lost, time_lost_impl, "rdx", (kind: *const c_char, ns: u64) -> c_int);

/// `heapledger_time_lost_at(kind, ns, other)`: `heapledger_time_lost`,
/// with another thread's traceback (`heapledger_traceback_snapshot` there;
/// null: none), which the thread's own logs keep as a reference and the
/// profile as the holder's stack.
unsafe extern "C" fn time_lost_at_impl(
    kind: *const c_char,
    ns: u64,
    other: *const c_void,
    fp: u64,
) -> c_int {
    if !watching() {
        return -1;
    }
    let k = kind_of(kind);
    let other_tb = super::user::node(other);
    with_stack(fp, |st, id| {
        let o = match other_tb {
            crate::data::traceback::NONE => NONE,
            n => match super::user::frames_stack(None, n) {
                0 => NONE,
                s => s,
            },
        };
        log_with(st, k, id, o, other_tb, ns)
    });
    0
}
trampoline!(heapledger_time_lost_at, time_lost_at_impl, "rcx", (kind: *const c_char, ns: u64, other: *const c_void) -> c_int);

/// `heapledger_wait_begin(kind)`: a wait of the kind named `kind` begins
/// at the caller's stack; one already open on this thread ends first.
unsafe extern "C" fn wait_begin_impl(kind: *const c_char, fp: u64) -> c_int {
    if !watching() {
        return -1;
    }
    let k = kind_of(kind);
    with_stack(fp, |st, id| {
        let now = now_ns();
        close_open(st, now);
        st.open_wait = Some((k, now, id));
    });
    0
}
trampoline!(heapledger_wait_begin, wait_begin_impl, "rsi", (kind: *const c_char) -> c_int);

/// `heapledger_wait_end()`: the thread's open wait ends, charged to the
/// stack where it began; -1 where none was open.
///
/// # Safety
/// Called as heapledger.h declares it.
#[no_mangle]
pub unsafe extern "C" fn heapledger_wait_end() -> c_int {
    if !watching() {
        return -1;
    }
    let t = tls::tls();
    let mut h = entered(t, true);
    let st = h.st();
    let r = if st.open_wait.is_some() { 0 } else { -1 };
    close_open(st, now_ns());
    h.keep_errno();
    r
}
