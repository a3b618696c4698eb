//! The recorder's thread: it ends the timeline's buckets
//! (`process::timeline`), and writes the checkpoints: while the program
//! runs, the dump it would leave at its end is written every
//! `checkpoint=MS` (`HEAPLEDGER_OPTS`; 0: never) beside the final dump
//! `P`, as `P.ckpt` (see `dump::ckpt`), so that a process killed by
//! SIGKILL (the OOM killer) still leaves its profile up to then.
//!
//! Who writes: a small thread of the recorder's, started when the library
//! is loaded (and in a forked child, by the fork), since a program may stop
//! allocating long before it is killed: no hook would run then to write
//! the last changes. It sleeps `MS`, and writes a checkpoint when something
//! changed since the last one (the threads' memory operations, the stacks,
//! the unrecorded events). It runs with every signal blocked (signals for
//! the process go to the program's threads), never enters a hook (its own
//! calls are forwarded, and not counted), has its own `errno`, and
//! allocates from the recorder's arena only. It ends when the process's
//! final dump is written.
//!
//! How the threads' tables are read while they run: each thread is held at
//! the door of its next hook while the counters are copied
//! (`thread::freeze`, one membarrier instead of a fence per event), then
//! let go before the copy is encoded and written; a thread that stays
//! inside a hook past a limit makes the checkpoint wait for the next turn.
//! So a checkpoint's counters are each thread's as of some moment between
//! two of its events, and never a table being grown.
//!
//! A thread of the recorder must not keep the process alive: glibc ends a
//! process whose threads all left through `pthread_exit` (`main` among
//! them) when its count of threads, `__nptl_nthreads`, falls to zero, and
//! a thread of ours would hold it at one for ever (a program whose main
//! thread leaves first hung at its end). So the count is lowered by one
//! once the thread is made, as if it were not there, and the thread never
//! leaves through glibc (which would lower it again): it ends with the
//! `exit` system call. Where the C library has no such count (not glibc),
//! no thread is made, and no checkpoint written.
//!
//! For the same reason the process still counts as single-threaded where
//! it was (`sync::single_threaded_again`): glibc's malloc and the
//! recorder keep their one-thread fast paths.
//!
//! What it costs: the copy of every counter while the threads wait (for
//! `stacks 1000000 500000`, half a million stacks: see docs/recorder.md),
//! and a thread of the process, which the program sees in
//! `/proc/self/task`.
//!
//! The descriptor of the file being written is opened by path and moved
//! at once above the program's numbers (`dump::ckpt`): a program that
//! opens a file in another thread at that very moment (a few microseconds
//! each checkpoint) may get the next number instead of the lowest.

use crate::base::clock::now_ns;
use crate::base::{config, phase};
use crate::data::{counters, stacks};
use crate::process::{control, dump, timeline};
use crate::thread::{state, tls};
use core::ffi::c_void;
use core::sync::atomic::{AtomicI32, Ordering};

/// The pid whose checkpoint thread was started (a forked child starts its
/// own).
static STARTED_FOR: AtomicI32 = AtomicI32::new(0);

/// How often `heapledger ctl`'s page is looked at, at least.
const CTL_EVERY_NS: u64 = 50_000_000;

/// How long a checkpoint waits for the threads inside hooks.
const HOLD_LIMIT_NS: u64 = 100_000_000;

/// Starts this process's recorder thread, once, where the process
/// records. Called outside any hook.
pub fn start() {
    let ms = config::get().checkpoint_ms;
    if phase::get() != phase::State::Recording || !phase::owns_memory() {
        return;
    }
    let pid = phase::pid();
    if STARTED_FOR.swap(pid, Ordering::AcqRel) == pid {
        return;
    }
    let t = tls::tls();
    let was = t.in_hook.replace(true);
    let own = t.own_calls.replace(true);
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches every object.
    let count = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__nptl_nthreads".as_ptr()) }
        as *const core::sync::atomic::AtomicU32;
    if count.is_null() {
        STARTED_FOR.store(0, Ordering::Relaxed);
        t.own_calls.set(own);
        t.in_hook.set(was);
        return;
    }
    // SAFETY: sigset_t and pthread types are plain data, initialized by the
    // calls below before use; the thread gets every signal blocked (it
    // inherits the mask), and this thread's mask is put back.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, 256 * 1024);
        let mut th: libc::pthread_t = 0;
        let alone = crate::base::sync::single_threaded();
        if libc::pthread_create(&mut th, &attr, run, ms as *mut c_void) != 0 {
            STARTED_FOR.store(0, Ordering::Relaxed);
        } else {
            // Not counted as one of the program's threads (see above): the
            // calling thread is counted, so this never reaches zero.
            (*count).fetch_sub(1, Ordering::AcqRel);
            crate::base::sync::single_threaded_again(alone);
        }
        libc::pthread_attr_destroy(&mut attr);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
    }
    t.own_calls.set(own);
    t.in_hook.set(was);
}

/// In a forked child that records (its dump file reserved): its own
/// thread, its own checkpoints (`P.ckpt` of its own dump), from 1.
pub fn forked() {
    start();
}

/// What changes when the program does anything the dump counts.
fn activity() -> u64 {
    state::activity()
        .wrapping_add((stacks::count() as u64) << 40)
        .wrapping_add(counters::UNRECORDED.load(Ordering::Relaxed) << 20)
}

extern "C" fn run(arg: *mut c_void) -> *mut c_void {
    let t = tls::tls();
    t.in_hook.set(true);
    t.own_calls.set(true);
    // SAFETY: a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"heapledger-ckpt".as_ptr()) };
    let ms = arg as u64;
    let every_ns = ms.saturating_mul(1_000_000);
    let mut last = None;
    let mut next_ckpt = now_ns().saturating_add(every_ns);
    loop {
        let mut wake = timeline::next_end();
        if ms != 0 {
            wake = wake.min(next_ckpt);
        }
        let now = now_ns();
        if control::has_page() {
            wake = wake.min(now.saturating_add(CTL_EVERY_NS));
        } else {
            let born = phase::START_NS.load(core::sync::atomic::Ordering::Relaxed);
            let due = born.saturating_add(control::PAGE_AFTER_NS);
            if now >= due {
                control::open_page();
                wake = wake.min(now.saturating_add(CTL_EVERY_NS));
            } else {
                wake = wake.min(due);
            }
        }
        wake = wake.min(control::auto_wake(now));
        let at = libc::timespec {
            tv_sec: (wake / 1_000_000_000) as libc::time_t,
            tv_nsec: (wake % 1_000_000_000) as libc::c_long,
        };
        // (Signals are blocked: no EINTR but from a stop; sleep the rest.)
        // SAFETY: a valid timespec; no remainder is asked for.
        while unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &at,
                core::ptr::null_mut(),
            )
        } != 0
        {}
        let ours = STARTED_FOR.load(Ordering::Relaxed) == phase::pid();
        if phase::get() != phase::State::Recording || !ours {
            // Not through glibc, which would count this thread out a
            // second time (see the module's doc).
            loop {
                // SAFETY: ends this thread only; it holds no lock.
                unsafe { libc::syscall(libc::SYS_exit, 0) };
            }
        }
        timeline::tick();
        control::poll();
        control::auto_snapshots(now_ns());
        if ms == 0 || now_ns() < next_ckpt {
            continue;
        }
        let now = activity();
        if last != Some(now) && dump::write_checkpoint(HOLD_LIMIT_NS) {
            last = Some(now);
        }
        next_ckpt = now_ns().saturating_add(every_ns);
    }
}
