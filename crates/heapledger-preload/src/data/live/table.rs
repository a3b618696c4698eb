//! A shard's tables: one whose slots follow the address order, and an
//! overflow table for the blocks that would sit too far from home in it.

use super::records::{Records, Slot, EMPTY_RECORDS, EMPTY_SLOT};
use super::{far_hash, near_hash, Entry};
use crate::base::{arena, degrade};
use core::ptr::null_mut;

/// One open-addressing table with linear probing and backward-shift
/// deletion; `near` tables keep every entry within `MAX_SHIFT` slots of its
/// home (see [`Table`]).
pub struct Probe {
    slots: *mut Slot,
    mask: usize,
    /// 32 bits (a shard never holds 4 G blocks), so that a shard's lock and
    /// both its tables' fields share one cache line.
    len: u32,
    /// `len` at which the table is full (3/4 of its slots; 0 when it has
    /// none), so that the check on every insert is one comparison.
    limit: u32,
}

/// Blocks of one shard: a table whose slots follow the address order (see
/// `near_hash`), and an overflow table with a mixing hash for the blocks
/// that would sit more than `MAX_SHIFT` slots from their home in it.
///
/// The first keeps events cache-friendly: blocks allocated together sit in
/// neighbouring slots, so millions of live blocks do not cost a cache miss
/// per event. Alone, it can pile up: a heap packed with small chunks fills
/// whole stretches of slots, and where two such stretches land on each other
/// a probe crossed hundreds of slots (4 M live 24-byte blocks: 11 s instead
/// of 1). The bound sends that excess to the overflow table instead, where
/// it costs a cache miss and no more.
#[repr(C)]
pub struct Table {
    near: Probe,
    far: Probe,
    records: Records,
}

// SAFETY: the slots are owned by the shard lock that wraps the table.
unsafe impl Send for Table {}

// The lock word (8 bytes, first: `SpinLock` is `repr(C)`) and the
// address-ordered table's fields, which precede `far`, in the first line.
const _: () = assert!(8 + core::mem::offset_of!(Table, far) <= 64);

/// How far from its home a block may sit in the address-ordered table.
const MAX_SHIFT: usize = 16;

#[allow(clippy::declare_interior_mutable_const)] // only used to initialize the array
const EMPTY_PROBE: Probe = Probe {
    slots: null_mut(),
    mask: 0,
    len: 0,
    limit: 0,
};
/// Where an insert into a bounded table ends.
enum Placed {
    Done,
    /// The address was there: this slot was replaced.
    Replaced(Slot),
    /// No free slot within `MAX_SHIFT` of the home.
    TooFar,
}

impl Probe {
    fn alloc_slots(cap: usize) -> *mut Slot {
        // Fresh anonymous mappings are zero-filled, i.e. all slots empty
        // (as are the pool's chunks).
        let bytes = cap * core::mem::size_of::<Slot>();
        if bytes == arena::POOL_CHUNK {
            return super::first_table() as *mut Slot;
        }
        arena::map_populated(bytes) as *mut Slot
    }

    fn cap(&self) -> usize {
        if self.slots.is_null() {
            0
        } else {
            self.mask + 1
        }
    }

    /// Whether one more entry needs a bigger table (kept at most 3/4 full).
    #[inline(always)]
    fn full(&self) -> bool {
        self.len >= self.limit
    }

    /// An empty table over `slots`, `cap` of them (a power of two).
    fn over(slots: *mut Slot, cap: usize) -> Probe {
        Probe {
            slots,
            mask: cap - 1,
            len: 0,
            limit: (cap / 4 * 3) as u32,
        }
    }

    /// An empty table of `cap` slots, or None when memory ran out.
    fn with_cap(cap: usize) -> Option<Probe> {
        let slots = Self::alloc_slots(cap);
        (!slots.is_null()).then(|| Probe::over(slots, cap))
    }

    /// Unmaps the slots; returns their bytes.
    fn release(&mut self) -> usize {
        let bytes = self.cap() * core::mem::size_of::<Slot>();
        if !self.slots.is_null() {
            // SAFETY: the table was one table of cap entries.
            unsafe {
                arena::free_table(
                    self.slots as *mut u8,
                    self.cap() * core::mem::size_of::<Slot>(),
                )
            };
        }
        *self = EMPTY_PROBE;
        bytes
    }

