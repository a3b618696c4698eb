//! fork(): the child must not inherit a lock held by another thread, so every
//! lock of the recorder is taken before the fork and released on both sides.
//! The child keeps a copy of the parent's history up to the fork and writes
//! its own profile (or stops recording when children are not followed).

use crate::{arena, config, live, modules, stacks, state, thread};

unsafe extern "C" fn prepare() {
    thread::REGISTRY.raw_lock();
    stacks::INSERT.raw_lock();
    modules::REBUILD_LOCK.raw_lock();
    modules::SEEN.raw_lock();
    for s in live::SHARD_TABLE.iter() {
        s.0.raw_lock();
    }
    thread::ORPHAN.raw_lock();
    arena::ARENA_LOCK.raw_lock();
}

unsafe fn release() {
    // SAFETY: all taken in `prepare` by this thread (or, in the child, by a
    // thread that no longer exists).
    unsafe {
        arena::ARENA_LOCK.raw_unlock();
        thread::ORPHAN.raw_unlock();
        for s in live::SHARD_TABLE.iter() {
            s.0.raw_unlock();
        }
        modules::SEEN.raw_unlock();
        modules::REBUILD_LOCK.raw_unlock();
        stacks::INSERT.raw_unlock();
        thread::REGISTRY.raw_unlock();
    }
}

unsafe extern "C" fn parent() {
    // SAFETY: see release.
    unsafe { release() };
}

unsafe extern "C" fn child() {
    // SAFETY: see release.
    unsafe { release() };
    crate::dump::forked();
    // SAFETY: no preconditions.
    state::OWNER_PID.store(
        unsafe { libc::getpid() },
        core::sync::atomic::Ordering::Relaxed,
    );
    if !config::get().follow {
        crate::dump::forget();
        state::set(state::State::Off);
    } else if state::get() == state::State::Recording {
        crate::dump::reserve();
    }
}

pub fn install() {
    // SAFETY: the three handlers have the required signature.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}
