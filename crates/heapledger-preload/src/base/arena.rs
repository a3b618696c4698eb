//! The recorder's own memory: mapped directly from the kernel, never from the
//! profiled program's heap, and counted as internal memory.
//!
//! It serves as the library's `#[global_allocator]` (framehop's module list,
//! the dump buffer) and backs the recorder's tables. Size classes are powers
//! of two with free lists; anything over 32 KiB is its own mapping. The lock
//! is only taken off the per-event path (table growth, thread start, dlopen).
//!
//! Where the kernel refuses a mapping (the program's `RLIMIT_AS`, or no
//! address space left), the allocator does not try again: it stops the
//! recording (`degrade`) and serves the request from a small reserve mapped
//! at start-up, kept for the profile written at exit, so that no
//! collection of the recorder's ends in Rust's allocation error handler
//! (an abort). The growth of the large tables asks with `try_reserve` and
//! copes with a refusal.

use crate::base::degrade;
use crate::base::sync;
use crate::base::sync::SpinLock;
use core::alloc::{GlobalAlloc, Layout};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes mapped by the recorder for itself, now and at most.
pub static INTERNAL_BYTES: AtomicU64 = AtomicU64::new(0);
pub static INTERNAL_PEAK: AtomicU64 = AtomicU64::new(0);

/// Counts `len` more bytes mapped.
fn mapped(len: u64) {
    let now = INTERNAL_BYTES.fetch_add(len, Ordering::Relaxed) + len;
    INTERNAL_PEAK.fetch_max(now, Ordering::Relaxed);
}

const CLASSES: usize = 12; // 16 B .. 32 KiB
const CHUNK: usize = 256 * 1024;

/// The reserve's size: what the profile written at exit needs when no
/// memory can be had (its 64 KiB buffer, /proc/self/maps, the merged
/// counters of a few thousand stacks), and what the hooks running at that
/// moment ask for. It counts against the program's `RLIMIT_AS`
/// (docs/recorder.md).
pub const RESERVE: usize = 1 << 20;
/// A chunk of the size classes taken from the reserve.
const RESERVE_CHUNK: usize = 64 * 1024;

/// The reserve: its next free byte and its end (0 until it is mapped).
static RESERVE_NEXT: AtomicUsize = AtomicUsize::new(0);
static RESERVE_END: AtomicUsize = AtomicUsize::new(0);

/// Maps the reserve, once (when recording starts).
pub fn keep_reserve() {
    if RESERVE_END.load(Ordering::Relaxed) != 0 {
        return;
    }
    let p = map(RESERVE);
    if !p.is_null() {
        RESERVE_NEXT.store(p as usize, Ordering::Relaxed);
        RESERVE_END.store(p as usize + RESERVE, Ordering::Release);
    }
}

/// `len` bytes (a page multiple) of the reserve, or null when it has not
/// so much left.
fn from_reserve(len: usize) -> *mut u8 {
    let end = RESERVE_END.load(Ordering::Acquire);
    let mut next = RESERVE_NEXT.load(Ordering::Relaxed);
    loop {
        if next == 0 || next + len > end {
            return null_mut();
        }
        match RESERVE_NEXT.compare_exchange_weak(
            next,
            next + len,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return next as *mut u8,
            Err(now) => next = now,
        }
    }
}

/// A mapping of `len` bytes (a page multiple) for the global allocator: a
/// new one, or where the kernel refuses, a part of the reserve, recording
/// stopped. Parts of the reserve are given back like mappings (`unmap` of
/// part of a mapping is allowed), and counted as such.
fn map_or_reserve(len: usize) -> *mut u8 {
    let p = map(len);
    if !p.is_null() {
        return p;
    }
    degrade::stop(degrade::Cause::RecorderMemory);
    from_reserve(len)
}

pub struct Classes {
    free: [*mut FreeBlock; CLASSES],
    bump: *mut u8,
    bump_end: *mut u8,
}

struct FreeBlock {
    next: *mut FreeBlock,
}

// SAFETY: the raw pointers are owned by the lock that wraps `Classes`.
unsafe impl Send for Classes {}

pub static ARENA_LOCK: SpinLock<Classes> = SpinLock::new(Classes {
    free: [null_mut(); CLASSES],
    bump: null_mut(),
    bump_end: null_mut(),
});

/// Maps anonymous memory with the raw system call, so that the recorder's
/// own `mmap` hook does not count it.
pub fn map(len: usize) -> *mut u8 {
    map_with(len, 0)
}