    /// Inserts; with `bound`, only within `MAX_SHIFT` slots of the home.
    /// The table must have a free slot.
    #[inline(always)]
    fn place(&mut self, e: Slot, hash: fn(u64) -> usize, bound: bool) -> Placed {
        let home = hash(e.addr) & self.mask;
        let mut i = home;
        loop {
            // SAFETY: i <= mask, inside the table.
            let s = unsafe { &mut *self.slots.add(i) };
            if s.addr == 0 {
                *s = e;
                self.len += 1;
                return Placed::Done;
            }
            if s.addr == e.addr {
                // The same address again: the previous block was released
                // behind the recorder's back (realloc in a signal handler...).
                return Placed::Replaced(core::mem::replace(s, e));
            }
            i = (i + 1) & self.mask;
            if bound && (i.wrapping_sub(home) & self.mask) > MAX_SHIFT {
                return Placed::TooFar;
            }
        }
    }

    /// Finds and removes `addr`; with `bound`, looks only within
    /// `MAX_SHIFT` slots of its home.
    #[inline(always)]
    fn take(&mut self, addr: u64, hash: fn(u64) -> usize, bound: bool) -> Option<Slot> {
        if self.slots.is_null() {
            return None;
        }
        let home = hash(addr) & self.mask;
        let mut i = home;
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
            if bound && (i.wrapping_sub(home) & self.mask) > MAX_SHIFT {
                return None;
            }
        }
        // SAFETY: inside the table.
        let found = unsafe { *self.slots.add(i) };
        // Backward-shift deletion: an entry only ever moves closer to its
        // home, so the bound keeps holding.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        loop {
            // SAFETY: inside the table.
            let s = unsafe { *self.slots.add(j) };
            if s.addr == 0 {
                break;
            }
            if bound && (j.wrapping_sub(hole) & self.mask) > MAX_SHIFT {
                // Entries further on sit within MAX_SHIFT of their homes,
                // all past the hole: none can move into it.
                break;
            }
            let home = hash(s.addr) & self.mask;
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

    /// Calls `f` on every block, and stops at the last one: at exit a
    /// program has usually freed most of what it allocated, and its tables
    /// stay as large as they grew (Python after 3 M strings: 76 MB of
    /// empty slots, which the profile written at exit used to read whole).
    fn for_each(&self, mut f: impl FnMut(Slot)) {
        let mut left = self.len;
        let mut i = 0;
        while left != 0 && i < self.cap() {
            // SAFETY: inside the table.
            let e = unsafe { &*self.slots.add(i) };
            if e.addr != 0 {
                f(*e);
                left -= 1;
            }
            i += 1;
        }
    }
}

impl Table {
    pub const fn new() -> Table {
        Table {
            near: EMPTY_PROBE,
            far: EMPTY_PROBE,
            records: EMPTY_RECORDS,
        }
    }

    /// Blocks in the table, and how many of them sit in the overflow table
    /// (for tests/live_table.rs).
    #[allow(dead_code)]
    pub fn len(&self) -> (usize, usize) {
        (
            (self.near.len + self.far.len) as usize,
            self.far.len as usize,
        )
    }

    /// Records in use (for tests/live_table.rs: none may leak).
    #[allow(dead_code)]
    pub fn records_held(&self) -> usize {
        self.records.held()
    }

    /// Inserts; returns false if memory for the table ran out.
    #[inline(always)]
    pub fn insert(&mut self, e: Entry) -> bool {
        let Some(s) = self.records.pack(&e) else {
            return false;
        };
        if self.near.full() && !self.grow_near() {
            self.records.drop_slot(s);
            return false;
        }
        match self.near.place(s, near_hash, true) {
            Placed::Done => {
                // A block at this address released behind the recorder's
                // back may sit in the overflow table: the new one replaces it.
                if self.far.len != 0 {
                    if let Some(old) = self.far.take(s.addr, far_hash, false) {
                        self.records.drop_slot(old);
                    }
                }
                true
            }
            Placed::Replaced(old) => {
                self.records.drop_slot(old);
                true
            }
            Placed::TooFar => self.insert_far(s),
        }
    }

    #[cold]
    fn insert_far(&mut self, s: Slot) -> bool {
        if self.far.full() && !Self::grow_far(&mut self.far) {
            self.records.drop_slot(s);
            return false;
        }
        if let Placed::Replaced(old) = self.far.place(s, far_hash, false) {
            self.records.drop_slot(old);
        }
        true
    }

