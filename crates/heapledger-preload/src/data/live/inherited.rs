//! Blocks a forked child inherited from its parent.
//!
//! A child counts from the fork on, as if it had started there: the
//! parent's blocks are not its allocations, and their frees must not make
//! its bytes alive negative. So at the fork the child moves every live
//! block into these tables (each shard's table whole, in one swap: no
//! block is touched), and the live tables start empty. A free that finds
//! no live block looks here (a cold path: it was an unknown free before),
//! and a block found is forgotten and counted as a free of an inherited
//! block, apart from the child's own counters.

use super::{shard_index, young_slot, Entry, Table, SHARDS, SHARD_TABLE, YOUNG, YOUNG_ANY};
use crate::base::sync::SpinLock;
use core::sync::atomic::{AtomicBool, Ordering};

pub struct Inherited {
    tables: [Table; SHARDS],
    /// Frees of inherited blocks, and their bytes.
    freed: u64,
    freed_bytes: u64,
}

/// Taken on the cold path of a free only (and by `fork.rs` around a fork).
pub static INHERITED: SpinLock<Inherited> = SpinLock::new(Inherited {
    tables: [const { Table::new() }; SHARDS],
    freed: 0,
    freed_bytes: 0,
});

/// Whether the process was forked from a recorded one (the tables may
/// hold blocks): a free in any other process never takes the lock.
static ANY: AtomicBool = AtomicBool::new(false);

/// In a forked child, which has one thread and no lock held: every live
/// block becomes inherited. A grandchild inherits what its parent had
/// inherited too.
pub fn inherit() {
    let mut inh = INHERITED.lock();
    for i in 0..YOUNG {
        // SAFETY: one thread, outside any hook.
        let s = unsafe { &mut *young_slot((i as u64) << 4) };
        if s.addr != 0 {
            inh.tables[shard_index(s.addr)].insert(*s);
            s.addr = 0;
        }
    }
    YOUNG_ANY.store(false, Ordering::Release);
    for (shard, old) in SHARD_TABLE.iter().zip(inh.tables.iter_mut()) {
        let own = core::mem::replace(&mut *shard.0.lock(), Table::new());
        if old.len() == (0, 0) {
            *old = own;
        } else {
            // A grandchild: the parent's own blocks join those it had
            // inherited. The emptied table's memory stays mapped, as it
            // was in the parent.
            own.for_each(|e| {
                old.insert(*e);
            });
        }
    }
    inh.freed = 0;
    inh.freed_bytes = 0;
    ANY.store(true, Ordering::Release);
}

/// Forgets an inherited block being freed, counting its free; its size, or
/// None when it is no inherited block.
#[cold]
pub fn take(addr: u64) -> Option<Entry> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let mut inh = INHERITED.lock_unless_held_here()?;
    let e = inh.tables[shard_index(addr)].remove(addr)?;
    inh.freed += 1;
    inh.freed_bytes += e.size;
    Some(e)
}

/// (blocks inherited still alive, their bytes, inherited blocks freed,
/// their bytes), for the dump.
pub fn counts() -> (u64, u64, u64, u64) {
    let Some(inh) = INHERITED.try_lock_for(1000) else {
        return (0, 0, 0, 0);
    };
    let (mut n, mut bytes) = (0, 0);
    for t in inh.tables.iter() {
        t.for_each(|e| {
            n += 1;
            bytes += e.size;
        });
    }
    (n, bytes, inh.freed, inh.freed_bytes)
}
