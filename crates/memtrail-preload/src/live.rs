//! Blocks alive right now: address -> (size, stack, allocation time).
//!
//! A free must find the stack that allocated its block, on whichever thread
//! it happens. The table is split into shards by a hash of the address, each
//! an open-addressing table with its own spin lock, so threads rarely meet on
//! the same lock. Deletion shifts entries back (no tombstones), so a table
//! never fills with dead slots. An entry is always removed before the real
//! `free` runs and inserted after the real `malloc` returns, so the
//! allocator's own ordering keeps an address from being present twice.

use crate::arena;
use crate::sync::SpinLock;
use core::ptr::null_mut;

pub const SHARDS: usize = 256;

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Entry {
    /// 0 marks an empty slot.
    pub addr: u64,
    pub size: u64,
    pub time: u64,
    pub stack: u32,
    pub _pad: u32,
}

pub struct Table {
    slots: *mut Entry,
    mask: usize,
    len: usize,
}

// SAFETY: the slots are owned by the shard lock that wraps the table.
unsafe impl Send for Table {}

#[repr(align(64))]
pub struct Shard(pub SpinLock<Table>);

#[allow(clippy::declare_interior_mutable_const)] // only used to initialize the array
const EMPTY_SHARD: Shard = Shard(SpinLock::new(Table {
    slots: null_mut(),
    mask: 0,
    len: 0,
}));
pub static SHARD_TABLE: [Shard; SHARDS] = [EMPTY_SHARD; SHARDS];

/// Slots follow the address order inside each 16 MiB region (plus a
/// scrambled per-region offset), so that the table is touched with the same
/// locality as the heap itself: blocks allocated together sit in neighbouring
/// slots, and a workload with millions of live blocks does not pay a cache
/// and TLB miss per event, as it does with a fully mixed hash.
#[inline(always)]
fn slot_hash(addr: u64) -> usize {
    let region = (addr >> 24).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
    ((addr >> 4).wrapping_add(region)) as usize
}

/// Shards split the address space in 64 KiB windows, so one thread's
/// neighbouring blocks share a shard while threads' arenas spread out.
#[inline(always)]
pub fn shard_of(addr: u64) -> &'static Shard {
    let w = addr >> 16;
    &SHARD_TABLE[((w ^ (w >> 8) ^ (w >> 16)) & 0xff) as usize]
}

impl Table {
    fn alloc_slots(cap: usize) -> *mut Entry {
        // Fresh anonymous mappings are zero-filled, i.e. all slots empty.
        arena::map_populated(cap * core::mem::size_of::<Entry>()) as *mut Entry
    }

    fn grow(&mut self) -> bool {
        let old_cap = if self.slots.is_null() {
            0
        } else {
            self.mask + 1
        };
        let cap = if old_cap == 0 { 256 } else { old_cap * 2 };
        let slots = Self::alloc_slots(cap);
        if slots.is_null() {
            return false;
        }
        let old = self.slots;
        self.slots = slots;
        self.mask = cap - 1;
        self.len = 0;
        for i in 0..old_cap {
            // SAFETY: i < old_cap, the old table's size.
            let e = unsafe { *old.add(i) };
            if e.addr != 0 {
                self.insert_nogrow(e);
            }
        }
        if !old.is_null() {
            // SAFETY: the old table was one mapping of old_cap entries.
            unsafe { arena::unmap(old as *mut u8, old_cap * core::mem::size_of::<Entry>()) };
        }
        true
    }

    #[inline(always)]
    fn insert_nogrow(&mut self, e: Entry) {
        let mut i = slot_hash(e.addr) & self.mask;
        loop {
            // SAFETY: i <= mask, inside the table.
            let s = unsafe { &mut *self.slots.add(i) };
            if s.addr == 0 {
                *s = e;
                self.len += 1;
                return;
            }
            if s.addr == e.addr {
                // The same address again: the previous block was released
                // behind the recorder's back (realloc in a signal handler...).
                *s = e;
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Inserts; returns false if memory for the table ran out.
    #[inline]
    pub fn insert(&mut self, e: Entry) -> bool {
        if ((self.len + 1) * 4 > (self.mask + 1) * 3 || self.slots.is_null()) && !self.grow() {
            return false;
        }
        self.insert_nogrow(e);
        true
    }

    #[inline]
    pub fn remove(&mut self, addr: u64) -> Option<Entry> {
        if self.slots.is_null() {
            return None;
        }
        let mut i = slot_hash(addr) & self.mask;
        loop {
            // SAFETY: inside the table.
            let s = unsafe { *self.slots.add(i) };
            if s.addr == 0 {
                return None;
            }
            if s.addr == addr {
                break;
            }
            i = (i + 1) & self.mask;
        }
        // SAFETY: inside the table.
        let found = unsafe { *self.slots.add(i) };
        // Backward-shift deletion.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        loop {
            // SAFETY: inside the table.
            let s = unsafe { *self.slots.add(j) };
            if s.addr == 0 {
                break;
            }
            let home = slot_hash(s.addr) & self.mask;
            // Move s into the hole if its home is not in (hole, j].
            let dist_home = j.wrapping_sub(home) & self.mask;
            let dist_hole = j.wrapping_sub(hole) & self.mask;
            if dist_home >= dist_hole {
                // SAFETY: both inside the table.
                unsafe { *self.slots.add(hole) = s };
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        // SAFETY: inside the table.
        unsafe { (*self.slots.add(hole)).addr = 0 };
        self.len -= 1;
        Some(found)
    }

    pub fn for_each(&self, mut f: impl FnMut(&Entry)) {
        if self.slots.is_null() {
            return;
        }
        for i in 0..=self.mask {
            // SAFETY: inside the table.
            let e = unsafe { &*self.slots.add(i) };
            if e.addr != 0 {
                f(e);
            }
        }
    }
}

pub fn insert(e: Entry) -> bool {
    shard_of(e.addr).0.lock().insert(e)
}

pub fn remove(addr: u64) -> Option<Entry> {
    shard_of(addr).0.lock().remove(addr)
}
