//! Blocks alive right now: address -> (size, stack, allocation time).
//!
//! A free must find the stack that allocated its block, on whichever thread
//! it happens. The table is split into shards by a hash of the address, each
//! with its own spin lock, so threads rarely meet on the same lock; each
//! shard is a pair of open-addressing tables (see [`Table`]). Deletion shifts
//! entries back (no tombstones), so a table never fills with dead slots. An
//! entry is always removed before the real `free` runs and inserted after
//! the real `malloc` returns, so the allocator's own ordering keeps an
//! address from being present twice.
//!
//! A slot is 16 bytes: the address, and the size and stack packed in one
//! word. That is all most blocks have: their lifetime is not measured (see
//! `counters::LIFETIME_HEAD`), so they carry no time and no weight. The others
//! (timed, sampled, or 2 GiB and more) keep the rest in a record of their
//! shard, which the slot points to. At 16 bytes a cache line holds four
//! slots and the tables take half the memory of full entries: on Python
//! building 3 M strings, inserting into the table was the recorder's most
//! expensive instruction, and filling its pages a tenth of its time.

use crate::base::arena;
use crate::base::sync;
use crate::base::sync::SpinLock;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, Ordering};

/// A power of two, at most the 1024 windows of a 64 MiB region (see
/// `shard_of`).
pub const SHARDS: usize = 1024;
const _: () = assert!(SHARDS.is_power_of_two() && SHARDS <= 1024);

/// What the recorder keeps of a live block.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Entry {
    /// 0 marks an empty slot.
    pub addr: u64,
    pub size: u64,
    pub time: u64,
    pub stack: u32,
    /// With `--sample-every`, the count the block stands for; otherwise
    /// the weight of its lifetime (see `counters::LIFETIME_HEAD`), 0 for a
    /// block whose lifetime is not measured.
    pub weight: u32,
}

/// A slot of a table.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    /// 0 marks an empty slot.
    addr: u64,
    /// Bit 0 clear: the size in bits 1..32 and the stack in bits 32..64,
    /// for a block without time or weight. Bit 0 set: the index of the
    /// shard's record that holds the rest, in bits 1..64.
    packed: u64,
}

const EMPTY_SLOT: Slot = Slot { addr: 0, packed: 0 };

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
struct Records {
    recs: *mut Record,
    cap: u32,
    /// Records ever handed out; those from here on were never used.
    used: u32,
    /// Head of the free list, or `NO_RECORD`.
    free: u32,
}

const NO_RECORD: u32 = u32::MAX;

#[allow(clippy::declare_interior_mutable_const)] // only used to initialize
const EMPTY_RECORDS: Records = Records {
    recs: null_mut(),
    cap: 0,
    used: 0,
    free: NO_RECORD,
};

