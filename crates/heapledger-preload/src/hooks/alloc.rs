//! The malloc family's full hooks: every call `malloc`'s and `free`'s lean
//! paths do not take (`lean.rs`), and all of calloc, realloc,
//! reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc.

use super::enter::{entered, give_back_for, may_enter, no_memory, stack, unrecorded};
use super::release::{not_live, on_release, take_live};
use crate::base::clock::{ticks, Clock};
use crate::base::{config, degrade, real};
use crate::data::counters::{move_level, LIFETIME_ONE_IN};
use crate::data::timeline;
use crate::data::{live, only, sampler};
use crate::thread::side;
use crate::thread::state::ThreadState;
use crate::thread::tls::{self, Tls};
use core::ffi::{c_int, c_void};
use heapledger_wire::AllocFn;

/// Whether a block of stack `id` is the empty stack's: every block with
/// `--stack none`, and those allocated while stacks are off (or could not
/// be kept) otherwise. Their bytes alive are counted, but neither their
/// stack's maximum nor its share at the peak is tracked per event, nor
/// their lifetimes: the dump takes the share as the peak less every other
/// stack's (`dump::encode::write_stacks`), so that stacks off cost what
/// `--stack none` costs.
#[inline(always)]
pub(super) fn stackless(id: u32) -> bool {
    id == 0
}

/// Counts one call of `f` with `bytes` and its duration `dt`: in the
/// thread's state, or in `calls` when that is set (a call in a thread's
/// last clean-up, after heapledger's key destructor retired its state: the
/// frees of other libraries' key destructors, served by the orphan state,
/// still count for the thread that made them).
#[inline(always)]
fn count_call(st: &mut ThreadState, calls: *mut ThreadState, f: AllocFn, bytes: u64, dt: u64) {
    let c = if calls.is_null() {
        st
    } else {
        // SAFETY: a retired state, never freed, written only by the thread
        // that owned it (this one); `st` is the orphan, another object.
        unsafe { &mut *calls }
    };
    let s = &mut c.stats[f as usize];
    s.0 += 1;
    s.1 += bytes;
    s.2 += dt;
    c.mem_ops += 1;
}

/// Records a successful allocation of `size` bytes at `p`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn on_alloc(
    st: &mut ThreadState,
    calls: *mut ThreadState,
    f: AllocFn,
    p: *mut c_void,
    size: usize,
    mut t0: u64,
    dt: u64,
    fp: u64,
) -> u32 {
    if tls::tls().disabled.get() {
        // Recording off for this thread (`heapledger_disable`).
        return NOT_RECORDED;
    }
    // A failed request is a call, but allocates nothing: its bytes (a
    // program's probe of 2^62 bytes) would swamp the function's total, as
    // a failed realloc's do not either.
    let bytes = if p.is_null() { 0 } else { size as u64 };
    count_call(st, calls, f, bytes, dt);
    if p.is_null() {
        return NOT_RECORDED;
    }
    // `--only-lib`: the chosen libraries' allocations only.
    let mut taken = None;
    if only::active() {
        // SAFETY: the trampoline's frame record: saved rbp, return address.
        match only::by_caller(unsafe { *((fp + 8) as *const u64) }) {
            Some(true) => {}
            Some(false) => return NOT_RECORDED,
            None => match stack(st, fp) {
                id if only::by_stack(id) => taken = Some(id),
                _ => return NOT_RECORDED,
            },
        }
    }
    // Count and byte weights: 1 and the size, or a sample's estimate.
    let (cw, bw) = match st.sampler.as_mut() {
        None => (1, size as u64),
        Some(s) => {
            let t = tls::tls();
            match s.take(&t.left, &t.seg, &t.lean_bytes, size as u64) {
                None => return NOT_RECORDED,
                Some(cw) => {
                    sampler::mark(p as u64);
                    (
                        cw,
                        sampler::bytes_weight(size as u64, config::get().sample_every),
                    )
                }
            }
        }
    };
    st.sizes.add(size as u64, cw);
    let id = taken.unwrap_or_else(|| stack(st, fp));
    let Some(id) = with_counters(st, id) else {
        return NOT_RECORDED;
    };
    let lifetime_head = config::get().lifetime_head;
    let sampled = st.sampler.is_some();
    // The level first: its move says where this event stands against the
    // peak, which the stack's share of the peak needs.
    let m = move_level(bw as i64, t0);
    st.scatter_alloc(size as u64, t0, cw);
    st.note_stack_use(fp, id);
    st.moves[0] += cw;
    st.moves[1] += bw;
    st.last_alloc = if sampled { 0 } else { p as u64 };
    st.note_blocks();
    let Some(mut c) = st.stacks.get(id) else {
        // (`with_counters` made room: not reached.)
        move_level(-(bw as i64), 0);
        return NOT_RECORDED;
    };
    timeline::rise(m.level, id);
    let head = c.allocs_below(lifetime_head);
    c.add_alloc(size as u64, cw, bw);
    if size == 0 {
        c.add_zeros(cw);
    }
    let ps = c.ps;
    // The entry's weight: a sampled block's count weight, which also
    // weighs its lifetime; otherwise its lifetime's: 1 for a stack's first
    // blocks in this thread, then LIFETIME_ONE_IN for one block in that
    // many, and 0 (not timed) for the others.
    // (A stackless block's bytes alive are in the sums already.)
    let (weight, timed) = if stackless(id) {
        (if sampled { cw } else { 0 }, false)
    } else {
        ps.add_alive(id, bw as i64, &m);
        let w = if sampled {
            cw
        } else if head {
            1
        } else if st.lifetime_pick() {
            LIFETIME_ONE_IN
        } else {
            0
        };
        (w, w != 0)
    };
    if !timed {
        // No lifetime: a time read only for this call's duration must not
        // start one (it did, in `--stack none`, measured from time 0).
        t0 = 0;
    } else if t0 == 0 {
        t0 = ticks();
    }
    if only::active() {
        sampler::mark(p as u64);
    }
    let kept = live::insert(live::Entry {
        addr: p as u64,
        size: size as u64,
        time: t0,
        stack: id,
        weight: weight.min(u32::MAX as u64) as u32,
    });
    if !kept {
        // No memory for the live blocks: recording stops (the tables are
        // given back by the next call, outside this one's bookkeeping).
        degrade::stop(degrade::Cause::RecorderMemory);
    }
    id
}

