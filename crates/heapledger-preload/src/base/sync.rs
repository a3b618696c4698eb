//! A spin lock for the recorder's rare slow paths and its sharded tables.
//!
//! std's `Mutex` is fine in most code, but here a lock must never allocate,
//! must be usable before anything is initialized, and must be forcibly
//! released in a forked child (see `fork.rs`), so it is a plain atomic word.
//! The word holds its holder's thread pointer (0 when free), so that a
//! thread can tell a lock it holds itself: one that a frame of the recorder
//! took before a signal handler interrupted it on this thread, and that
//! only that frame can release (see `fork.rs`, `try_lock_for`).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// The lock word alone, for code that handles locks of any type.
pub struct RawSpin {
    holder: AtomicUsize,
}

/// The lock word first (`repr(C)`), so that a lock and the start of what it
/// guards share a cache line (see `live::Shard`).
#[repr(C)]
pub struct SpinLock<T> {
    raw: RawSpin,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialized by `raw`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
unsafe impl<T: Send> Send for SpinLock<T> {}

pub struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
}

/// This thread's pointer (`fs:0` on x86-64 Linux): non-zero, and distinct
/// for every running thread; a forked child's thread keeps its parent's.
#[inline(always)]
fn me() -> usize {
    let p: usize;
    // SAFETY: reads the thread pointer, which is always set.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(pure, readonly, nostack, preserves_flags)
        )
    };
    p
}

extern "C" {
    /// glibc's own "this process has one thread" (glibc 2.32 and later):
    /// true from the start, false from the first `pthread_create` (set
    /// before the new thread exists) for good, even in a forked child
    /// (glibc 2.36). glibc's malloc skips its own locking on it.
    static mut __libc_single_threaded: u8;
}

/// Whether this process has one thread, so that no other thread can touch
/// the recorder's tables. While it holds, a hook can use them with plain
/// loads and stores: a thread is created only by this thread, outside any
/// hook, and the creation itself orders what was written before it. (A
/// thread made with a raw `clone` that calls `malloc` breaks glibc's own
/// allocator the same way.)
#[inline(always)]
pub fn single_threaded() -> bool {
    // SAFETY: a byte that glibc writes only from the thread that creates a
    // thread (or forks); read as a volatile load.
    unsafe { core::ptr::read_volatile(&raw const __libc_single_threaded) != 0 }
}

/// Says again that the process has one thread, after the recorder made a
/// thread of its own (`process::checkpoint`), which glibc counted: that
/// thread takes no lock of glibc's and calls no allocator of the program's
/// (it uses the recorder's arena), and reads the recorder's tables only
/// while every other thread is held (`thread::freeze`). So the program's
/// one thread keeps glibc's fast paths and the recorder's, as without it.
/// Called by the thread that made it, right after; a `pthread_create` of
/// the program's clears the flag again, as it should.
pub fn single_threaded_again(was: bool) {
    if was {
        // SAFETY: the byte glibc itself writes from the creating thread;
        // no other thread of the program exists to read it meanwhile.
        unsafe { core::ptr::write_volatile(&raw mut __libc_single_threaded, 1) };
    }
}

/// `a += v`, returning the new value: a locked add where other threads may
/// race, a plain load and store in a process with one thread (see
/// `single_threaded`), which costs a fraction of a locked instruction and
/// does not wait for the stores before it.
#[inline(always)]
pub fn add_i64(a: &AtomicI64, v: i64) -> i64 {
    if single_threaded() {
        let n = a.load(Ordering::Relaxed).wrapping_add(v);
        a.store(n, Ordering::Relaxed);
        n
    } else {
        a.fetch_add(v, Ordering::Relaxed).wrapping_add(v)
    }
}

/// `a = max(a, v)`, returning the previous value; as `add_i64`.
#[inline(always)]
pub fn max_u64(a: &AtomicU64, v: u64) -> u64 {
    if single_threaded() {
        let old = a.load(Ordering::Relaxed);
        if v > old {
            a.store(v, Ordering::Relaxed);
        }
        old
    } else {
        a.fetch_max(v, Ordering::Relaxed)
    }
}

impl Default for RawSpin {
    fn default() -> Self {
        Self::new()
    }
}

impl RawSpin {
    pub const fn new() -> Self {
        RawSpin {
            holder: AtomicUsize::new(0),
        }
    }