/// Like [`map`], for a table of `len` bytes (a multiple of 2 MiB) read at
/// random, where most accesses would otherwise miss the TLB as well as the
/// cache (the stack table's index at hundreds of thousands of stacks):
/// aligned to 2 MiB and advised to be backed by transparent huge pages
/// (where the kernel has them on `madvise`; otherwise plain pages). Such a
/// table is touched all over anyway, so the huge pages cost no memory it
/// would not use. Never given back.
pub fn map_huge(len: usize) -> *mut u8 {
    if len < HUGE || !len.is_multiple_of(HUGE) {
        return map(len);
    }
    let p = map_huge_raw(len);
    if !p.is_null() {
        mapped(len as u64);
    }
    p
}

/// [`map_huge`] for a multiple of 2 MiB, counted nowhere.
fn map_huge_raw(len: usize) -> *mut u8 {
    let raw = map_raw(len + HUGE, 0);
    if raw.is_null() {
        return raw;
    }
    let start = (raw as usize).next_multiple_of(HUGE);
    let head = start - raw as usize;
    let _e = sync::ErrnoGuard::new();
    // SAFETY: the parts of our fresh mapping before and after the aligned
    // `len` bytes are given back; advice on the rest.
    unsafe {
        if head > 0 {
            unmap_raw(raw, head);
        }
        if HUGE - head > 0 {
            unmap_raw((start + len) as *mut u8, HUGE - head);
        }
        libc::syscall(libc::SYS_madvise, start, len, libc::MADV_HUGEPAGE);
    }
    start as *mut u8
}

/// Small tables read at random on every event (the live-block table's
/// shards: 4 KiB each at first, a table and its records): 4 KiB chunks
/// carved from one reservation of `POOL_BYTES` backed by transparent huge
/// pages (see [`map_huge`]), so that a heap spread over hundreds of shards
/// costs the TLB a few entries instead of one per table (the `varied`
/// churn, 4096 blocks over about 150 shards, `--stack none`). Taken with
/// one atomic add, no lock (a fork needs none released); a chunk is never
/// handed out twice: a table that outgrows its chunk leaves it, which
/// wastes at most a few chunks per shard (its tables only grow), and the
/// pool's end sends the rest to plain mappings. Counted as the recorder's
/// memory by 2 MiB, as the chunks reach each.
pub const POOL_CHUNK: usize = 4096;
const POOL_BYTES: usize = 8 << 20;
const HUGE: usize = 2 << 20;
static POOL_BASE: AtomicUsize = AtomicUsize::new(0);
static POOL_TAKEN: AtomicUsize = AtomicUsize::new(0);

/// A zero-filled chunk of the pool, or null when none is left.
pub fn pool_take() -> *mut u8 {
    let mut base = POOL_BASE.load(Ordering::Acquire);
    if base == 0 {
        let p = map_huge_raw(POOL_BYTES);
        if p.is_null() {
            return p;
        }
        match POOL_BASE.compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => base = p as usize,
            Err(other) => {
                // Another thread reserved it first.
                // SAFETY: our own fresh reservation, never handed out.
                unsafe { unmap_raw(p, POOL_BYTES) };
                base = other;
            }
        }
    }
    let i = POOL_TAKEN.fetch_add(1, Ordering::Relaxed);
    if i >= POOL_BYTES / POOL_CHUNK {
        return null_mut();
    }
    if (i * POOL_CHUNK).is_multiple_of(HUGE) {
        mapped(HUGE as u64);
    }
    (base + i * POOL_CHUNK) as *mut u8
}

/// Whether `p` is a chunk of the pool.
pub fn pooled(p: *const u8) -> bool {
    let base = POOL_BASE.load(Ordering::Acquire);
    base != 0 && (p as usize) >= base && (p as usize) < base + POOL_BYTES
}

/// Grows a table of [`map_populated`] or of the pool from `old_len` to
/// `new_len` bytes, as [`grow_populated`] does; a chunk of the pool is
/// copied into a new mapping and left. Null when the kernel refuses, with
/// the old table as it was.
///
/// # Safety
/// As for [`grow_populated`].
pub unsafe fn grow_table(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
    if !pooled(p) {
        // SAFETY: forwarded to the caller.
        return unsafe { grow_populated(p, old_len, new_len) };
    }
    let q = map_populated(new_len);
    if !q.is_null() {
        // SAFETY: both ours, `old_len` bytes of the chunk readable.
        unsafe { core::ptr::copy_nonoverlapping(p, q, old_len) };
    }
    q
}

