//! Every distinct stack, stored once (seed 000: hashing, growth that never
//! moves what readers hold).
//!
//! Entries live in fixed-size chunks reached through a directory, so an
//! entry's address never changes once published and readers need no lock.
//! The hash index is open addressing over atomics; readers probe it without a
//! lock, inserts (new stacks only, rare) take `INSERT`. When the index grows,
//! a new one is published and the old one is left in place (readers may still
//! be probing it; a reader that misses there retries under the lock).
//! Stack 0 is the empty stack.

use crate::base::arena;
use crate::base::sync::SpinLock;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

pub type StackId = u32;

pub struct StackEntry {
    pub hash: u64,
    /// Frames, leaf first: the first `len` here (the stack's own), then
    /// `tail_len` more at `tail`, the outer frames it shares with a stack
    /// stored before it (part of that stack's own; see [`Frames`]).
    pub frames: *const u64,
    pub len: u32,
    pub tail_len: u32,
    pub tail: *const u64,
    /// Flushed part of the bytes alive (threads keep the rest; see `counters`).
    pub alive: AtomicI64,
    pub max_alive: AtomicU64,
}

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const MAX_CHUNKS: usize = 1 << 12; // 16 M stacks

static DIR: [AtomicPtr<StackEntry>; MAX_CHUNKS] =
    [const { AtomicPtr::new(null_mut()) }; MAX_CHUNKS];
static COUNT: AtomicU32 = AtomicU32::new(0);

struct Index {
    slots: *const AtomicU64,
    mask: usize,
}

static INDEX: AtomicPtr<Index> = AtomicPtr::new(null_mut());

pub struct InsertState {
    frames_bump: *mut u64,
    frames_end: *mut u64,
}
// SAFETY: owned by the lock.
unsafe impl Send for InsertState {}

pub static INSERT: SpinLock<InsertState> = SpinLock::new(InsertState {
    frames_bump: null_mut(),
    frames_end: null_mut(),
});

/// The table as `heapledger run` reads it from outside the process (see
/// `heapledger_wire::StackRegistry`, whose layout this is).
#[repr(C)]
pub struct Registry {
    magic: u64,
    dir: *const AtomicPtr<StackEntry>,
    count: *const AtomicU32,
    chunk_bits: u32,
    max_chunks: u32,
    entry_size: u32,
    frames_offset: u32,
    len_offset: u32,
    reserved: u32,
}

// SAFETY: read-only after load; the pointers are only read from outside.
unsafe impl Sync for Registry {}

const _: () = assert!(core::mem::size_of::<Registry>() == heapledger_wire::StackRegistry::SIZE);
const _: () = assert!(core::mem::size_of::<AtomicPtr<StackEntry>>() == 8);

#[no_mangle]
#[used]
pub static heapledger_stack_registry: Registry = Registry {
    magic: heapledger_wire::REGISTRY_MAGIC,
    dir: core::ptr::addr_of!(DIR) as *const AtomicPtr<StackEntry>,
    count: core::ptr::addr_of!(COUNT),
    chunk_bits: CHUNK_BITS,
    max_chunks: MAX_CHUNKS as u32,
    entry_size: core::mem::size_of::<StackEntry>() as u32,
    frames_offset: core::mem::offset_of!(StackEntry, frames) as u32,
    len_offset: core::mem::offset_of!(StackEntry, len) as u32,
    reserved: 0,
};

pub fn count() -> u32 {
    COUNT.load(Ordering::Acquire)
}

/// The entry of a published id.
#[inline(always)]
pub fn entry(id: StackId) -> &'static StackEntry {
    let chunk = DIR[(id >> CHUNK_BITS) as usize].load(Ordering::Acquire);
    // SAFETY: ids are only handed out after their chunk and entry were
    // published (Release), and chunks are never freed.
    unsafe { &*chunk.add((id as usize) & (CHUNK - 1)) }
}

/// A stored stack's frames, leaf first: its own, then the outer ones it
/// shares with a stack stored before it. A new stack's outer frames are
/// mostly those of the stack captured before it: Python compiling its
/// library stored 18.6 million frames for 405 000 stacks, 46 deep, each
/// copied whole, most of them again and again.
#[derive(Clone, Copy)]
pub struct Frames {
    pub own: &'static [u64],
    pub tail: &'static [u64],
}

impl Frames {
    pub fn len(&self) -> usize {
        self.own.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.own.iter().chain(self.tail.iter()).copied()
    }

