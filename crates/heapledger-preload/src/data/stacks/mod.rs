//! Every distinct stack, stored once (seed 000: hashing, growth that never
//! moves what readers hold).
//!
//! Entries live in fixed-size chunks reached through a directory, so an
//! entry's address never changes once published and readers need no lock.
//! The hash index is open addressing over atomics; readers probe it without a
//! lock, inserts (new stacks only, rare) take `INSERT`. When the index grows,
//! a new one is published and the old one stays mapped, its pages given back
//! (readers may still be probing it: they read empty slots there, and a
//! reader that misses retries under the lock).
//! Stack 0 is the empty stack.

use crate::base::arena;
use crate::base::sync::SpinLock;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

mod frames;

pub use frames::{frames, Frames};
use frames::{Ids, TAIL_LEN, WIDE_OWN, WIDE_TAIL};

pub type StackId = u32;

pub struct StackEntry {
    /// Frames, leaf first, as ids of distinct addresses (see [`addr`]):
    /// the first `len` here (the stack's own), then more at `tail`, the
    /// outer frames it shares with a stack stored before it (part of that
    /// stack's own; see [`Frames`]). Each run holds 2-byte ids or 4-byte
    /// ones (`tail_word`'s flags).
    pub frames: *const u8,
    pub tail: *const u8,
    /// Flushed part of the bytes alive (threads keep the rest; see `counters`).
    pub alive: AtomicI64,
    pub max_alive: AtomicU64,
    /// The high half of the stack's hash: its tag in the index, and where
    /// the index looks for it first (all a grown index needs).
    pub tag: u32,
    pub len: u16,
    /// The tail's length, and the flags `WIDE_OWN` and `WIDE_TAIL`.
    pub tail_word: u16,
}

/// 40 bytes an entry (half a million stacks: 20 MB); the full hash and
/// 32-bit lengths took 48.
const _: () = assert!(core::mem::size_of::<StackEntry>() == 40);

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
    frames_bump: *mut u8,
    frames_end: *mut u8,
    /// Address -> id: open addressing over ids plus one (0: empty), read
    /// and written under the lock only (so a grown table's old one goes).
    addr_slots: *mut u32,
    addr_mask: usize,
    /// A new stack's own frames, as addresses, before they become ids.
    scratch: alloc::vec::Vec<u64>,
}
// SAFETY: owned by the lock.
unsafe impl Send for InsertState {}

pub static INSERT: SpinLock<InsertState> = SpinLock::new(InsertState {
    frames_bump: null_mut(),
    frames_end: null_mut(),
    addr_slots: null_mut(),
    addr_mask: 0,
    scratch: alloc::vec::Vec::new(),
});

/// Distinct frame addresses, by id, in fixed-size chunks reached through a
/// directory (as the entries: an address never moves once published).
/// Frames are kept as ids of these, 2 or 4 bytes each (see [`Frames`]):
/// Python compiling its library stored 5.9 million own frames of 4 638
/// addresses, 47 MB as addresses.
const ADDR_CHUNK_BITS: u32 = 14;
const ADDR_CHUNK: usize = 1 << ADDR_CHUNK_BITS;
const ADDR_CHUNKS: usize = 1 << 10; // 16 M addresses
static ADDR_DIR: [AtomicPtr<u64>; ADDR_CHUNKS] =
    [const { AtomicPtr::new(null_mut()) }; ADDR_CHUNKS];
static ADDR_COUNT: AtomicU32 = AtomicU32::new(0);

/// The address of frame id `id` (published: read without a lock).
#[inline(always)]
pub fn addr(id: u32) -> u64 {
    let chunk = ADDR_DIR[(id >> ADDR_CHUNK_BITS) as usize].load(Ordering::Acquire);
    // SAFETY: ids are only stored after their address was written and its
    // chunk published (Release); chunks are never freed.
    unsafe { *chunk.add(id as usize & (ADDR_CHUNK - 1)) }
}