impl Records {
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
        let old = self.bytes();
        let recs = if old == 0 {
            arena::map_populated(4096)
        } else {
            // Below NO_RECORD, which marks the end of the free list.
            if self.cap >= 1 << 31 {
                return false;
            }
            // SAFETY: the array is one mapping of `old` bytes, owned by the
            // shard lock we hold.
            unsafe { arena::grow_populated(self.recs as *mut u8, old, 2 * old) }
        } as *mut Record;
        if recs.is_null() {
            return false;
        }
        self.recs = recs;
        self.cap = ((2 * old).max(4096) / core::mem::size_of::<Record>()) as u32;
        true
    }

    /// The slot of `e`, with a record if it needs one; None when memory for
    /// the record ran out.
    #[inline(always)]
    fn pack(&mut self, e: &Entry) -> Option<Slot> {
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
    fn unpack(&self, s: Slot) -> Entry {
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
    fn drop_slot(&mut self, s: Slot) {
        if s.packed & 1 != 0 {
            self.give_back((s.packed >> 1) as u32);
        }
    }
}

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

/// How far from its home a block may sit in the address-ordered table.
const MAX_SHIFT: usize = 16;

/// Two cache lines: the lock and the address-ordered table's fields (what
/// every event reads) in the first.
#[repr(align(128))]
pub struct Shard(pub SpinLock<Table>);

const _: () = assert!(core::mem::size_of::<Shard>() == 128);
// The lock word (8 bytes, first: `SpinLock` is `repr(C)`) and the
// address-ordered table's fields, which precede `far`, in the first line.
const _: () = assert!(8 + core::mem::offset_of!(Table, far) <= 64);

#[allow(clippy::declare_interior_mutable_const)] // only used to initialize the array
const EMPTY_PROBE: Probe = Probe {
    slots: null_mut(),
    mask: 0,
    len: 0,
    limit: 0,
};
const EMPTY_ENTRY: Entry = Entry {
    addr: 0,
    size: 0,
    time: 0,
    stack: 0,
    weight: 0,
};
#[allow(clippy::declare_interior_mutable_const)] // only used to initialize the array
const EMPTY_SHARD: Shard = Shard(SpinLock::new(Table::new()));
pub static SHARD_TABLE: [Shard; SHARDS] = [EMPTY_SHARD; SHARDS];

/// Slots follow the address order inside each 16 MiB region (plus a
/// scrambled per-region offset): neighbouring blocks, neighbouring slots.
///
/// One slot per 16 bytes, although glibc's chunks are at least 32: one per
/// 32 would pack blocks twice as densely, and where two 64 KiB windows of
/// one shard overlap in the table, runs would pile up past `MAX_SHIFT`
/// into the overflow table (Python building 3 M strings ran 14% slower).
#[inline(always)]
pub fn near_hash(addr: u64) -> usize {
    let region = (addr >> 24).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
    ((addr >> 4).wrapping_add(region)) as usize
}

/// Every address bit mixed into the slot.
#[inline(always)]
fn far_hash(addr: u64) -> usize {
    ((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24) as usize
}

/// Shards split the address space in 64 KiB windows, so one thread's
/// neighbouring blocks share a shard while threads' arenas spread out.
///
/// Window `j` of the 64 MiB region `r` goes to shard `j + start(r)`, where
/// `start` steps by the golden ratio around the shards (a Weyl sequence):
/// any run of T consecutive regions starts at least about 550/T shards
/// apart (35 at 16, 8 at 64; `tests/live_table.rs`). glibc gives each
/// thread an arena of its own in a 64 MiB heap, maps these heaps side by
/// side, and a thread's blocks sit in the first windows of its heap: those
/// of 16 threads with heaps up to 2 MiB never share a shard. A hash of the
/// window, as before, put two of 16 threads on one shard in most runs on a
/// 16-core machine (the birthday problem), and those two then passed its
/// lock and its lines between them on every event: the churn in 16
/// threads took 2.3 to 3.4 s instead of 0.9. Within one region (a
/// single-threaded heap), windows take the shards in turn.
#[inline(always)]
pub fn shard_of(addr: u64) -> &'static Shard {
    &SHARD_TABLE[shard_index(addr)]
}

#[inline(always)]
pub fn shard_index(addr: u64) -> usize {
    const BITS: u32 = SHARDS.trailing_zeros();
    let window = (addr >> 16) as usize;
    let start = ((addr >> 26) as u32).wrapping_mul(0x9E37_79B9) >> (32 - BITS);
    (window + start as usize) & (SHARDS - 1)
}

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
        // Fresh anonymous mappings are zero-filled, i.e. all slots empty.
        arena::map_populated(cap * core::mem::size_of::<Slot>()) as *mut Slot
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

    fn release(&mut self) {
        if !self.slots.is_null() {
            // SAFETY: the table was one mapping of cap entries.
            unsafe {
                arena::unmap(
                    self.slots as *mut u8,
                    self.cap() * core::mem::size_of::<Slot>(),
                )
            };
        }
        *self = EMPTY_PROBE;
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
        let mut free = 0;
        let mut i = self.records.free;
        while i != NO_RECORD {
            free += 1;
            // SAFETY: a free record, inside the array.
            i = unsafe { (*self.records.at(i)).size } as u32;
        }
        self.records.used as usize - free
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
        let slots = unsafe {
            arena::grow_populated(self.near.slots as *mut u8, old * bytes, 2 * old * bytes)
        } as *mut Slot;
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

/// Blocks allocated last while the process has one thread, in a small
/// direct-mapped array before the shards: most blocks die young (a
/// temporary object, a buffer freed by the next line), and one that dies
/// here never costs a shard's hash, probe and backward shift. A block whose
/// slot is wanted by a newer one moves on to its shard.
///
/// Only a process with one thread uses the slots (with plain loads and
/// stores: see `sync::single_threaded`). When a second thread appears, the
/// first table operation of any thread moves whatever they hold into the
/// shards (`settle_young`), under `YOUNG_LOCK`, before it touches a shard.
const YOUNG: usize = 16;

struct YoungSlots(core::cell::UnsafeCell<[Entry; YOUNG]>);

// SAFETY: written with plain stores only while the process has one thread;
// otherwise only under YOUNG_LOCK (see `settle_young`).
unsafe impl Sync for YoungSlots {}

static YOUNG_SLOTS: YoungSlots = YoungSlots(core::cell::UnsafeCell::new([EMPTY_ENTRY; YOUNG]));

/// Whether a young slot may hold a block (set by every young insert, cleared
/// when a threaded process has moved them to the shards).
static YOUNG_ANY: AtomicBool = AtomicBool::new(false);

/// Taken to move the young blocks to the shards, and to read them with the
/// shards (`for_each_block`); always before any shard's lock.
pub static YOUNG_LOCK: SpinLock<()> = SpinLock::new(());

/// The young slot of `addr`: 16-byte granules in turn, so that blocks
/// allocated one after another take different slots.
#[inline(always)]
fn young_slot(addr: u64) -> *mut Entry {
    // SAFETY: the index is below YOUNG.
    unsafe { (YOUNG_SLOTS.0.get() as *mut Entry).add((addr >> 4) as usize & (YOUNG - 1)) }
}

/// Before a threaded process touches a shard: moves the young blocks there
/// if some may be left from when it had one thread.
#[inline(always)]
fn settle_young() {
    if YOUNG_ANY.load(Ordering::Acquire) {
        move_young();
    }
}

#[cold]
#[inline(never)]
fn move_young() {
    // A signal handler that interrupted the move on this thread leaves it
    // to that frame.
    let Some(_g) = YOUNG_LOCK.lock_unless_held_here() else {
        return;
    };
    if !YOUNG_ANY.load(Ordering::Relaxed) {
        return;
    }
    for i in 0..YOUNG {
        // SAFETY: we hold YOUNG_LOCK, and the process has more than one
        // thread, so no young insert or remove runs.
        let s = unsafe { &mut *young_slot((i as u64) << 4) };
        if s.addr != 0 {
            shard_of(s.addr).0.lock().insert(*s);
            s.addr = 0;
        }
    }
    YOUNG_ANY.store(false, Ordering::Release);
}

/// Records a block alive. Returns false if memory for the table ran out
/// (the block is then not known).
#[inline(always)]
pub fn insert(e: Entry) -> bool {
    if sync::single_threaded() {
        let s = young_slot(e.addr);
        // SAFETY: one thread, and no other hook runs on it while this one
        // does (a signal handler's calls are passed through).
        let old = unsafe { *s };
        let mut kept = true;
        if old.addr != 0 && old.addr != e.addr {
            kept = shard_of(old.addr).0.lock().insert(old);
        }
        // An address already in the slot is a block released behind the
        // recorder's back: the new one replaces it, as in a shard.
        // SAFETY: as above.
        unsafe { *s = e };
        YOUNG_ANY.store(true, Ordering::Relaxed);
        return kept;
    }
    settle_young();
    shard_of(e.addr).0.lock().insert(e)
}

/// Forgets a block, returning what was recorded of it, if anything.
#[inline(always)]
pub fn remove(addr: u64) -> Option<Entry> {
    if sync::single_threaded() {
        let s = young_slot(addr);
        // SAFETY: as in `insert`.
        unsafe {
            if (*s).addr == addr {
                let e = *s;
                (*s).addr = 0;
                return Some(e);
            }
        }
    } else {
        settle_young();
    }
    shard_of(addr).0.lock().remove(addr)
}

/// Calls `f` on every block alive, for the profile written at exit. A
/// part held by a frame below on this thread (an exit from a signal handler
/// that interrupted a hook) is left out.
pub fn for_each_block(mut f: impl FnMut(&Entry)) {
    // Held until the shards are read too, so that no block moves from one
    // to the other in between.
    let young = YOUNG_LOCK.try_lock_for(1000);
    if young.is_some() {
        for i in 0..YOUNG {
            // SAFETY: YOUNG_LOCK is held, so no other thread moves the
            // slots; no young insert of this thread runs during the dump.
            let s = unsafe { &*young_slot((i as u64) << 4) };
            if s.addr != 0 {
                f(s);
            }
        }
    }
    for shard in SHARD_TABLE.iter() {
        if let Some(t) = shard.0.try_lock_for(1000) {
            t.for_each(&mut f);
        }
    }
}
