//! The exported functions that interpose the program's allocator calls.
//!
//! Each hook forwards to the real function and, when recording is on and the
//! thread is not already inside a hook, records the event. Recording never
//! changes what the program sees: return values and `errno` are the real
//! function's (errno is saved around the bookkeeping), and a hook that cannot
//! record (re-entered, not initialized, thread ending) just forwards.

use crate::counters::global_alive;
use crate::thread::{self, ThreadState, Tls};
use crate::{dump, live, modules, real, state, unwind::Capture, UNRECORDED};
use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::Ordering;
use heapledger_wire::{AllocFn, StackMode};

#[inline(always)]
pub fn ticks() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// One call in `CALL_SAMPLE` per thread has its duration measured; the
/// per-function times in the profile are scaled back up (an unbiased
/// estimate). Reading the clock costs about 23 ns here, more than the rest
/// of the bookkeeping of an event.
const CALL_SAMPLE: u64 = 64;

/// Whether blocks carry no stack (`--stack none`): every block is then the
/// empty stack's, whose bytes alive are the process's, so the per-stack
/// tracking of maxima is skipped and the profile takes them from the
/// process's own (see `dump::encode`).
#[inline(always)]
fn stackless() -> bool {
    crate::config::get().stack_mode == StackMode::None
}

/// The lean paths of `--sample-every`, where an unsampled call costs a few
/// nanoseconds, time one call in `CALL_SAMPLE_LEAN` of theirs instead.
pub const CALL_SAMPLE_LEAN: u64 = 1024;

/// Clock reads of one event whose duration is measured (one in
/// `CALL_SAMPLE`): `t0` before the real call, and the weight of the
/// duration; both 0 for the other events, which read no clock here.
struct Clock {
    t0: u64,
    scale: u64,
}

impl Clock {
    #[inline(always)]
    fn start(st: &mut ThreadState) -> Clock {
        st.calls = st.calls.wrapping_add(1);
        let sampled = st.calls.is_multiple_of(CALL_SAMPLE);
        let t0 = if sampled { ticks() } else { 0 };
        Clock {
            t0,
            scale: if sampled { CALL_SAMPLE } else { 0 },
        }
    }

    /// Estimated duration to add for this call.
    #[inline(always)]
    fn duration(&self) -> u64 {
        if self.scale != 0 {
            ticks().wrapping_sub(self.t0).wrapping_mul(self.scale)
        } else {
            0
        }
    }
}

/// An entered hook: the thread's state, released on drop.
///
/// The per-event bookkeeping makes no call that can set `errno`; the rare
/// slow paths that do (mapping memory, starting a thread's state, refreshing
/// modules) save and restore it themselves (`ErrnoGuard`), so `errno` is
/// what the real function left.
struct Hook {
    tls: *const Tls,
    st: *mut ThreadState,
    orphan: bool,
    /// Where the call is counted when that is not `st`: the retired state
    /// of a thread in its last clean-up (`st` is then the orphan state).
    calls: *mut ThreadState,
}

impl Hook {
    #[inline(always)]
    fn keep_errno(&mut self) {}

    #[inline(always)]
    fn st(&mut self) -> &mut ThreadState {
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
            unsafe { thread::ORPHAN.raw_unlock() };
        }
        // SAFETY: tls points to this thread's TLS block.
        thread::leave_recorder(unsafe { &*self.tls }, false);
    }
}

#[inline(always)]
fn enter() -> Option<Hook> {
    enter_with(true)
}

#[inline(always)]
fn enter_with(create: bool) -> Option<Hook> {
    let t = thread::tls();
    if !may_enter(t) {
        return None;
    }
    Some(entered(t, create))
}

/// Whether a hook on this thread may record: not inside the recorder
/// already, and the recorder running.
#[inline(always)]
fn may_enter(t: &Tls) -> bool {
    !t.in_hook.get() && state::ready()
}