/// Gives back a table of [`map_populated`]; a chunk of the pool is left.
///
/// # Safety
/// `p` and `len` describe one such table that nothing points into any more.
pub unsafe fn free_table(p: *mut u8, len: usize) {
    if !pooled(p) {
        // SAFETY: forwarded to the caller.
        unsafe { unmap(p, len) };
    }
}

/// Like [`map`], with every page faulted in by the kernel at once: for a
/// table that is about to be written all over (a live-block table being
/// rehashed), one system call instead of a trap per page.
pub fn map_populated(len: usize) -> *mut u8 {
    map_with(len, libc::MAP_POPULATE)
}

/// Like [`map`], for a stack of the recorder's (a thread's alternate
/// signal stack, a side stack): address space of which a page or two is
/// touched, like the thread's own stack, so it is not counted as the
/// recorder's memory (docs/recorder.md gives its size). Given back with
/// [`unmap_stack`].
pub fn map_stack(len: usize) -> *mut u8 {
    map_raw(len, libc::MAP_STACK | libc::MAP_NORESERVE)
}

/// # Safety
/// `p` and `len` must come from one call to [`map_stack`].
pub unsafe fn unmap_stack(p: *mut u8, len: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { unmap_raw(p, len) };
}

fn map_with(len: usize, extra: i32) -> *mut u8 {
    let p = map_raw(len, extra);
    if !p.is_null() {
        mapped(len as u64);
    }
    p
}

/// An anonymous private mapping, with the raw system call, counted nowhere.
fn map_raw(len: usize, extra: i32) -> *mut u8 {
    let _e = sync::ErrnoGuard::new();
    // SAFETY: an anonymous private mapping has no preconditions.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0usize,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
            -1i32,
            0usize,
        )
    };
    if p < 0 && p > -4096 {
        return null_mut();
    }
    p as *mut u8
}

/// Grows a mapping of [`map`] or [`map_populated`] from `old_len` to
/// `new_len` bytes, moving it if it must (the kernel moves the pages, it
/// does not copy them), and faults in the added part: a live-block table
/// doubling in place touches only its new half. Null when the kernel
/// refuses, with the old mapping as it was.
///
/// # Safety
/// `p` is a mapping of `old_len` bytes of this module that nothing else
/// points into.
pub unsafe fn grow_populated(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
    // SAFETY: forwarded to the caller.
    let q = unsafe { remap(p, old_len, new_len) };
    if q.is_null() {
        return q;
    }
    let _e = sync::ErrnoGuard::new();
    // Before Linux 5.14 the advice is refused and the pages fault in as
    // they are written: slower, the same result.
    // SAFETY: advice on the part of the mapping that was just added.
    unsafe {
        libc::syscall(
            libc::SYS_madvise,
            q.add(old_len),
            new_len - old_len,
            libc::MADV_POPULATE_WRITE,
        )
    };
    q
}

/// Gives back the pages of a mapping of [`map`] or [`map_huge`] that
/// readers without a lock may still be reading: it stays mapped, and reads
/// zeros from then on (the kernel's shared zero page: no memory). For a
/// table whose zero means "empty", a late reader then finds nothing, as
/// it would in a table that lost the race.
///
/// # Safety
/// `p` and `len` must come from one call to [`map`] or [`map_huge`], and
/// nothing may write there after.
pub unsafe fn discard(p: *mut u8, len: usize) {
    let _e = sync::ErrnoGuard::new();
    // SAFETY: advice on the caller's mapping.
    let r = unsafe { libc::syscall(libc::SYS_madvise, p, len, libc::MADV_DONTNEED) };
    if r == 0 {
        INTERNAL_BYTES.fetch_sub(len as u64, Ordering::Relaxed);
    }
}

/// # Safety
/// `p` and `len` must come from one call to [`map`].
pub unsafe fn unmap(p: *mut u8, len: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { unmap_raw(p, len) };
    INTERNAL_BYTES.fetch_sub(len as u64, Ordering::Relaxed);
}

/// # Safety
/// `p` and `len` describe one mapping of this module.
unsafe fn unmap_raw(p: *mut u8, len: usize) {
    let _e = sync::ErrnoGuard::new();
    // SAFETY: forwarded to the caller.
    unsafe { libc::syscall(libc::SYS_munmap, p, len) };
}

fn class_of(size: usize, align: usize) -> Option<usize> {
    let need = size.max(align).max(16).next_power_of_two();
    let c = need.trailing_zeros() as usize - 4;
    (c < CLASSES && align <= 4096).then_some(c)
}