    #[inline]
    pub fn lock(&self) {
        let me = me();
        // One thread: no other can take the lock between the load and the
        // store, so the locked `cmpxchg` (a full barrier, the costliest
        // instruction of an uncontended lock) is not needed. A signal
        // handler that takes the lock in between releases it before it
        // returns.
        if single_threaded() && self.holder.load(Ordering::Relaxed) == 0 {
            self.holder.store(me, Ordering::Relaxed);
            return;
        }
        let mut spins = 0u32;
        while self
            .holder
            .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                // sched_yield cannot fail, so errno is untouched.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.holder
            .compare_exchange(0, me(), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether this thread holds the lock: a frame below the caller on
    /// this thread's stack took it (the caller is a signal handler, or runs
    /// in one), and the lock cannot be had until that frame goes on.
    #[inline]
    pub fn held_here(&self) -> bool {
        self.holder.load(Ordering::Relaxed) == me()
    }

    /// # Safety
    /// Only for a lock taken by this thread, or in a forked child where the
    /// holder no longer exists.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.holder.store(0, Ordering::Release);
    }
}

impl<T> SpinLock<T> {
    pub const fn new(v: T) -> Self {
        SpinLock {
            raw: RawSpin::new(),
            data: UnsafeCell::new(v),
        }
    }

    /// The lock word alone.
    pub fn raw(&self) -> &RawSpin {
        &self.raw
    }

    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        self.raw.lock();
        Guard { lock: self }
    }

    #[inline]
    pub fn raw_lock(&self) {
        self.raw.lock();
    }

    /// The lock, unless this thread holds it already (see
    /// `RawSpin::held_here`): waiting for it would never end. For the paths
    /// that a signal handler can reach while a frame of the recorder below
    /// it holds a lock (writing the profile from an `_exit` in a handler).
    #[inline]
    pub fn lock_unless_held_here(&self) -> Option<Guard<'_, T>> {
        let mut spins = 0u32;
        loop {
            if self.raw.try_lock() {
                return Some(Guard { lock: self });
            }
            if self.raw.held_here() {
                return None;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no preconditions; it cannot fail.
                unsafe { libc::sched_yield() };
            }
        }
    }

    /// Tries for a bounded time; used where the holder may never come back
    /// (a fatal signal handler interrupting the holder on the same thread).
    /// A lock this thread holds itself is refused at once.
    pub fn try_lock_for(&self, attempts: u32) -> Option<Guard<'_, T>> {
        for _ in 0..attempts {
            if self.raw.try_lock() {
                return Some(Guard { lock: self });
            }
            if self.raw.held_here() {
                return None;
            }
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
        None
    }

    /// # Safety
    /// Only for a lock taken with `raw_lock` by this thread, or in a forked
    /// child where the holder no longer exists.
    #[inline]
    pub unsafe fn raw_unlock(&self) {
        // SAFETY: forwarded to the caller.
        unsafe { self.raw.unlock() };
    }

    /// Access without the lock.
    /// # Safety
    /// The caller must hold the lock (taken with `raw_lock`) or otherwise
    /// exclude every other accessor.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_unchecked(&self) -> &mut T {
        // SAFETY: forwarded to the caller.
        unsafe { &mut *self.data.get() }
    }
}

impl<T> core::ops::Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> core::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock.
        unsafe { self.lock.raw.unlock() };
    }
}

/// Saves `errno` and restores it when dropped: for the recorder's slow paths
/// that call into libc or the kernel, so the program never sees their errors.
pub struct ErrnoGuard(core::ffi::c_int);

impl Default for ErrnoGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl ErrnoGuard {
    #[inline]
    pub fn new() -> Self {
        // SAFETY: errno's location is valid for the calling thread.
        ErrnoGuard(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// While alive, `SIGXFSZ` is held on this thread, and one that came
/// meanwhile is discarded when dropped: a write of the recorder's past the
/// file size limit (`ulimit -f`) then fails with `EFBIG`, which the
/// recorder reports, instead of ending the program. (The kernel sends the
/// signal to the writing thread; its default action ended the program with
/// exit 153 where alone it exited 0.) A `SIGXFSZ` pending before is left
/// alone. Only system calls, in a signal handler too.
pub struct HoldXfsz {
    old: libc::sigset_t,
    was_pending: bool,
}

impl HoldXfsz {
    pub fn new() -> Self {
        // SAFETY: the sets are initialized by sigemptyset before use;
        // sigprocmask and sigpending only read and write them.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGXFSZ);
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            HoldXfsz {
                old,
                was_pending: xfsz_pending(),
            }
        }
    }
}

impl Default for HoldXfsz {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `SIGXFSZ` is pending for this thread or the process.
fn xfsz_pending() -> bool {
    // SAFETY: as in `HoldXfsz::new`.
    unsafe {
        let mut pending: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGXFSZ) == 1
    }
}

impl Drop for HoldXfsz {
    fn drop(&mut self) {
        let _e = ErrnoGuard::new();
        // SAFETY: as in `HoldXfsz::new`; sigtimedwait with a zero timeout
        // takes the pending signal without waiting.
        unsafe {
            if !self.was_pending && xfsz_pending() {
                let mut set: libc::sigset_t = core::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGXFSZ);
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::sigtimedwait(&set, core::ptr::null_mut(), &zero);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, core::ptr::null_mut());
        }
    }
}
