//! Entering a hook: the thread's state, taken for the hook's length and
//! released on drop; the orphan state for a thread with none; the count of
//! events that could not be recorded; the stack of an event.

use crate::base::{arena, config, degrade, phase};
use crate::data::counters::UNRECORDED;
use crate::data::live;
use crate::data::unwind::Capture;
use crate::process::start;
use crate::thread::freeze;
use crate::thread::state::{self, ThreadState};
use crate::thread::tls::{self, Tls};
use core::sync::atomic::{compiler_fence, Ordering};

/// An entered hook: the thread's state, released on drop.
///
/// The per-event bookkeeping makes no call that can set `errno`; the rare
/// slow paths that do (mapping memory, starting a thread's state, refreshing
/// modules) save and restore it themselves (`ErrnoGuard`), so `errno` is
/// what the real function left.
pub(super) struct Hook {
    tls: *const Tls,
    st: *mut ThreadState,
    pub(super) orphan: bool,
    /// Where the call is counted when that is not `st`: the retired state
    /// of a thread in its last clean-up (`st` is then the orphan state).
    pub(super) calls: *mut ThreadState,
}

impl Hook {
    #[inline(always)]
    pub(super) fn keep_errno(&mut self) {}

    #[inline(always)]
    pub(super) fn st(&mut self) -> &mut ThreadState {
        // SAFETY: the state belongs to this thread (or to the orphan lock we hold).
        unsafe { &mut *self.st }
    }
}

impl Drop for Hook {
    #[inline(always)]
    fn drop(&mut self) {
        self.st().busy.store(false, Ordering::Release);
        if self.orphan {
            // SAFETY: taken with raw_lock in `enter`.
            unsafe { state::ORPHAN.raw_unlock() };
        }
        // SAFETY: tls points to this thread's TLS block.
        tls::leave_recorder(unsafe { &*self.tls }, false);
    }
}

#[inline(always)]
pub(super) fn enter() -> Option<Hook> {
    enter_with(true)
}

#[inline(always)]
fn enter_with(create: bool) -> Option<Hook> {
    let t = tls::tls();
    if !may_enter(t) {
        return None;
    }
    Some(entered(t, create))
}

/// Whether a hook on this thread may record: not inside the recorder
/// already, the recorder running, and recording not stopped for want of
/// memory (`base::degrade`).
#[inline(always)]
pub(super) fn may_enter(t: &Tls) -> bool {
    !t.in_hook.get() && start::ready() && !degrade::stopped()
}

/// `enter` once `may_enter` said yes. (Separate from it, so that the hot
/// hooks keep the `Hook` in registers instead of an `Option` in memory.)
#[inline(always)]
pub(super) fn entered(t: &Tls, create: bool) -> Hook {
    let tls = t as *const Tls;
    t.in_hook.set(true);
    let st = if create {
        state::current(t)
    } else {
        state::existing(t)
    };
    let h = if state::is_live(st) {
        Hook {
            tls,
            st,
            orphan: false,
            calls: core::ptr::null_mut(),
        }
    } else {
        orphan_hook(t, st)
    };
    // SAFETY: st is this thread's state or the locked orphan.
    let s = unsafe { &*h.st };
    s.busy.store(true, Ordering::Relaxed);
    // The store before the load (the CPU's order is the checkpoint's
    // membarrier: `thread::freeze`).
    compiler_fence(Ordering::SeqCst);
    if s.frozen.load(Ordering::Relaxed) {
        freeze::wait_thawed(s);
    }
    h
}

/// `enter` on a thread with no state of its own (none yet, or retired):
/// the shared orphan state, under its lock.
#[cold]
#[inline(never)]
fn orphan_hook(t: &Tls, st: *mut ThreadState) -> Hook {
    let calls = if state::is_dead(st) {
        t.retired.get()
    } else {
        core::ptr::null_mut()
    };
    state::ORPHAN.raw_lock();
    // SAFETY: we hold the orphan lock.
    let o = unsafe { state::ORPHAN.get_unchecked() };
    Hook {
        tls: t,
        st: &mut **o.get_or_insert_with(state::new_orphan) as *mut ThreadState,
        orphan: true,
        calls,
    }
}

