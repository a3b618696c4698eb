//! A table's slots, and the records of the entries that do not fit one.

use super::Entry;
use crate::base::{arena, degrade};
use core::ptr::null_mut;

/// A slot of a table.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Slot {
    /// 0 marks an empty slot.
    pub(super) addr: u64,
    /// Bit 0 clear: the size in bits 1..32 and the stack in bits 32..64,
    /// for a block without time or weight. Bit 0 set: the index of the
    /// shard's record that holds the rest, in bits 1..64.
    packed: u64,
}

pub(super) const EMPTY_SLOT: Slot = Slot { addr: 0, packed: 0 };

/// Sizes below this fit a slot.
const SLOT_SIZES: u64 = 1 << 31;

/// The rest of an entry that does not fit its slot. A free record's
/// `size` holds the index of the next free one.
#[derive(Clone, Copy)]
#[repr(C)]
struct Record {
    size: u64,
    time: u64,
    stack: u32,
    weight: u32,
}

/// The records of one shard: an array grown by doubling, with a free list,
/// so that a record freed is the next one taken (its line is likely still
/// in the cache).
pub(super) struct Records {
    recs: *mut Record,
    cap: u32,
    /// Records ever handed out; those from here on were never used.
    used: u32,
    /// Head of the free list, or `NO_RECORD`.
    free: u32,
}

pub(super) const NO_RECORD: u32 = u32::MAX;

#[allow(clippy::declare_interior_mutable_const)] // only used to initialize
pub(super) const EMPTY_RECORDS: Records = Records {
    recs: null_mut(),
    cap: 0,
    used: 0,
    free: NO_RECORD,
};

impl Records {
    /// Records in use (see `Table::records_held`).
    #[allow(dead_code)]
    pub(super) fn held(&self) -> usize {
        let mut free = 0;
        let mut i = self.free;
        while i != NO_RECORD {
            free += 1;
            // SAFETY: a free record, inside the array.
            i = unsafe { (*self.at(i)).size } as u32;
        }
        self.used as usize - free
    }

    /// A record to fill, or None when memory ran out.
    #[inline(always)]
    fn take(&mut self) -> Option<u32> {
        let i = self.free;
        if i != NO_RECORD {
            // SAFETY: a free record is inside the array.
            self.free = unsafe { (*self.recs.add(i as usize)).size } as u32;
            return Some(i);
        }
        if self.used == self.cap && !self.grow() {
            return None;
        }
        self.used += 1;
        Some(self.used - 1)
    }

    #[inline(always)]
    fn give_back(&mut self, i: u32) {
        // SAFETY: i was handed out by `take`, inside the array.
        unsafe { (*self.recs.add(i as usize)).size = self.free as u64 };
        self.free = i;
    }

    #[inline(always)]
    fn at(&self, i: u32) -> *mut Record {
        // SAFETY: i was handed out by `take`, inside the array.
        unsafe { self.recs.add(i as usize) }
    }

    /// The array's mapping, in bytes: a page, doubled as it grows.
    fn bytes(&self) -> usize {
        if self.recs.is_null() {
            0
        } else {
            (self.cap as usize * core::mem::size_of::<Record>()).next_multiple_of(4096)
        }
    }

    #[cold]
    fn grow(&mut self) -> bool {
        // Stopped: the tables were given back (`Table::release`).
        if degrade::stopped() {
            return false;
        }
        let old = self.bytes();
        let recs = if old == 0 {
            super::first_table()
        } else {
            // Below NO_RECORD, which marks the end of the free list.
            if self.cap >= 1 << 31 {
                return false;
            }
            // SAFETY: the array is one mapping of `old` bytes, owned by the
            // shard lock we hold.
            unsafe { arena::grow_table(self.recs as *mut u8, old, 2 * old) }
        } as *mut Record;
        if recs.is_null() {
            return false;
        }
        self.recs = recs;
        self.cap = ((2 * old).max(4096) / core::mem::size_of::<Record>()) as u32;
        true
    }

    /// Unmaps the array; returns its bytes.
    pub(super) fn release(&mut self) -> usize {
        let bytes = self.bytes();
        if bytes != 0 {
            // SAFETY: the array is one mapping of `bytes`, owned by the
            // shard lock the caller holds; no slot refers to it any more.
            unsafe { arena::free_table(self.recs as *mut u8, bytes) };
        }
        *self = EMPTY_RECORDS;
        bytes
    }

    /// The slot of `e`, with a record if it needs one; None when memory for
    /// the record ran out.
    #[inline(always)]
    pub(super) fn pack(&mut self, e: &Entry) -> Option<Slot> {
        if e.time == 0 && e.weight == 0 && e.size < SLOT_SIZES {
            return Some(Slot {
                addr: e.addr,
                packed: (e.size << 1) | ((e.stack as u64) << 32),
            });
        }
        let i = self.take()?;
        // SAFETY: a record just taken.
        unsafe {
            *self.at(i) = Record {
                size: e.size,
                time: e.time,
                stack: e.stack,
                weight: e.weight,
            }
        };
        Some(Slot {
            addr: e.addr,
            packed: ((i as u64) << 1) | 1,
        })
    }

    /// The entry a slot stands for.
    #[inline(always)]
    pub(super) fn unpack(&self, s: Slot) -> Entry {
        if s.packed & 1 == 0 {
            return Entry {
                addr: s.addr,
                size: (s.packed >> 1) & (SLOT_SIZES - 1),
                time: 0,
                stack: (s.packed >> 32) as u32,
                weight: 0,
            };
        }
        // SAFETY: the slot's record.
        let r = unsafe { *self.at((s.packed >> 1) as u32) };
        Entry {
            addr: s.addr,
            size: r.size,
            time: r.time,
            stack: r.stack,
            weight: r.weight,
        }
    }

    /// Frees the record of a slot that leaves the table, if it has one.
    #[inline(always)]
    pub(super) fn drop_slot(&mut self, s: Slot) {
        if s.packed & 1 != 0 {
            self.give_back((s.packed >> 1) as u32);
        }
    }
}