fn page_round(n: usize) -> usize {
    (n + 4095) & !4095
}

pub struct Arena;

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class_of(layout.size(), layout.align()) else {
            if layout.align() > 4096 {
                return null_mut();
            }
            return map_or_reserve(page_round(layout.size()));
        };
        let size = 16usize << c;
        let Some(mut g) = ARENA_LOCK.lock_unless_held_here() else {
            // A signal handler's call (writing the profile from `_exit`)
            // while a frame of this thread holds the lock below it: pages
            // of its own, which a later `dealloc` may put on a free list.
            return map_or_reserve(page_round(size));
        };
        let head = g.free[c];
        if !head.is_null() {
            // SAFETY: blocks on a free list are ours and at least 16 bytes.
            g.free[c] = unsafe { (*head).next };
            return head as *mut u8;
        }
        // Align the bump pointer to the class size (up to a page).
        let align = size.min(4096);
        let mut p = ((g.bump as usize + align - 1) & !(align - 1)) as *mut u8;
        if g.bump.is_null() || p as usize + size > g.bump_end as usize {
            let (mut chunk, mut len) = (map(CHUNK), CHUNK);
            if chunk.is_null() {
                degrade::stop(degrade::Cause::RecorderMemory);
                (chunk, len) = (from_reserve(RESERVE_CHUNK), RESERVE_CHUNK);
                if chunk.is_null() {
                    return null_mut();
                }
            }
            g.bump = chunk;
            // SAFETY: within the fresh mapping.
            g.bump_end = unsafe { chunk.add(len) };
            p = chunk;
        }
        // SAFETY: p + size <= bump_end, checked above.
        g.bump = unsafe { p.add(size) };
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match class_of(layout.size(), layout.align()) {
            Some(c) => {
                // Kept (not reused) when freed under a frame of this
                // thread that holds the lock (see `alloc`).
                let Some(mut g) = ARENA_LOCK.lock_unless_held_here() else {
                    return;
                };
                let b = ptr as *mut FreeBlock;
                // SAFETY: the block is ours, at least 16 bytes, and no longer used.
                unsafe { (*b).next = g.free[c] };
                g.free[c] = b;
            }
            // SAFETY: large blocks are whole mappings of this rounded size.
            None => unsafe { unmap(ptr, page_round(layout.size())) },
        }
    }

    /// A block over the largest class that stays over it is a mapping of
    /// its own, which the kernel moves (page table entries, not bytes):
    /// a vector that doubles is not copied, and the pages it had are not
    /// faulted in again at a new place. Python's start-up, whose 15 000
    /// stacks grow a thread's counters to 3.5 MB, took 900 fewer page
    /// faults (of 7 900).
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        let large = |size| class_of(size, align).is_none() && align <= 4096;
        if large(layout.size()) && large(new_size) {
            let (old, new) = (page_round(layout.size()), page_round(new_size));
            if old == new {
                return ptr;
            }
            // SAFETY: `ptr` is a mapping of `old` bytes of ours (see `alloc`).
            let q = unsafe { remap(ptr, old, new) };
            if !q.is_null() || new < old {
                return q;
            }
            // Refused: a copy, from the reserve if need be.
        }
        // SAFETY: the caller's contract; both layouts have `align`.
        unsafe {
            let q = self.alloc(Layout::from_size_align_unchecked(new_size, align));
            if !q.is_null() {
                core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            q
        }
    }
}

/// Moves or resizes a mapping of [`map`] or [`map_populated`] from
/// `old_len` to `new_len` bytes (page multiples), the kernel moving its
/// pages; null when the kernel refuses, the old one intact.
///
/// # Safety
/// `p` is a mapping of `old_len` bytes of this module.
unsafe fn remap(p: *mut u8, old_len: usize, new_len: usize) -> *mut u8 {
    let _e = sync::ErrnoGuard::new();
    // SAFETY: forwarded to the caller; MREMAP_MAYMOVE leaves the old
    // mapping intact when it fails.
    let q = unsafe { libc::syscall(libc::SYS_mremap, p, old_len, new_len, libc::MREMAP_MAYMOVE) };
    if q < 0 && q > -4096 {
        return null_mut();
    }
    if new_len > old_len {
        mapped((new_len - old_len) as u64);
    } else {
        INTERNAL_BYTES.fetch_sub((old_len - new_len) as u64, Ordering::Relaxed);
    }
    q as *mut u8
}