/// `id`, or the empty stack where the thread has no memory for the
/// counters of `id` (stacks stop), or None where it has none for those
/// either (recording stops): after this, `stacks.get` finds the answer's
/// counters without growing.
#[inline(always)]
fn with_counters(st: &mut ThreadState, id: u32) -> Option<u32> {
    if st.stacks.has(id) {
        return Some(id);
    }
    new_counters(st, id)
}

/// `with_counters` for a stack the thread has no counters of yet: its
/// table is handed over first where the threads hold too many
/// (`thread::life::spill`; checked here, off the path of every event).
#[cold]
#[inline(never)]
fn new_counters(st: &mut ThreadState, id: u32) -> Option<u32> {
    if st.stacks.spill_due() {
        crate::thread::life::spill(st);
    }
    if st.stacks.get(id).is_some() {
        return Some(id);
    }
    no_counters(st, id)
}

#[cold]
#[inline(never)]
fn no_counters(st: &mut ThreadState, id: u32) -> Option<u32> {
    if id != 0 {
        degrade::stop_stacks(degrade::Cause::RecorderMemory);
        if st.stacks.get(0).is_some() {
            return Some(0);
        }
    }
    degrade::stop(degrade::Cause::RecorderMemory);
    None
}

/// `on_alloc`'s answer when the block was not recorded (failed or not sampled).
const NOT_RECORDED: u32 = u32::MAX;

#[inline(always)]
fn fwd_malloc(size: usize) -> *mut c_void {
    match real::malloc() {
        // SAFETY: the real malloc.
        Some(f) => unsafe { f(size) },
        None => real::boot_alloc(size, 16),
    }
}

macro_rules! alloc_hook {
    ($fp:ident, $f:expr, $size:expr, $call:expr) => {{
        side::roomy(|t| {
            if !may_enter(t) {
                unrecorded();
                return $call;
            }
            let mut h = entered(t, true);
            let c = Clock::start(&mut h.st().calls);
            let mut p = $call;
            if p.is_null() && no_memory() && give_back_for($size) {
                // Recording stopped: the call is tried again, and counted,
                // not recorded.
                p = $call;
                let calls = h.calls;
                count_call(h.st(), calls, $f, $size as u64, c.duration());
                return p;
            }
            h.keep_errno();
            let dt = c.duration();
            let calls = h.calls;
            on_alloc(h.st(), calls, $f, p, $size, c.t0, dt, $fp);
            p
        })
    }};
}

/// # Safety
/// Called as C's malloc.
pub(super) unsafe extern "C" fn malloc_impl(size: usize, fp: u64) -> *mut c_void {
    alloc_hook!(fp, AllocFn::Malloc, size, fwd_malloc(size))
}

