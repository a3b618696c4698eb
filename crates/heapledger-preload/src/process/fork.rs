//! fork(): the child must not inherit a lock held by another thread, so every
//! lock of the recorder is taken before the fork and released on both sides.
//! The child writes its own profile (or stops recording when children are
//! not followed), which holds what the child did: it counts from the fork,
//! as if it had started recording there (its counters, peak and threads
//! start from zero; its start time is the fork's), the blocks it inherited
//! are counted apart (`data::live::inherited`), and its dump names the
//! process it forked from (`FORKED_FROM`).
//!
//! A fork from a signal handler may find a lock held by the forking thread
//! itself: a hook that the signal interrupted took it, and releases it when
//! the handler returns (in the parent, and in the child, whose thread is the
//! same). Waiting for it would never end; it is left to its holder, on both
//! sides. (glibc takes no allocator lock to fork a single-threaded process,
//! so such a program forks from a handler safely without heapledger.)

use crate::base::clock;
use crate::base::sync::RawSpin;
use crate::base::{arena, config, phase};
use crate::data::{counters, level, live, modules, only, stacks, timeline, timelog, traceback};
use crate::process::{checkpoint, dump, end};
use crate::thread::{freeze, life, side, state};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// In a recorded child: the pid of the process it forked from (0: it was
/// not forked from a recorded process, or it execs a new program since).
pub static FORKED_FROM: AtomicU32 = AtomicU32::new(0);

/// Every lock of the recorder, in the order they are taken.
fn locks() -> impl Iterator<Item = &'static RawSpin> {
    [
        dump::CKPT.raw(),
        timeline::SERIES.raw(),
        crate::process::timeline::READERS.raw(),
        state::REGISTRY.raw(),
        stacks::INSERT.raw(),
        modules::REBUILD_LOCK.raw(),
        modules::SEEN.raw(),
        live::YOUNG_LOCK.raw(),
        side::LEARNING.raw(),
    ]
    .into_iter()
    .chain(live::SHARD_TABLE.iter().map(|s| s.0.raw()))
    .chain([
        // The program's own frames and names (heapledger.h): taken inside
        // a dump's lock, and taking the arena's lock inside theirs.
        traceback::POOL.raw(),
        traceback::LABELS.raw(),
        timelog::USER_KINDS.raw(),
        // `--only-lib`'s names (copied after a dlopen).
        only::PATTERNS.raw(),
        // The level's, on a processor without cmpxchg16b.
        &level::LOCK,
        state::ORPHAN.raw(),
        live::inherited::INHERITED.raw(),
        arena::ARENA_LOCK.raw(),
    ])
}

const LOCKS: usize = 9 + live::SHARD_TABLE.len() + 8;

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
    crate::process::control::forked();
    life::forked();
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() };
    let parent = phase::OWNER_PID.swap(pid, Ordering::Relaxed);
    if !config::get().follow {
        dump::forget();
        phase::set(phase::State::Off);
    } else if phase::get() == phase::State::Recording {
        start_afresh(parent);
        dump::reserve();
        freeze::forked();
        checkpoint::forked();
    }
}

/// The child counts from the fork (see the top of this file).
fn start_afresh(parent: i32) {
    phase::START_TICKS.store(clock::ticks(), Ordering::Relaxed);
    phase::START_NS.store(clock::now_ns(), Ordering::Relaxed);
    live::inherited::inherit();
    life::start_afresh();
    counters::forked();
    crate::process::timeline::start();
    end::forked();
    FORKED_FROM.store(parent as u32, Ordering::Relaxed);
}

pub fn install() {
    // SAFETY: the three handlers have the required signature.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}