/// `enter` once `may_enter` said yes. (Separate from it, so that the hot
/// hooks keep the `Hook` in registers instead of an `Option` in memory.)
#[inline(always)]
fn entered(t: &Tls, create: bool) -> Hook {
    let tls = t as *const Tls;
    t.in_hook.set(true);
    let st = if create {
        thread::current(t)
    } else {
        thread::existing(t)
    };
    let h = if thread::is_live(st) {
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
    unsafe { (*h.st).busy.store(true, Ordering::Relaxed) };
    h
}

/// `enter` on a thread with no state of its own (none yet, or retired):
/// the shared orphan state, under its lock.
#[cold]
#[inline(never)]
fn orphan_hook(t: &Tls, st: *mut ThreadState) -> Hook {
    let calls = if thread::is_dead(st) {
        t.retired.get()
    } else {
        core::ptr::null_mut()
    };
    thread::ORPHAN.raw_lock();
    // SAFETY: we hold the orphan lock.
    let o = unsafe { thread::ORPHAN.get_unchecked() };
    Hook {
        tls: t,
        st: &mut **o.get_or_insert_with(thread::new_orphan) as *mut ThreadState,
        orphan: true,
        calls,
    }
}

/// Counts an event that happened where recording was impossible.
#[inline(always)]
fn unrecorded() {
    // Never `state::ready()` here: during start-up the starting thread's own
    // nested calls land here, and ready() would wait for start-up to end.
    // Nor the recorder's own calls of C library functions that allocate.
    if state::get() == state::State::Recording && !thread::tls().own_calls.get() {
        UNRECORDED.fetch_add(1, Ordering::Relaxed);
    }
}

#[inline(always)]
fn stack(st: &mut ThreadState, fp: u64) -> u32 {
    match st.unwind.as_mut() {
        Some(u) => match u.capture(fp) {
            Some(Capture { id, truncated }) => {
                st.truncated += truncated as u64;
                id
            }
            None => 0,
        },
        None => 0,
    }
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
    count_call(st, calls, f, size as u64, dt);
    if p.is_null() {
        return NOT_RECORDED;
    }
    // Count and byte weights: 1 and the size, or a sample's estimate.
    let (cw, bw) = match st.sampler.as_mut() {
        None => (1, size as u64),
        Some(s) => match s.take(thread::tls(), size as u64) {
            None => return NOT_RECORDED,
            Some(cw) => {
                crate::sampler::mark(p as u64);
                (
                    cw,
                    crate::sampler::bytes_weight(size as u64, crate::config::get().sample_every),
                )
            }
        },
    };
    st.sizes.add(size as u64, cw);
    let id = stack(st, fp);
    let lifetime_head = crate::config::get().lifetime_head;
    let sampled = st.sampler.is_some();
    let ps = st.stacks.get(id);
    let head = ps.t.alloc.count < lifetime_head;
    ps.t.alloc.add_weighted(size as u64, cw, bw);
    if size == 0 {
        ps.t.zeros += cw;
    }
    // The entry's weight: a sampled block's count weight, which also
    // weighs its lifetime; otherwise its lifetime's: 1 for a stack's first
    // blocks in this thread, then LIFETIME_ONE_IN for one block in that
    // many, and 0 (not timed) for the others.
    let (weight, timed) = if stackless() {
        ps.alive += bw as i64;
        (if sampled { cw } else { 0 }, false)
    } else {
        ps.add_alive(id, bw as i64);
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
    global_alive(&mut st.pending, bw as i64, t0);
    live::insert(live::Entry {
        addr: p as u64,
        size: size as u64,
        time: t0,
        stack: id,
        weight: weight.min(u32::MAX as u64) as u32,
    });
    id
}

/// Lifetimes: reading the CPU's clock costs about 12 ns here, as much as the
/// rest of a pair's bookkeeping without its stack, and a block's lifetime
/// needs two reads. So the first `LIFETIME_HEAD` blocks of each stack in
/// each thread are timed, every one of them; after that, one block in
/// `LIFETIME_ONE_IN`, picked at random, is timed and stands for that many
/// (a stack that allocates millions of blocks still has tens of
/// thousands timed). A stack's lifetime count stays the exact number of
/// its blocks freed, and its sum is the timed blocks' weighted mean times
/// that count (`counters::PerStack::wire_counters`); its minimum and
/// maximum are those of the timed blocks. `--exact-lifetimes` times every
/// block (`lifetime_head` is then unbounded).
pub const LIFETIME_HEAD: u64 = 64;
/// See `LIFETIME_HEAD`; a power of two (`ThreadState::lifetime_pick`).
pub const LIFETIME_ONE_IN: u64 = 16;

/// `on_alloc`'s answer when the block was not recorded (failed or not sampled).
const NOT_RECORDED: u32 = u32::MAX;

/// Weights of a recorded block (see `on_alloc`).
#[inline(always)]
fn weights(e: &live::Entry) -> (u64, u64) {
    let mean = crate::config::get().sample_every;
    if mean == 0 {
        (1, e.size)
    } else {
        (e.weight as u64, crate::sampler::bytes_weight(e.size, mean))
    }
}

/// Removes a block from the live table, skipping the table for blocks that
/// certainly were not sampled.
#[inline(always)]
fn take_live(p: u64) -> Option<live::Entry> {
    if crate::config::get().sample_every != 0 {
        if !crate::sampler::maybe(p) {
            return None;
        }
        let e = live::remove(p)?;
        crate::sampler::unmark(p);
        return Some(e);
    }
    live::remove(p)
}

/// Charges a released block to the stack that allocated it.
#[inline(always)]
fn on_release(st: &mut ThreadState, e: &live::Entry, mut now: u64) {
    if now == 0 && e.time != 0 {
        now = ticks();
    }
    let (cw, bw) = weights(e);
    let ps = st.stacks.get(e.stack);
    ps.t.free.add_weighted(e.size, cw, bw);
    // A block without a time (`--stack none`, or not timed: see
    // `LIFETIME_HEAD`) has no lifetime, even when this free's own duration
    // is measured and `now` was read for it.
    if now != 0 && e.time != 0 {
        let lt = now.wrapping_sub(e.time).min(i64::MAX as u64);
        let lw = e.weight as u64;
        ps.t.lifetime.add_weighted(lt, lw, lt.saturating_mul(lw));
    }
    if stackless() {
        ps.alive -= bw as i64;
    } else {
        ps.add_alive(e.stack, -(bw as i64));
    }
    global_alive(&mut st.pending, -(bw as i64), now);
}

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
        crate::side::roomy(|t| {
            if !may_enter(t) {
                unrecorded();
                return $call;
            }
            let mut h = entered(t, true);
            let c = Clock::start(h.st());
            let p = $call;
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
unsafe extern "C" fn malloc_impl(size: usize, fp: u64) -> *mut c_void {
    alloc_hook!(fp, AllocFn::Malloc, size, fwd_malloc(size))
}

/// Adds `by` to a counter of this thread's TLS block in one instruction. A
/// signal handler that allocates can run between any two instructions of a
/// lean path, and its own lean path then updates the same counters: single
/// read-modify-write instructions (not locked: no other thread writes them)
/// lose none of either's counts.
#[inline(always)]
fn add_to(c: *mut u64, by: u64) {
    // SAFETY: the counter is this thread's; one instruction reads and
    // writes it.
    unsafe {
        core::arch::asm!(
            "add qword ptr [{c}], {v}",
            c = in(reg) c,
            v = in(reg) by,
            options(nostack)
        )
    };
}

/// Ends a round of `CALL_SAMPLE_LEAN` lean calls (see `Tls::malloc_countdown`).
#[inline(always)]
fn next_round(countdown: &core::cell::Cell<i64>, rounds: &core::cell::Cell<u64>) {
    add_to(countdown.as_ptr() as *mut u64, CALL_SAMPLE_LEAN);
    add_to(rounds.as_ptr(), 1);
}

/// `malloc`'s lean path for a call whose duration is measured (one in
/// `CALL_SAMPLE_LEAN`), entered by a jump from `malloc` below, which has
/// counted the call already.
unsafe extern "C" fn malloc_lean_timed(size: usize) -> *mut c_void {
    let t = thread::tls();
    next_round(&t.malloc_countdown, &t.malloc_rounds);
    let t0 = ticks();
    // SAFETY: the real malloc, resolved when `lean` was set.
    let p = unsafe { core::mem::transmute::<usize, real::MallocFn>(t.real_malloc.get())(size) };
    let dt = ticks().wrapping_sub(t0).wrapping_mul(CALL_SAMPLE_LEAN);
    add_to(t.malloc_ticks.as_ptr(), dt);
    p
}

/// `free`'s lean path for a call whose duration is measured.
unsafe extern "C" fn free_lean_timed(p: *mut c_void) {
    let t = thread::tls();
    next_round(&t.free_countdown, &t.free_rounds);
    let t0 = ticks();
    // SAFETY: the real free, resolved when `lean` was set, on a block of
    // the real allocator (`free` checked it is not a boot block).
    unsafe { core::mem::transmute::<usize, real::FreeFn>(t.real_free.get())(p) };
    let dt = ticks().wrapping_sub(t0).wrapping_mul(CALL_SAMPLE_LEAN);
    add_to(t.free_ticks.as_ptr(), dt);
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
unsafe extern "C" fn free_full(p: *mut c_void) {
    if real::is_boot(p) {
        return;
    }
    crate::side::roomy(|t| free_body(t, p))
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
    let c = Clock::start(h.st());
    let st = h.st();
    let mut size = 0;
    if !p.is_null() {
        match take_live(p as u64) {
            Some(e) => {
                size = e.size;
                on_release(st, &e, c.t0);
            }
            None if st.sampler.is_none() => st.unknown_frees += 1,
            None => {}
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
    crate::side::roomy(|t| realloc_body(t, p, size, fp))
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
    let c = Clock::start(h.st());
    let t0 = c.t0;
    let old = if p.is_null() {
        None
    } else {
        live::remove(p as u64)
    };
    let q = fwd(p, size);
    let dt = c.duration();
    h.keep_errno();
    let calls = h.calls;
    let st = h.st();
    if q.is_null() && size != 0 && !p.is_null() {
        // Failed: the old block is untouched and still alive.
        if let Some(e) = old {
            live::insert(e);
            if st.sampler.is_some() {
                crate::sampler::mark(e.addr);
            }
        }
        count_call(st, calls, AllocFn::Realloc, 0, dt);
        return q;
    }
    let old_size = old.map_or(0, |e| e.size);
    if let Some(e) = old {
        on_release(st, &e, t0);
    } else if !p.is_null() && st.sampler.is_none() {
        st.unknown_frees += 1;
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
    let ps = st.stacks.get(id);
    ps.t.realloc_count += 1;
    ps.t.realloc_delta += size as i64 - old_size as i64;
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
    crate::side::roomy(|t| {
        if !may_enter(t) {
            unrecorded();
            return call();
        }
        let mut h = entered(t, true);
        let c = Clock::start(h.st());
        let r = call();
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

// ---- the exported entry points ----
//
// Each hook that records a stack is entered through a naked trampoline that
// pushes a standard frame record (saved rbp, return address) and passes its
// address to the implementation. The unwinder starts from that record, so
// capturing the caller's stack depends on no compiler setting (frame
// pointers or not, inlining, tail calls) in this library.

/// The body of a trampoline: builds a frame record (rbp pushed, rbp = rsp),
/// passes its address in `$reg` (the argument after the function's own) to
/// `{imp}`, and returns what it returns. Stack capture starts from this
/// record, so every entry point builds it the same way.
macro_rules! frame_and_call {
    ($reg:literal) => {
        concat!(
            "push rbp\n",
            ".cfi_adjust_cfa_offset 8\n",
            ".cfi_rel_offset rbp, 0\n",
            "mov rbp, rsp\n",
            "mov ",
            $reg,
            ", rsp\n",
            "call {imp}\n",
            "pop rbp\n",
            ".cfi_adjust_cfa_offset -8\n",
            ".cfi_restore rbp\n",
            "ret",
        )
    };
}

macro_rules! trampoline {
    ($name:ident, $imp:ident, $reg:literal, ($($arg:ident: $ty:ty),*) $($ret:tt)*) => {
        /// # Safety
        /// Called as the C function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $($ret)* {
            core::arch::naked_asm!(
                ".cfi_startproc",
                frame_and_call!($reg),
                ".cfi_endproc",
                imp = sym $imp,
            )
        }
    };
}

/// The same for six-argument functions: the record's address goes as a
/// seventh argument, on the stack.
macro_rules! trampoline6 {
    ($name:ident, $imp:ident, ($($arg:ident: $ty:ty),*) $($ret:tt)*) => {
        /// # Safety
        /// Called as the C function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $($ret)* {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                ".cfi_rel_offset rbp, 0",
                "mov rbp, rsp",
                "sub rsp, 8",
                ".cfi_adjust_cfa_offset 8",
                "push rbp",
                ".cfi_adjust_cfa_offset 8",
                "call {imp}",
                "add rsp, 16",
                ".cfi_adjust_cfa_offset -16",
                "pop rbp",
                ".cfi_adjust_cfa_offset -8",
                ".cfi_restore rbp",
                "ret",
                ".cfi_endproc",
                imp = sym $imp,
            )
        }
    };
}

/// The start of `malloc`'s and `free`'s lean paths: rax = the offset of
/// this thread's TLS block from the thread pointer, so that `fs:[rax + N]`
/// is its field at N (one load fewer than forming the block's address); on
/// to label 2 (the full hook) unless `lean` is 1, `in_hook` 0 and the
/// argument (rdi) not zero. The flags are read as the single bytes they
/// are stored as: one 16-bit load over both could miss store forwarding from
/// the byte store that ended the previous hook.
macro_rules! lean_gate {
    () => {
        concat!(
            "mov rax, qword ptr [rip + __heapledger_tls_block@GOTTPOFF]\n",
            "cmp byte ptr fs:[rax + {lean}], 1\n",
            "jne 2f\n",
            "cmp byte ptr fs:[rax + {in_hook}], 0\n",
            "jne 2f\n",
            "test rdi, rdi\n",
            "jz 2f",
        )
    };
}

/// `malloc`'s entry: in `--sample-every` mode, the lean path, which
/// counts a call that will not be sampled and jumps to the real malloc with
/// the caller's frame untouched; otherwise, or for any call the full hook
/// must see, the trampoline above.
///
/// The lean path runs when the thread's TLS block says `lean` (a sampling
/// thread with live state) and not `in_hook`, the request is not zero-size,
/// no sample point falls in it, and its duration is not to be measured (one
/// call in `CALL_SAMPLE_LEAN` goes to `malloc_lean_timed`). It reads and
/// writes only the first line of the TLS block. The real malloc then runs
/// after the hook has returned, so `in_hook` is not set during it: an
/// allocator preloaded after heapledger that maps memory through the PLT has
/// those mappings recorded, as a program's would be.
///
/// # Safety
/// Called as C's malloc.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    core::arch::naked_asm!(
        ".cfi_startproc",
        lean_gate!(),
        // Each counter changes in one instruction (see `add_to`).
        "sub qword ptr fs:[rax + {left}], rdi",
        "jle 4f",
        // Counts the call; one in CALL_SAMPLE_LEAN is timed.
        "sub qword ptr fs:[rax + {countdown}], 1",
        "jle 3f",
        "jmp qword ptr fs:[rax + {real}]",
        "3:",
        "jmp {timed}",
        "4:",
        // A sample point falls in this request: give the bytes back, and
        // let the full hook take it.
        "add qword ptr fs:[rax + {left}], rdi",
        "2:",
        frame_and_call!("rsi"),
        ".cfi_endproc",
        lean = const thread::TLS_LEAN,
        in_hook = const thread::TLS_IN_HOOK,
        left = const thread::TLS_LEFT,
        countdown = const thread::TLS_MALLOC_COUNTDOWN,
        real = const thread::TLS_REAL_MALLOC,
        timed = sym malloc_lean_timed,
        imp = sym malloc_impl,
    )
}

/// `free`'s entry: in `--sample-every` mode (and in a process that does not
/// record), the lean path, which counts a free whose block certainly was not
/// sampled and jumps to the real free; otherwise `free_full`.
///
/// The block certainly was not sampled when the counting filter's bucket
/// for its page is zero (`sampler::bucket`, computed the same way here).
/// Null pointers and the recorder's own boot blocks take the full hook,
/// which knows them: the gate sends null there, and the boot buffer's pages
/// are pinned in the filter before any thread can take a lean path
/// (`state::start`), which took 5 of this path's 22 instructions off (a
/// check of its own before). Like `malloc`'s, this path reads and writes
/// only the first line of the TLS block, and one byte of the filter.
///
/// # Safety
/// Called as C's free.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        lean_gate!(),
        // bucket = (p >> 12) & mask (`sampler::bucket`).
        "mov rcx, rdi",
        "shr rcx, 12",
        "and ecx, {mask}",
        "lea rdx, [rip + {filter}]",
        "cmp byte ptr [rdx + rcx], 0",
        "jne 2f",
        "sub qword ptr fs:[rax + {countdown}], 1",
        "jle 3f",
        "jmp qword ptr fs:[rax + {real}]",
        "3:",
        "jmp {timed}",
        "2:",
        "jmp {full}",
        ".cfi_endproc",
        lean = const thread::TLS_LEAN,
        in_hook = const thread::TLS_IN_HOOK,
        mask = const (1u64 << crate::sampler::FILTER_BITS) - 1,
        filter = sym crate::sampler::FILTER,
        countdown = const thread::TLS_FREE_COUNTDOWN,
        real = const thread::TLS_REAL_FREE,
        timed = sym free_lean_timed,
        full = sym free_full,
    )
}

trampoline!(calloc, calloc_impl, "rdx", (n: usize, m: usize) -> *mut c_void);
trampoline!(realloc, realloc_impl, "rdx", (p: *mut c_void, size: usize) -> *mut c_void);
trampoline!(reallocarray, reallocarray_impl, "rcx", (p: *mut c_void, n: usize, m: usize) -> *mut c_void);
trampoline!(posix_memalign, posix_memalign_impl, "rcx", (out: *mut *mut c_void, align: usize, size: usize) -> c_int);
trampoline!(aligned_alloc, aligned_alloc_impl, "rdx", (align: usize, size: usize) -> *mut c_void);
trampoline!(memalign, memalign_impl, "rdx", (align: usize, size: usize) -> *mut c_void);
trampoline!(valloc, valloc_impl, "rsi", (size: usize) -> *mut c_void);
trampoline!(pvalloc, pvalloc_impl, "rsi", (size: usize) -> *mut c_void);
trampoline!(munmap, munmap_impl, "rdx", (a: *mut c_void, len: usize) -> c_int);
trampoline!(mremap, mremap_impl, "r9", (a: *mut c_void, old: usize, new: usize, flags: c_int, new_addr: *mut c_void) -> *mut c_void);
trampoline6!(mmap, mmap_impl, (a: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t) -> *mut c_void);
trampoline6!(mmap64, mmap_impl, (a: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t) -> *mut c_void);

// ---- mappings ----

fn on_map(fp: u64, len: usize, unmap: bool) {
    crate::side::roomy(|_| {
        let Some(mut h) = enter() else { return };
        let st = h.st();
        let id = stack(st, fp);
        let ps = st.stacks.get(id);
        if unmap {
            ps.t.munmap.add(len as u64);
        } else {
            ps.t.mmap.add(len as u64);
        }
    })
}

/// # Safety
/// Called as C's mmap.
unsafe extern "C" fn mmap_impl(
    a: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
    fp: u64,
) -> *mut c_void {
    let r = match real::mmap() {
        // SAFETY: the real mmap with the caller's arguments.
        Some(f) => unsafe { f(a, len, prot, flags, fd, off) },
        // SAFETY: the raw system call, same arguments.
        None => unsafe {
            libc::syscall(libc::SYS_mmap, a, len, prot, flags, fd, off) as *mut c_void
        },
    };
    if r != libc::MAP_FAILED {
        on_map(fp, len, false);
    }
    r
}

/// # Safety
/// Called as C's munmap.
unsafe extern "C" fn munmap_impl(a: *mut c_void, len: usize, fp: u64) -> c_int {
    let r = match real::munmap() {
        // SAFETY: the real munmap.
        Some(f) => unsafe { f(a, len) },
        // SAFETY: the raw system call.
        None => unsafe { libc::syscall(libc::SYS_munmap, a, len) as c_int },
    };
    if r == 0 {
        on_map(fp, len, true);
    }
    r
}

/// # Safety
/// Called as C's mremap (variadic in C; the optional fifth argument is
/// passed in a register either way on x86-64).
unsafe extern "C" fn mremap_impl(
    a: *mut c_void,
    old: usize,
    new: usize,
    flags: c_int,
    new_addr: *mut c_void,
    fp: u64,
) -> *mut c_void {
    let r = match real::mremap() {
        // SAFETY: the real mremap.
        Some(f) => unsafe { f(a, old, new, flags, new_addr) },
        None => libc::MAP_FAILED,
    };
    if r != libc::MAP_FAILED {
        on_map(fp, old, true);
        on_map(fp, new, false);
    }
    r
}

// ---- modules ----

/// # Safety
/// Called as dlopen.
#[no_mangle]
pub unsafe extern "C" fn dlopen(name: *const c_char, flags: c_int) -> *mut c_void {
    let h = match real::dlopen() {
        // SAFETY: the real dlopen.
        Some(f) => unsafe { f(name, flags) },
        None => core::ptr::null_mut(),
    };
    after_module_change();
    h
}

/// # Safety
/// Called as dlclose.
#[no_mangle]
pub unsafe extern "C" fn dlclose(h: *mut c_void) -> c_int {
    let r = match real::dlclose() {
        // SAFETY: the real dlclose.
        Some(f) => unsafe { f(h) },
        None => -1,
    };
    after_module_change();
    r
}

// ---- allocators heapledger cannot see ----

/// The allocator functions a program's own definition can hide from
/// heapledger, in the order of the bits of [`UNHOOKED`].
const HOOKED: [&core::ffi::CStr; 10] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"reallocarray",
    c"posix_memalign",
    c"aligned_alloc",
    c"memalign",
    c"valloc",
    c"pvalloc",
];

/// Bit i set: the program's calls of `HOOKED[i]` resolve to another
/// definition than heapledger's, one the executable itself exports (an
/// allocator linked into it, as rustc's jemalloc is): the dynamic linker
/// looks in the executable before any preloaded library, so those calls
/// never reach heapledger.
static UNHOOKED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
/// The path of the object that defines them, as the loader names it (a
/// string it keeps while the object is loaded; empty for the executable).
static UNHOOKED_BY: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Finds the allocator functions the program resolves elsewhere (at
/// start-up: `dlsym` takes the loader's lock, which a dump from a signal
/// handler must not).
pub fn find_unhooked() {
    // The object a definition lies in and the symbol entry found for it.
    let object = |p: *const c_void| {
        // SAFETY: Dl_info is plain data; dladdr1 only fills it and `sym`.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        let mut sym: *mut c_void = core::ptr::null_mut();
        // SAFETY: any address may be asked about; RTLD_DL_SYMENT (1) asks
        // for a pointer to the matching ElfW(Sym).
        let found = unsafe { libc::dladdr1(p, &mut info, &mut sym, 1) } != 0;
        found.then_some((info, sym as *const libc::Elf64_Sym))
    };
    // heapledger's code reaches its own exported functions through the same
    // lookup, so their addresses cannot tell: the object does.
    let Some((mine, _)) = object(find_unhooked as *const c_void) else {
        return;
    };
    let mut mask = 0u32;
    for (i, name) in HOOKED.iter().enumerate() {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        if p.is_null() {
            continue;
        }
        let Some((info, sym)) = object(p) else {
            continue;
        };
        // A definition, not a non-PIE executable's PLT entry for the
        // function: an executable that takes its address gets one (an
        // undefined symbol with a value), which every lookup then gives
        // (node's malloc), while its calls still reach heapledger's.
        // SAFETY: dladdr1 points `sym` at the object's symbol table entry.
        let defined = !sym.is_null() && unsafe { (*sym).st_shndx } != 0;
        if info.dli_fbase == mine.dli_fbase || !defined {
            continue;
        }
        mask |= 1 << i;
        if !info.dli_fname.is_null() {
            UNHOOKED_BY.store(info.dli_fname as usize, Ordering::Relaxed);
        }
    }
    UNHOOKED.store(mask, Ordering::Relaxed);
}

/// The names of the functions found by [`find_unhooked`] and the object
/// that defines them; None when there are none.
pub fn unhooked() -> Option<(impl Iterator<Item = &'static [u8]>, &'static [u8])> {
    let mask = UNHOOKED.load(Ordering::Relaxed);
    if mask == 0 {
        return None;
    }
    let names = HOOKED
        .iter()
        .enumerate()
        .filter(move |(i, _)| mask & (1 << i) != 0)
        .map(|(_, n)| n.to_bytes());
    let by = UNHOOKED_BY.load(Ordering::Relaxed);
    let by: &[u8] = if by == 0 {
        b""
    } else {
        // SAFETY: a NUL-terminated string of the loader's, kept while the
        // object that holds the definition is loaded.
        unsafe { core::ffi::CStr::from_ptr(by as *const c_char) }.to_bytes()
    };
    Some((names, by))
}

// ---- threads ----

/// Forwards, noting on this thread which thread the call is about, so that
/// a thread whose first event comes from inside it takes its stack bounds
/// elsewhere (see `thread::stack_bounds`).
///
/// # Safety
/// Called as pthread_getattr_np.
#[no_mangle]
pub unsafe extern "C" fn pthread_getattr_np(
    th: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> c_int {
    let t = thread::tls();
    let outer = t.getattr_of.replace(th);
    let r = match real::pthread_getattr_np() {
        // SAFETY: the real function, with the caller's arguments.
        Some(f) => unsafe { f(th, attr) },
        None => libc::ENOSYS,
    };
    t.getattr_of.set(outer);
    r
}

fn after_module_change() {
    if config_dwarf() {
        crate::side::roomy(|_| {
            if let Some(_h) = enter() {
                // SAFETY: errno preserved by the guard.
                modules::refresh(false);
            }
        })
    }
}

fn config_dwarf() -> bool {
    state::ready() && crate::config::get().stack_mode == StackMode::Dwarf
}

// ---- exits ----

/// Writes the profile, then leaves through the real function (or the
/// system call, if it could not be found).
fn exit_after_dump(real: Option<real::ExitFn>, code: c_int) -> ! {
    dump::write("_exit");
    match real {
        // SAFETY: the real _exit or _Exit.
        Some(f) => unsafe { f(code) },
        // SAFETY: the raw system call never returns.
        None => unsafe {
            libc::syscall(libc::SYS_exit_group, code);
            core::hint::unreachable_unchecked()
        },
    }
}

/// # Safety
/// Called as _exit: writes the profile first, as exit() would have.
#[no_mangle]
pub unsafe extern "C" fn _exit(code: c_int) -> ! {
    exit_after_dump(real::exit_(), code)
}

/// # Safety
/// Called as _Exit.
#[no_mangle]
pub unsafe extern "C" fn _Exit(code: c_int) -> ! {
    exit_after_dump(real::exit2(), code)
}

// ---- signals: our fatal-signal handlers stay invisible to the program ----

/// heapledger's alternate signal stack reads as none (see `altstack.rs`).
///
/// # Safety
/// Called as sigaltstack.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    // SAFETY: the caller's arguments, as sigaltstack takes them.
    unsafe { crate::altstack::program_call(crate::thread::tls(), ss, old) }
}

/// # Safety
/// Called as sigaction.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(f) = real::sigaction() else {
        // SAFETY: errno location is valid.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    // SAFETY: act, when not null, is the caller's valid struct.
    let wants_default = !act.is_null()
        && unsafe { (*act).sa_sigaction } == libc::SIG_DFL
        && crate::signals::is_fatal(sig);
    if crate::signals::ours(sig) {
        if !act.is_null() && !wants_default {
            // SAFETY: the real sigaction with the caller's new action.
            let r = unsafe { f(sig, act, core::ptr::null_mut()) };
            if r != 0 {
                return r;
            }
            crate::signals::forget(sig);
        }
        if !old.is_null() {
            // The program never set a handler: it sees the default one.
            // SAFETY: old is the caller's writable struct.
            unsafe {
                core::ptr::write_bytes(old, 0, 1);
                (*old).sa_sigaction = libc::SIG_DFL;
            }
        }
        return 0;
    }
    if wants_default {
        // Back to the default action: heapledger's handler does it, after saving.
        if !old.is_null() {
            // SAFETY: querying into the caller's struct.
            let r = unsafe { f(sig, core::ptr::null(), old) };
            if r != 0 {
                return r;
            }
        }
        if crate::signals::install_one(sig) {
            return 0;
        }
    }
    // SAFETY: the real sigaction with the caller's arguments.
    unsafe { f(sig, act, old) }
}

/// # Safety
/// Called as signal.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let Some(f) = real::signal() else {
        return libc::SIG_ERR;
    };
    let wants_default = handler == libc::SIG_DFL && crate::signals::is_fatal(sig);
    if crate::signals::ours(sig) {
        if wants_default {
            return libc::SIG_DFL;
        }
        // SAFETY: the real signal.
        let prev = unsafe { f(sig, handler) };
        if prev == libc::SIG_ERR {
            return prev;
        }
        crate::signals::forget(sig);
        return libc::SIG_DFL;
    }
    // SAFETY: the real signal.
    let prev = unsafe { f(sig, handler) };
    if prev != libc::SIG_ERR && wants_default {
        crate::signals::install_one(sig);
    }
    prev
}
