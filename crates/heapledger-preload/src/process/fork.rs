//! fork(): the child must not inherit a lock held by another thread, so every
//! lock of the recorder is taken before the fork and released on both sides.
//! The child keeps a copy of the parent's history up to the fork and writes
//! its own profile (or stops recording when children are not followed).
//!
//! A fork from a signal handler may find a lock held by the forking thread
//! itself: a hook that the signal interrupted took it, and releases it when
//! the handler returns (in the parent, and in the child, whose thread is the
//! same). Waiting for it would never end; it is left to its holder, on both
//! sides. (glibc takes no allocator lock to fork a single-threaded process,
//! so such a program forks from a handler safely without heapledger.)

use crate::base::sync::RawSpin;
use crate::base::{arena, config, phase};
use crate::data::{live, modules, stacks};
use crate::process::dump;
use crate::thread::{life, side, state};
use core::sync::atomic::{AtomicU64, Ordering};

/// Every lock of the recorder, in the order they are taken.
fn locks() -> impl Iterator<Item = &'static RawSpin> {
    [
        state::REGISTRY.raw(),
        stacks::INSERT.raw(),
        modules::REBUILD_LOCK.raw(),
        modules::SEEN.raw(),
        live::YOUNG_LOCK.raw(),
        side::LEARNING.raw(),
    ]
    .into_iter()
    .chain(live::SHARD_TABLE.iter().map(|s| s.0.raw()))
    .chain([state::ORPHAN.raw(), arena::ARENA_LOCK.raw()])
}

const LOCKS: usize = 6 + live::SHARD_TABLE.len() + 2;

/// Locks `prepare` left to a frame below it on the forking thread, by their
/// place in `locks()`.
static LEFT: [AtomicU64; LOCKS.div_ceil(64)] = [const { AtomicU64::new(0) }; LOCKS.div_ceil(64)];

/// The word of `LEFT` for lock `i`, and its bit.
fn left(i: usize) -> (&'static AtomicU64, u64) {
    (&LEFT[i / 64], 1u64 << (i % 64))
}

unsafe extern "C" fn prepare() {
    // `LOCKS` counts `locks()` (checked where the tests fork, in debug builds).
    debug_assert_eq!(locks().count(), LOCKS);
    for (i, l) in locks().enumerate() {
        let (word, bit) = left(i);
        if l.held_here() {
            word.fetch_or(bit, Ordering::Relaxed);
        } else {
            word.fetch_and(!bit, Ordering::Relaxed);
            l.lock();
        }
    }
}

unsafe fn release() {
    for (i, l) in locks().enumerate() {
        let (word, bit) = left(i);
        if word.load(Ordering::Relaxed) & bit == 0 {
            // SAFETY: taken in `prepare` by this thread (or, in the child,
            // by the thread that forked, which is this one).
            unsafe { l.unlock() };
        }
    }
}

unsafe extern "C" fn parent() {
    // SAFETY: see release.
    unsafe { release() };
}

unsafe extern "C" fn child() {
    // SAFETY: see release.
    unsafe { release() };
    dump::forked();
    life::forked();
    // SAFETY: no preconditions.
    phase::OWNER_PID.store(
        unsafe { libc::getpid() },
        core::sync::atomic::Ordering::Relaxed,
    );
    if !config::get().follow {
        dump::forget();
        phase::set(phase::State::Off);
    } else if phase::get() == phase::State::Recording {
        dump::reserve();
    }
}

pub fn install() {
    // SAFETY: the three handlers have the required signature.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}