    /// Whether these are `f`, frame by frame.
    #[inline]
    pub fn is(&self, f: &[u64]) -> bool {
        f.len() == self.len()
            && self.own == &f[..self.own.len()]
            && self.tail == &f[self.own.len()..]
    }

    /// The last `k` frames (the outermost), where they lie in one stored
    /// run; None otherwise. (Sharing only part of them, the stack's tail
    /// where `k` is longer, made later stacks share ever shorter tails and
    /// copy the rest: Python compiling its library took 290 MB again.)
    fn outer(&self, k: usize) -> Option<&'static [u64]> {
        if k <= self.tail.len() {
            Some(&self.tail[self.tail.len() - k..])
        } else if self.tail.is_empty() && k <= self.own.len() {
            Some(&self.own[self.own.len() - k..])
        } else {
            None
        }
    }

    /// Into `out` (cleared), as one slice.
    pub fn copy_to(&self, out: &mut alloc::vec::Vec<u64>) {
        out.clear();
        out.extend_from_slice(self.own);
        out.extend_from_slice(self.tail);
    }
}

pub fn frames(e: &StackEntry) -> Frames {
    let part = |p: *const u64, n: u32| -> &'static [u64] {
        if n == 0 {
            return &[];
        }
        // SAFETY: frames were written before publication and are never
        // freed; a tail lies in an older stack's frames.
        unsafe { core::slice::from_raw_parts(p, n as usize) }
    };
    Frames {
        own: part(e.frames, e.len),
        tail: part(e.tail, e.tail_len),
    }
}

#[inline(always)]
pub fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
}

pub const HASH_SEED: u64 = 0x243F_6A88_85A3_08D3;

/// Looks a stack up by hash, comparing frames with `eq`.
#[inline]
pub fn find(hash: u64, eq: &impl Fn(Frames) -> bool) -> Option<StackId> {
    let idx = INDEX.load(Ordering::Acquire);
    if idx.is_null() {
        return None;
    }
    // SAFETY: published indexes are never freed.
    let idx = unsafe { &*idx };
    let tag = (hash >> 32) << 32;
    let mut i = (hash as usize) & idx.mask;
    loop {
        // SAFETY: i <= mask.
        let s = unsafe { &*idx.slots.add(i) }.load(Ordering::Acquire);
        if s == 0 {
            return None;
        }
        if s & !0xffff_ffff == tag {
            let id = (s as u32).wrapping_sub(1);
            let e = entry(id);
            if e.hash == hash && eq(frames(e)) {
                return Some(id);
            }
        }
        i = (i + 1) & idx.mask;
    }
}