/// # Safety
/// Called as C's calloc.
unsafe extern "C" fn calloc_impl(n: usize, m: usize, fp: u64) -> *mut c_void {
    let size = n.checked_mul(m).unwrap_or(0);
    let call = || match real::calloc() {
        // SAFETY: the real calloc.
        Some(f) => unsafe { f(n, m) },
        // The boot buffer is zero-filled and never reused.
        None => match n.checked_mul(m) {
            Some(s) => real::boot_alloc(s, 16),
            None => core::ptr::null_mut(),
        },
    };
    alloc_hook!(fp, AllocFn::Calloc, size, call())
}

/// `free`'s full hook (see `free` for its lean path).
///
/// # Safety
/// Called as C's free.
pub(super) unsafe extern "C" fn free_full(p: *mut c_void) {
    if real::is_boot(p) {
        return;
    }
    side::roomy(|t| free_body(t, p))
}

#[inline(always)]
fn free_body(t: &Tls, p: *mut c_void) {
    let fwd = |p| {
        if let Some(f) = real::free() {
            // SAFETY: p came from the real allocator (boot blocks returned above).
            unsafe { f(p) }
        }
    };
    if !may_enter(t) {
        if !p.is_null() {
            unrecorded();
        }
        return fwd(p);
    }
    // A thread with no state yet does not get one for `free(NULL)`, which
    // glibc calls in a thread's last clean-up, after the key destructors
    // that retire a state have run (such a state would never be retired);
    // the orphan state counts it.
    let mut h = entered(t, !p.is_null());
    let c = Clock::start(&mut h.st().calls);
    let st = h.st();
    let mut size = 0;
    if !p.is_null() {
        match take_live(p as u64) {
            Some(e) => {
                size = e.size;
                on_release(st, &e, c.t0);
            }
            None => size = not_live(st, p as u64),
        }
    }
    fwd(p);
    h.keep_errno();
    // glibc's own free(NULL) in a thread's last clean-up is not the
    // program's call (a thread with no state gets none for it either).
    if p.is_null() && h.orphan {
        return;
    }
    let calls = h.calls;
    count_call(h.st(), calls, AllocFn::Free, size, c.duration());
}

#[inline(always)]
unsafe fn realloc_common(p: *mut c_void, size: usize, fp: u64) -> *mut c_void {
    side::roomy(|t| realloc_body(t, p, size, fp))
}

#[inline(always)]
fn realloc_body(t: &Tls, p: *mut c_void, size: usize, fp: u64) -> *mut c_void {
    let fwd = |p, size| match real::realloc() {
        // SAFETY: the real realloc on a pointer of the real allocator.
        Some(f) => unsafe { f(p, size) },
        None => core::ptr::null_mut(),
    };
    if real::is_boot(p) {
        // Move a boot block to the real heap.
        let q = fwd_malloc(size);
        if !q.is_null() {
            // SAFETY: both blocks hold at least min(old, new) bytes.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    p as *const u8,
                    q as *mut u8,
                    real::boot_size(p).min(size),
                )
            };
        }
        return q;
    }
    if !may_enter(t) {
        unrecorded();
        return fwd(p, size);
    }
    let mut h = entered(t, true);
    let c = Clock::start(&mut h.st().calls);
    let t0 = c.t0;
    let old = if p.is_null() {
        None
    } else {
        live::remove(p as u64)
    };
    let mut q = fwd(p, size);
    if q.is_null() && no_memory() && give_back_for(size) {
        // Recording stopped: tried again, counted, not recorded.
        q = fwd(p, size);
        let calls = h.calls;
        count_call(h.st(), calls, AllocFn::Realloc, size as u64, c.duration());
        return q;
    }
    let dt = c.duration();
    h.keep_errno();
    let calls = h.calls;
    let st = h.st();
    if q.is_null() && size != 0 && !p.is_null() {
        // Failed: the old block is untouched and still alive.
        if let Some(e) = old {
            live::insert(e);
            if super::release::filtered() {
                sampler::mark(e.addr);
            }
        }
        count_call(st, calls, AllocFn::Realloc, 0, dt);
        return q;
    }
    let mut old_size = old.map_or(0, |e| e.size);
    if let Some(e) = old {
        on_release(st, &e, t0);
    } else if !p.is_null() {
        old_size = not_live(st, p as u64);
    }
    if q.is_null() {
        // realloc(p, 0) freed p.
        count_call(st, calls, AllocFn::Realloc, 0, dt);
        return q;
    }
    let id = on_alloc(st, calls, AllocFn::Realloc, q, size, t0, dt, fp);
    if id == NOT_RECORDED {
        return q;
    }
    let Some(mut c) = st.stacks.get(id) else {
        return q;
    };
    c.add_realloc(size as i64 - old_size as i64);
    if !p.is_null() {
        st.jumps.add((old_size, size as u64), 1);
    }
    q
}