/// Counts an event that happened where recording was impossible.
#[inline(always)]
pub(super) fn unrecorded() {
    // Never `start::ready()` here: during start-up the starting thread's own
    // nested calls land here, and ready() would wait for start-up to end.
    // Nor the recorder's own calls of C library functions that allocate.
    let t = tls::tls();
    if phase::get() == phase::State::Recording && !t.own_calls.get() {
        if degrade::stopped() {
            stopped_call(t);
        } else {
            UNRECORDED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A call forwarded because recording stopped: counted, and the first one
/// outside the recorder gives the live-block tables back (where the
/// recorder stopped inside its own bookkeeping, with a shard's lock held,
/// they could not be given back there).
#[cold]
#[inline(never)]
fn stopped_call(t: &Tls) {
    degrade::NOT_RECORDED.fetch_add(1, Ordering::Relaxed);
    if !t.in_hook.get() {
        live::release();
    }
}

/// Whether `errno` says the system had no memory (what a failed
/// allocation of the malloc family sets, besides EINVAL for a bad
/// alignment).
#[inline(always)]
pub(super) fn no_memory() -> bool {
    // SAFETY: errno's location is valid.
    unsafe { *libc::__errno_location() == libc::ENOMEM }
}

/// Where the program's allocation of `size` bytes failed for want of
/// memory while the recorder holds at least that much: stops recording and
/// gives the live-block tables back, so that the call, tried again, fails
/// only where it would have failed without the recorder. True when the
/// call should be tried again. Called inside a hook, holding no shard's
/// lock; `errno` is kept (the unmapping saves it).
#[cold]
#[inline(never)]
pub(super) fn give_back_for(size: usize) -> bool {
    if size == 0
        || degrade::stopped()
        || arena::INTERNAL_BYTES.load(Ordering::Relaxed) < size as u64
    {
        return false;
    }
    degrade::stop(degrade::Cause::ProgramMemory);
    live::release();
    true
}

#[inline(always)]
pub(super) fn stack(st: &mut ThreadState, fp: u64) -> u32 {
    let top = st.user_top();
    if top != crate::data::traceback::NONE {
        return pushed_or_none(st, top, fp);
    }
    match st.unwind.as_mut() {
        Some(_) if crate::process::control::stacks_off() => 0,
        Some(_) if degrade::no_stacks() => {
            degrade::WITHOUT_STACK.fetch_add(1, Ordering::Relaxed);
            0
        }
        Some(u) => match u.capture(fp) {
            Some(Capture { id, truncated }) => {
                st.truncated += truncated as u64;
                id
            }
            None => no_stack(),
        },
        None if config::get().stack_mode == heapledger_wire::StackMode::EnterExit
            && !crate::process::control::stacks_off()
            && !degrade::no_stacks() =>
        {
            crate::thread::shadow::charge_deepest(st);
            match super::enter_exit::shadow_stack(fp) {
                0 => no_stack(),
                id => id,
            }
        }
        None => 0,
    }
}

/// The stack of a thread with frames of its own pushed (`top`: see
/// `hooks::user`), which make its stack in every mode but `--stack none`.
#[cold]
#[inline(never)]
fn pushed_or_none(st: &ThreadState, top: u32, fp: u64) -> u32 {
    let with_stacks =
        st.unwind.is_some() || config::get().stack_mode == heapledger_wire::StackMode::EnterExit;
    if !with_stacks || crate::process::control::stacks_off() {
        return 0;
    }
    if degrade::no_stacks() {
        degrade::WITHOUT_STACK.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    match super::user::user_stack(top, fp) {
        0 => no_stack(),
        id => id,
    }
}

/// A stack that could not be kept: the stack table had no memory for it
/// (or the unwinder none for its walk). Stacks stop; this allocation is
/// the empty stack's.
#[cold]
#[inline(never)]
fn no_stack() -> u32 {
    degrade::stop_stacks(degrade::Cause::RecorderMemory);
    degrade::WITHOUT_STACK.fetch_add(1, Ordering::Relaxed);
    0
}
