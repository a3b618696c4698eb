//! A spin lock for the recorder's rare slow paths and its sharded tables.
//!
//! std's `Mutex` is fine in most code, but here a lock must never allocate,
//! must be usable before anything is initialized, and must be forcibly
//! released in a forked child (see `fork.rs`), so it is a plain atomic flag.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

pub struct SpinLock<T> {
    locked: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialized by `locked`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
unsafe impl<T: Send> Send for SpinLock<T> {}

pub struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub const fn new(v: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            data: UnsafeCell::new(v),
        }
    }

    #[inline]
    pub fn lock(&self) -> Guard<'_, T> {
        self.raw_lock();
        Guard { lock: self }
    }

    #[inline]
    pub fn raw_lock(&self) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
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

    /// Tries for a bounded time; used where the holder may never come back
    /// (a fatal signal handler interrupting the holder on the same thread).
    pub fn try_lock_for(&self, attempts: u32) -> Option<Guard<'_, T>> {
        for _ in 0..attempts {
            if self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(Guard { lock: self });
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
        self.locked.store(false, Ordering::Release);
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
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// Saves `errno` and restores it when dropped: for the recorder's slow paths
/// that call into libc or the kernel, so the program never sees their errors.
pub struct ErrnoGuard(core::ffi::c_int);

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