#[inline(always)]
fn addr_hash(a: u64) -> usize {
    (a.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize
}

impl InsertState {
    /// The id of address `a`, added if new; None when memory ran out.
    fn addr_id(&mut self, a: u64) -> Option<u32> {
        let count = ADDR_COUNT.load(Ordering::Relaxed);
        if self.addr_slots.is_null() || (count as usize + 1) * 2 > self.addr_mask + 1 {
            self.grow_addrs(count)?;
        }
        let mut i = addr_hash(a) & self.addr_mask;
        loop {
            // SAFETY: i <= mask, inside the table.
            let s = unsafe { &mut *self.addr_slots.add(i) };
            if *s == 0 {
                break;
            }
            if addr(*s - 1) == a {
                return Some(*s - 1);
            }
            i = (i + 1) & self.addr_mask;
        }
        let id = count;
        let chunk_no = (id >> ADDR_CHUNK_BITS) as usize;
        if chunk_no >= ADDR_CHUNKS {
            return None;
        }
        let mut chunk = ADDR_DIR[chunk_no].load(Ordering::Acquire);
        if chunk.is_null() {
            chunk = arena::map(ADDR_CHUNK * 8) as *mut u64;
            if chunk.is_null() {
                return None;
            }
            ADDR_DIR[chunk_no].store(chunk, Ordering::Release);
        }
        // SAFETY: slot `id` of its chunk is unpublished; only we write it.
        unsafe { chunk.add(id as usize & (ADDR_CHUNK - 1)).write(a) };
        ADDR_COUNT.store(id + 1, Ordering::Release);
        // SAFETY: the probe above ended at this empty slot.
        unsafe { *self.addr_slots.add(i) = id + 1 };
        Some(id)
    }

    /// Doubles the address index (kept at most half full).
    #[cold]
    fn grow_addrs(&mut self, count: u32) -> Option<()> {
        let cap = ((self.addr_mask + 1) * 2).max(4096);
        let slots = arena::map(cap * 4) as *mut u32;
        if slots.is_null() {
            return None;
        }
        for id in 0..count {
            let mut i = addr_hash(addr(id)) & (cap - 1);
            // SAFETY: i < cap; the fresh table is zero-filled.
            unsafe {
                while *slots.add(i) != 0 {
                    i = (i + 1) & (cap - 1);
                }
                *slots.add(i) = id + 1;
            }
        }
        if !self.addr_slots.is_null() {
            // SAFETY: the old table, read and written under this lock only.
            unsafe { arena::unmap(self.addr_slots as *mut u8, (self.addr_mask + 1) * 4) };
        }
        self.addr_slots = slots;
        self.addr_mask = cap - 1;
        Some(())
    }
}

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
    addr_chunk_bits: u32,
    addr_dir: *const AtomicPtr<u64>,
    addr_count: *const AtomicU32,
    addr_max_chunks: u32,
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
    addr_chunk_bits: ADDR_CHUNK_BITS,
    addr_dir: core::ptr::addr_of!(ADDR_DIR) as *const AtomicPtr<u64>,
    addr_count: core::ptr::addr_of!(ADDR_COUNT),
    addr_max_chunks: ADDR_CHUNKS as u32,
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
    // SAFETY: published indexes are never unmapped (an old one's slots
    // read as empty).
    let idx = unsafe { &*idx };
    let tag = hash >> 32;
    let mut i = (tag as usize) & idx.mask;
    loop {
        // SAFETY: i <= mask.
        let s = unsafe { &*idx.slots.add(i) }.load(Ordering::Acquire);
        if s == 0 {
            return None;
        }
        if s >> 32 == tag {
            let id = (s as u32).wrapping_sub(1);
            if eq(frames(entry(id))) {
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
    // SAFETY: published indexes are never unmapped; the slot is inside it
    // (and a prefetch does not fault anyway).
    unsafe {
        let idx = &*idx;
        let p = idx.slots.add(((hash >> 32) as usize) & idx.mask);
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

fn index_put(idx: &Index, tag: u32, id: StackId) {
    let mut i = (tag as usize) & idx.mask;
    loop {
        // SAFETY: i <= mask.
        let s = unsafe { &*idx.slots.add(i) };
        if s.load(Ordering::Relaxed) == 0 {
            s.store((u64::from(tag) << 32) | (id as u64 + 1), Ordering::Release);
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
    let tail = match outer {
        Some((from, k, want)) if k > 0 && k <= len && from < id && want.len() == k => {
            match frames(entry(from)).outer(k) {
                Some(t) if t.same(want) => t,
                _ => Ids::EMPTY,
            }
        }
        _ => Ids::EMPTY,
    };
    let own = len - tail.len();
    // (Never so long: depths are clamped to 4 096 frames.)
    if own > u16::MAX as usize || tail.len() > TAIL_LEN as usize {
        return None;
    }
    // Frames storage: the own frames' addresses from `fill`, as ids.
    let (frames, wide_own) = if own == 0 {
        (null_mut(), false)
    } else {
        let g = &mut *g;
        let mut scratch = core::mem::take(&mut g.scratch);
        if scratch.len() < own {
            if scratch.try_reserve(own - scratch.len()).is_err() {
                return None;
            }
            scratch.resize(own, 0);
        }
        fill(&mut scratch[..own]);
        let stored = store_own(g, &mut scratch[..own]);
        g.scratch = scratch;
        stored?
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
            tag: (hash >> 32) as u32,
            frames,
            len: own as u16,
            tail_word: tail.len() as u16
                | if wide_own { WIDE_OWN } else { 0 }
                | if tail.wide() { WIDE_TAIL } else { 0 },
            tail: tail.ptr(),
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
            index_put(unsafe { &*n }, entry(old).tag, old);
        }
        INDEX.store(n, Ordering::Release);
        if !idx.is_null() {
            // The old slots go (half the index's memory, at every size):
            // a reader still probing them reads zeros, an empty slot, and
            // retries under this lock in the new index. The small `Index`
            // itself stays, for such a reader.
            // SAFETY: the old slots, one mapping of `cap` words; nothing
            // writes them again (inserts take this lock and the new index).
            unsafe { arena::discard((*idx).slots as *mut u8, cap * 8) };
        }
        idx = n;
    }
    // SAFETY: idx is published and never freed.
    index_put(unsafe { &*idx }, (hash >> 32) as u32, id);
    Some(id)
}

/// Stores `own` (addresses, overwritten with their ids) as ids in the
/// frames' storage, 2 bytes each where every id fits; where they lie, and
/// whether they took 4 bytes each.
fn store_own(g: &mut InsertState, own: &mut [u64]) -> Option<(*mut u8, bool)> {
    let mut max = 0;
    for a in own.iter_mut() {
        *a = u64::from(g.addr_id(*a)?);
        max = max.max(*a);
    }
    let wide = max > u64::from(u16::MAX);
    let width = if wide { 4 } else { 2 };
    let bytes = own.len() * width;
    // Aligned to the ids' width (the bump pointer is always even).
    let mut p = (g.frames_bump as usize).next_multiple_of(width) as *mut u8;
    if g.frames_bump.is_null() || (g.frames_end as usize).saturating_sub(p as usize) < bytes {
        // The first 1 MiB faults in page by page, as a small program
        // uses it; a program that fills it gets the next ones faulted
        // in at once (written through in order: one system call
        // instead of 256 faults).
        let first = g.frames_bump.is_null();
        let map = bytes.max(1 << 20);
        p = if first {
            arena::map(map)
        } else {
            arena::map_populated(map)
        };
        if p.is_null() {
            return None;
        }
        // SAFETY: inside the fresh mapping.
        g.frames_end = unsafe { p.add(map) };
    }
    for (k, &id) in own.iter().enumerate() {
        // SAFETY: checked room for `own` ids of this width above, aligned;
        // unpublished.
        unsafe {
            if wide {
                (p as *mut u32).add(k).write(id as u32);
            } else {
                (p as *mut u16).add(k).write(id as u16);
            }
        }
    }
    // SAFETY: as above.
    g.frames_bump = unsafe { p.add(bytes) };
    Some((p, wide))
}

/// Makes sure stack 0 is the empty stack.
pub fn init() {
    intern(HASH_SEED, 0, &|f: Frames| f.is_empty(), |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Interns `f` (leaf first), sharing its last `k` frames with stack
    /// `from` where given; its id.
    fn put(f: &[u64], outer: Option<(StackId, usize)>) -> StackId {
        let h = f.iter().rev().fold(HASH_SEED, |h, &a| mix(h, a));
        let outer = outer.map(|(from, k)| (from, k, &f[f.len() - k..]));
        let eq = |s: Frames| s.is(f);
        intern_sharing(h, f.len(), outer, &eq, |dst| {
            dst.copy_from_slice(&f[..dst.len()])
        })
        .unwrap()
    }

    fn read(id: StackId) -> Vec<u64> {
        let mut v = Vec::new();
        frames(entry(id)).copy_to(&mut v);
        v
    }

    /// Ids take 2 bytes until the addresses pass 65 536, then 4; a stack
    /// may share a tail of either width, and each reads back whole.
    #[test]
    fn frame_ids_widen_past_65536_addresses() {
        init();
        let base = 0x7f00_0000_0000u64;
        let a = [base + 1, base + 2, base + 3];
        let sa = put(&a, None);
        assert!(!frames(entry(sa)).own.wide());
        // Distinct addresses until the ids no longer fit 2 bytes.
        let mut last = 0;
        let mut i = 0u64;
        while ADDR_COUNT.load(Ordering::Relaxed) <= 70_000 {
            last = put(&[base + 0x1000 + i], None);
            i += 1;
        }
        assert!(frames(entry(last)).own.wide());
        // New (wide) own frames over a narrow tail.
        let b = [base + 0x10_0000, a[1], a[2]];
        let sb = put(&b, Some((sa, 2)));
        let fb = frames(entry(sb));
        assert!(fb.own.wide() && !fb.tail.wide() && fb.tail.len() == 2);
        // Narrow own frames over a wide tail.
        let c = [a[0], base + 0x1000 + i - 1];
        let sc = put(&c, Some((last, 1)));
        let fc = frames(entry(sc));
        assert!(!fc.own.wide() && fc.tail.wide() && fc.tail.len() == 1);
        for (id, f) in [(sa, &a[..]), (sb, &b[..]), (sc, &c[..]), (last, &c[1..])] {
            assert_eq!(read(id), f);
            assert_eq!(put(f, None), id, "found again, not stored twice");
        }
    }
}