    /// Doubles the address-ordered table in place and places every block
    /// again (in it, or in the overflow table, whose blocks may now fit).
    ///
    /// In place, because copying into a new mapping twice the size makes
    /// the kernel zero, over the table's life, twice the pages it ends with
    /// and unmap half of them: on Python building 3 M strings that was
    /// 270 MB populated and 170 MB unmapped for 100 MB of tables at the end.
    ///
    /// The new home of a block is its old home or that plus the old
    /// capacity. Slots are taken in order, each emptied and its block placed
    /// again: a block whose home stays in the lower half probes from a slot
    /// at or before the one just emptied, through slots already placed, so
    /// it lands there at the latest and never on a slot not yet taken; one
    /// whose home moves up lands in the upper half, or past its end in the
    /// slots already placed. Blocks that had wrapped past the old end (at
    /// most `MAX_SHIFT`, in the first slots) are set aside first and placed
    /// last, when every slot is in its final state.
    #[cold]
    fn grow_near(&mut self) -> bool {
        // Stopped: the tables were given back (`release`).
        if degrade::stopped() {
            return false;
        }
        if self.near.slots.is_null() {
            let Some(near) = Probe::with_cap(256) else {
                return false;
            };
            self.near = near;
            return true;
        }
        let old = self.near.cap();
        let bytes = core::mem::size_of::<Slot>();
        // SAFETY: the table is one mapping of `old` entries, owned by the
        // shard lock we hold.
        let slots =
            unsafe { arena::grow_table(self.near.slots as *mut u8, old * bytes, 2 * old * bytes) }
                as *mut Slot;
        if slots.is_null() {
            return false;
        }
        self.near = Probe::over(slots, 2 * old);
        let mut wrapped = [EMPTY_SLOT; MAX_SHIFT];
        let mut n_wrapped = 0;
        // A block sits at most MAX_SHIFT slots past its home, so one that
        // wrapped sits in the first MAX_SHIFT slots.
        for i in 0..MAX_SHIFT.min(old) {
            // SAFETY: inside the old part of the table.
            let s = unsafe { &mut *slots.add(i) };
            if s.addr != 0 && near_hash(s.addr) & (old - 1) > i {
                wrapped[n_wrapped] = *s;
                n_wrapped += 1;
                s.addr = 0;
            }
        }
        for i in 0..old {
            // SAFETY: inside the old part of the table.
            let s = unsafe { &mut *slots.add(i) };
            if s.addr != 0 {
                let e = *s;
                s.addr = 0;
                self.place_again(e);
            }
        }
        for &e in &wrapped[..n_wrapped] {
            self.place_again(e);
        }
        let mut far = core::mem::replace(&mut self.far, EMPTY_PROBE);
        far.for_each(|e| self.place_again(e));
        far.release();
        true
    }

    /// Places a block during growth: in the address-ordered table if it
    /// fits near its home, else in the overflow table.
    fn place_again(&mut self, e: Slot) {
        if let Placed::TooFar = self.near.place(e, near_hash, true) {
            // Only when memory for the overflow table ran out is the block
            // lost, as an insert that fails for it would lose it.
            self.insert_far(e);
        }
    }

    #[cold]
    fn grow_far(far: &mut Probe) -> bool {
        if degrade::stopped() {
            return false;
        }
        let Some(mut bigger) = Probe::with_cap((far.cap() * 2).max(256)) else {
            return false;
        };
        far.for_each(|e| {
            bigger.place(e, far_hash, false);
        });
        far.release();
        *far = bigger;
        true
    }

    /// Forgets every block and gives the memory back (recording
    /// stopped: `base::degrade`); returns the bytes unmapped.
    pub fn release(&mut self) -> usize {
        self.near.release() + self.far.release() + self.records.release()
    }

    #[inline(always)]
    pub fn remove(&mut self, addr: u64) -> Option<Entry> {
        let s = match self.near.take(addr, near_hash, true) {
            Some(s) => s,
            None if self.far.len == 0 => return None,
            None => self.far.take(addr, far_hash, false)?,
        };
        let e = self.records.unpack(s);
        self.records.drop_slot(s);
        Some(e)
    }

    pub fn for_each(&self, mut f: impl FnMut(&Entry)) {
        let records = &self.records;
        self.near.for_each(|s| f(&records.unpack(s)));
        self.far.for_each(|s| f(&records.unpack(s)));
    }
}
