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
//!
//! - `mod.rs`: the shards, and the young blocks before them;
//! - `table.rs`: a shard's two open-addressing tables;
//! - `records.rs`: slots, and the records of the entries a slot cannot hold;
//! - `inherited.rs`: in a forked child, the blocks of its parent.

pub mod inherited;
mod records;
mod table;

pub use table::Table;

use crate::base::sync::SpinLock;
use crate::base::{degrade, sync};
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

/// Two cache lines: the lock and the address-ordered table's fields (what
/// every event reads) in the first.
#[repr(align(128))]
pub struct Shard(pub SpinLock<Table>);

const _: () = assert!(core::mem::size_of::<Shard>() == 128);

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

/// A shard's first table or first records: 4 KiB, zero-filled. The first
/// `PLAIN_TABLES` are mappings of their own; later ones (a heap spread
/// over more than about 16 shards) come from the huge-page pool
/// (`arena::pool_take`), so that a table per shard does not cost a TLB
/// entry per shard, while a small program does not pay for a 2 MiB page.
pub(super) fn first_table() -> *mut u8 {
    static TAKEN: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
    const PLAIN_TABLES: u32 = 32;
    if TAKEN.fetch_add(1, Ordering::Relaxed) >= PLAIN_TABLES {
        let p = crate::base::arena::pool_take();
        if !p.is_null() {
            return p;
        }
    }
    crate::base::arena::map_populated(crate::base::arena::POOL_CHUNK)
}

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
pub(super) fn far_hash(addr: u64) -> usize {
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

/// Once recording stopped (`base::degrade`): forgets every block alive and
/// gives the tables' memory back to the system, where the program may need
/// it (the first call does; later ones return at once). Never called on a
/// thread that holds a shard's lock (from inside a hook's bookkeeping).
#[cold]
pub fn release() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    let mut bytes = 0;
    {
        let _young = YOUNG_LOCK.lock();
        for i in 0..YOUNG {
            // SAFETY: we hold YOUNG_LOCK; a process with one thread runs
            // no other hook meanwhile, and with more, young slots are only
            // touched under the lock.
            unsafe { (*young_slot((i as u64) << 4)).addr = 0 };
        }
        YOUNG_ANY.store(false, Ordering::Release);
    }
    for shard in SHARD_TABLE.iter() {
        bytes += shard.0.lock().release();
    }
    degrade::RELEASED.fetch_add(bytes as u64, Ordering::Relaxed);
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