/// # Safety
/// Called as C's realloc.
unsafe extern "C" fn realloc_impl(p: *mut c_void, size: usize, fp: u64) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { realloc_common(p, size, fp) }
}

/// # Safety
/// Called as C's reallocarray.
unsafe extern "C" fn reallocarray_impl(p: *mut c_void, n: usize, m: usize, fp: u64) -> *mut c_void {
    match n.checked_mul(m) {
        // SAFETY: forwarded contract.
        Some(size) => unsafe { realloc_common(p, size, fp) },
        None => {
            // SAFETY: errno location is valid.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            core::ptr::null_mut()
        }
    }
}

/// # Safety
/// Called as C's posix_memalign.
unsafe extern "C" fn posix_memalign_impl(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    fp: u64,
) -> c_int {
    let call = || match real::posix_memalign() {
        // SAFETY: the real function with the caller's arguments.
        Some(f) => unsafe { f(out, align, size) },
        None => {
            let p = real::boot_alloc(size, align);
            // SAFETY: out is the caller's pointer.
            unsafe { *out = p };
            if p.is_null() {
                libc::ENOMEM
            } else {
                0
            }
        }
    };
    side::roomy(|t| {
        if !may_enter(t) {
            unrecorded();
            return call();
        }
        let mut h = entered(t, true);
        let c = Clock::start(&mut h.st().calls);
        let mut r = call();
        if r == libc::ENOMEM && give_back_for(size) {
            r = call();
            let calls = h.calls;
            count_call(
                h.st(),
                calls,
                AllocFn::PosixMemalign,
                size as u64,
                c.duration(),
            );
            return r;
        }
        h.keep_errno();
        let dt = c.duration();
        // SAFETY: on success the real function stored the block in *out.
        let p = if r == 0 {
            unsafe { *out }
        } else {
            core::ptr::null_mut()
        };
        let calls = h.calls;
        on_alloc(h.st(), calls, AllocFn::PosixMemalign, p, size, c.t0, dt, fp);
        r
    })
}

/// # Safety
/// Called as C's aligned_alloc.
unsafe extern "C" fn aligned_alloc_impl(align: usize, size: usize, fp: u64) -> *mut c_void {
    let call = || match real::aligned_alloc() {
        // SAFETY: the real function.
        Some(f) => unsafe { f(align, size) },
        None => real::boot_alloc(size, align),
    };
    alloc_hook!(fp, AllocFn::AlignedAlloc, size, call())
}

/// # Safety
/// Called as C's memalign.
unsafe extern "C" fn memalign_impl(align: usize, size: usize, fp: u64) -> *mut c_void {
    let call = || match real::memalign() {
        // SAFETY: the real function.
        Some(f) => unsafe { f(align, size) },
        None => real::boot_alloc(size, align),
    };
    alloc_hook!(fp, AllocFn::Memalign, size, call())
}

/// # Safety
/// Called as C's valloc.
unsafe extern "C" fn valloc_impl(size: usize, fp: u64) -> *mut c_void {
    let call = || match real::valloc() {
        // SAFETY: the real function.
        Some(f) => unsafe { f(size) },
        None => real::boot_alloc(size, 4096),
    };
    alloc_hook!(fp, AllocFn::Valloc, size, call())
}

/// # Safety
/// Called as C's pvalloc.
unsafe extern "C" fn pvalloc_impl(size: usize, fp: u64) -> *mut c_void {
    let call = || match real::pvalloc() {
        // SAFETY: the real function.
        Some(f) => unsafe { f(size) },
        None => real::boot_alloc((size + 4095) & !4095, 4096),
    };
    alloc_hook!(fp, AllocFn::Pvalloc, size, call())
}

trampoline!(calloc, calloc_impl, "rdx", (n: usize, m: usize) -> *mut c_void);
trampoline!(realloc, realloc_impl, "rdx", (p: *mut c_void, size: usize) -> *mut c_void);
trampoline!(reallocarray, reallocarray_impl, "rcx", (p: *mut c_void, n: usize, m: usize) -> *mut c_void);
trampoline!(posix_memalign, posix_memalign_impl, "rcx", (out: *mut *mut c_void, align: usize, size: usize) -> c_int);
trampoline!(aligned_alloc, aligned_alloc_impl, "rdx", (align: usize, size: usize) -> *mut c_void);
trampoline!(memalign, memalign_impl, "rdx", (align: usize, size: usize) -> *mut c_void);
trampoline!(valloc, valloc_impl, "rsi", (size: usize) -> *mut c_void);
trampoline!(pvalloc, pvalloc_impl, "rsi", (size: usize) -> *mut c_void);