/// Starts fetching the index slot where `find(hash)` looks first, so that
/// work done before the lookup hides the cache miss.
#[inline(always)]
pub fn prefetch(hash: u64) {
    let idx = INDEX.load(Ordering::Acquire);
    if idx.is_null() {
        return;
    }
    // SAFETY: published indexes are never freed; the slot is inside it
    // (and a prefetch does not fault anyway).
    unsafe {
        let idx = &*idx;
        let p = idx.slots.add((hash as usize) & idx.mask);
        #[cfg(target_arch = "x86_64")]
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
}

fn new_index(cap: usize) -> *mut Index {
    let slots = arena::map_huge(cap * 8) as *const AtomicU64;
    let idx = arena::map(core::mem::size_of::<Index>()) as *mut Index;
    if slots.is_null() || idx.is_null() {
        return null_mut();
    }
    // SAFETY: idx is a fresh mapping big enough for an Index.
    unsafe {
        idx.write(Index {
            slots,
            mask: cap - 1,
        })
    };
    idx
}

fn index_put(idx: &Index, hash: u64, id: StackId) {
    let mut i = (hash as usize) & idx.mask;
    loop {
        // SAFETY: i <= mask.
        let s = unsafe { &*idx.slots.add(i) };
        if s.load(Ordering::Relaxed) == 0 {
            s.store(((hash >> 32) << 32) | (id as u64 + 1), Ordering::Release);
            return;
        }
        i = (i + 1) & idx.mask;
    }
}

/// Finds or inserts a stack given leaf-first by `fill` (called only when a
/// copy is needed). Returns None if memory ran out.
pub fn intern(
    hash: u64,
    len: usize,
    eq: &impl Fn(Frames) -> bool,
    fill: impl FnOnce(&mut [u64]),
) -> Option<StackId> {
    intern_sharing(hash, len, None, eq, fill)
}

/// [`intern`] for a stack whose last `outer.1` frames (`outer.2`) are the
/// last ones of stack `outer.0` (checked here): where they lie in one
/// stored run of that stack's, they are not copied; `fill` then gets only
/// the frames before them.
pub fn intern_sharing(
    hash: u64,
    len: usize,
    outer: Option<(StackId, usize, &[u64])>,
    eq: &impl Fn(Frames) -> bool,
    fill: impl FnOnce(&mut [u64]),
) -> Option<StackId> {
    if let Some(id) = find(hash, eq) {
        return Some(id);
    }
    let mut g = INSERT.lock();
    if let Some(id) = find(hash, eq) {
        return Some(id);
    }
    let id = COUNT.load(Ordering::Relaxed);
    let chunk_no = (id >> CHUNK_BITS) as usize;
    if chunk_no >= MAX_CHUNKS {
        return None;
    }
    // The outer frames shared, where the stack named holds them in one
    // run (its frames compared, not trusted).
    let tail: &'static [u64] = match outer {
        Some((from, k, want)) if k > 0 && k <= len && from < id && want.len() == k => {
            match frames(entry(from)).outer(k) {
                Some(t) if t == want => t,
                _ => &[],
            }
        }
        _ => &[],
    };
    let own = len - tail.len();
    // Frames storage.
    let frames: *mut u64 = if own == 0 {
        null_mut()
    } else {
        if g.frames_bump.is_null() || (g.frames_end as usize - g.frames_bump as usize) / 8 < own {
            // The first 1 MiB faults in page by page, as a small program
            // uses it; a program that fills it gets the next ones faulted
            // in at once (written through in order: one system call
            // instead of 256 faults; 500 000 stacks 21 frames deep take
            // 84 MB).
            let first = g.frames_bump.is_null();
            let bytes = (own * 8).max(1 << 20);
            let p = if first {
                arena::map(bytes)
            } else {
                arena::map_populated(bytes)
            } as *mut u64;
            if p.is_null() {
                return None;
            }
            g.frames_bump = p;
            // SAFETY: inside the fresh mapping.
            g.frames_end = unsafe { p.add(bytes / 8) };
        }
        let p = g.frames_bump;
        // SAFETY: checked room for `own` frames above.
        g.frames_bump = unsafe { p.add(own) };
        // SAFETY: p..p+own is ours and unpublished.
        fill(unsafe { core::slice::from_raw_parts_mut(p, own) });
        p
    };
    let mut chunk = DIR[chunk_no].load(Ordering::Acquire);
    if chunk.is_null() {
        // Entries are written in order: past the first chunk, whose pages
        // a small program touches few of, a chunk is faulted in at once
        // (one system call instead of 40 faults).
        let bytes = CHUNK * core::mem::size_of::<StackEntry>();
        chunk = if chunk_no == 0 {
            arena::map(bytes)
        } else {
            arena::map_populated(bytes)
        } as *mut StackEntry;
        if chunk.is_null() {
            return None;
        }
        DIR[chunk_no].store(chunk, Ordering::Release);
    }
    // SAFETY: slot `id` of its chunk is unpublished; only we write it.
    unsafe {
        chunk.add((id as usize) & (CHUNK - 1)).write(StackEntry {
            hash,
            frames,
            len: own as u32,
            tail_len: tail.len() as u32,
            tail: tail.as_ptr(),
            alive: AtomicI64::new(0),
            max_alive: AtomicU64::new(0),
        })
    };
    COUNT.store(id + 1, Ordering::Release);
    // Index: grow at half load.
    let mut idx = INDEX.load(Ordering::Acquire);
    // SAFETY: published indexes are never freed.
    let cap = if idx.is_null() {
        0
    } else {
        unsafe { (*idx).mask + 1 }
    };
    if (id as usize + 1) * 2 > cap {
        let new_cap = (cap * 2).max(4096);
        let n = new_index(new_cap);
        if n.is_null() {
            return None;
        }
        for old in 0..id {
            // SAFETY: n is fresh and ours until published.
            index_put(unsafe { &*n }, entry(old).hash, old);
        }
        INDEX.store(n, Ordering::Release);
        idx = n;
    }
    // SAFETY: idx is published and never freed.
    index_put(unsafe { &*idx }, hash, id);
    Some(id)
}

/// Makes sure stack 0 is the empty stack.
pub fn init() {
    intern(HASH_SEED, 0, &|f: Frames| f.is_empty(), |_| {});
}
