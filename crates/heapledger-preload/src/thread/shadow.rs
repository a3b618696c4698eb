//! The enter/exit stack's buffer (`hooks::enter_exit`, `--stack
//! enter-exit`): each thread's call sites, a copy of its deepest stack so
//! far, and charging that stack to the thread's stack use
//! (`charge_deepest`, from the allocation hooks, the thread's end and the
//! process's dump).

use crate::base::config;
use crate::data::stacks;
use crate::thread::tls;

/// Call sites kept per thread (the buffer holds twice this: the live
/// stack, then a copy of the deepest; then a [`Deepest`]).
pub const CAP: usize = 1024;

/// The thread's deepest stack so far, after the buffer's call sites.
#[repr(C)]
pub struct Deepest {
    /// The lowest stack address at an entry (0: none yet).
    pub low: u64,
    /// Call sites in the copy of the deepest stack.
    pub len: usize,
    /// How many of them still equal the live stack's.
    pub same: usize,
    /// Deeper than what the thread's counters hold.
    pub pending: bool,
}

/// The [`Deepest`] of the buffer `b`.
///
/// # Safety
/// `b` is a thread's buffer (`hooks::enter_exit`'s), used by that thread only.
pub unsafe fn deepest<'a>(b: *mut u64) -> &'a mut Deepest {
    // SAFETY: the mapping holds it after 2 * CAP words, zero-filled.
    unsafe { &mut *(b.add(2 * CAP) as *mut Deepest) }
}

/// The thread is deeper than ever, at `sp`, with `d + 1` call sites in `b`:
/// they become the copy of its deepest stack.
#[cold]
#[inline(never)]
pub fn deeper(deep: &mut Deepest, b: *mut u64, d: usize, sp: u64) {
    let same = deep.same.min(d);
    // SAFETY: b holds 2 * CAP words and d < CAP; the two halves do not
    // overlap.
    unsafe { core::ptr::copy_nonoverlapping(b.add(same), b.add(CAP + same), d + 1 - same) };
    deep.len = d + 1;
    deep.same = d + 1;
    deep.low = sp;
    deep.pending = true;
}

/// Charges the calling thread's deepest stack, if deeper than its counters
/// know, to its stack use (`st`: its state; in the recorder).
pub fn charge_deepest(st: &mut super::state::ThreadState) {
    let b = tls::tls().shadow.get();
    if b.is_null() {
        return;
    }
    // SAFETY: this thread's buffer.
    let deep = unsafe { deepest(b) };
    let n = deep.len;
    if !core::mem::replace(&mut deep.pending, false) || n == 0 {
        return;
    }
    if !st.on_stack(deep.low) {
        // A signal handler's entry on another stack: the search starts
        // again from the next entry.
        deep.low = 0;
        return;
    }
    // Innermost first, the innermost `max_depth` kept (as `shadow_stack`).
    let len = n.min(config::get().max_depth as usize).max(1);
    // SAFETY: the copy holds n call sites, and len <= n.
    let frame = |i: usize| unsafe { *b.add(CAP + n - 1 - i) };
    let mut hash = stacks::HASH_SEED;
    for i in 0..len {
        hash = stacks::mix(hash, frame(i));
    }
    let eq = |f: stacks::Frames| f.len() == len && f.iter().enumerate().all(|(i, v)| v == frame(i));
    let id = stacks::intern(hash, len, &eq, |out| {
        for (i, o) in out.iter_mut().enumerate() {
            *o = frame(i);
        }
    });
    if let Some(id) = id {
        st.note_stack_use(deep.low, id);
    }
}
