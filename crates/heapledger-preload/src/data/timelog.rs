//! Time lost (seed 004, `shared/reference/timelog.md`): each thread's log
//! of the waits it made, a fixed number of entries, highest lost time
//! first; and, per lock, the stack that last took it after a contended
//! wait (the holder's stack a later waiter is shown).
//!
//! An event is (kind, the waiter's stack, the holder's stack where known)
//! and a duration. Events are regrouped before they compete for a place:
//! one that repeats the last event's key adds to it (count, total, most),
//! and an entry of the same key already in the log takes it too; only a
//! new key competes, by its total, with the entry of least total, which
//! goes (on a tie the earlier entry stays). So a storm of short waits at
//! one stack is one entry that grows, not thousands that each lose to one
//! long wait. Stacks are ids of the recorder's table of distinct stacks
//! (`data::stacks`): shared, immutable, never freed, so an entry copied
//! from one thread outlives it and costs no copy of frames.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What was waited for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    #[default]
    Mutex = 0,
    RwRead = 1,
    RwWrite = 2,
    Cond = 3,
    Join = 4,
    Sem = 5,
}

/// An entry's key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Key {
    /// A `Kind` (its code), or a user kind (`USER_KIND` and up).
    pub kind: u8,
    /// The waiter's stack.
    pub stack: u32,
    /// The holder's stack (`NONE`: not known).
    pub other: u32,
}

/// No stack known.
pub const NONE: u32 = u32::MAX;

/// Codes of the kinds the program names (`heapledger_time_lost`,
/// `heapledger_wait_begin`): this and up, one per name, `MAX_USER_KINDS`
/// names at most (further names share the last code).
pub const USER_KIND: u8 = 16;
pub const MAX_USER_KINDS: usize = 64;

/// The names of the user kinds, by code less `USER_KIND`.
pub static USER_KINDS: crate::base::sync::SpinLock<alloc::vec::Vec<alloc::string::String>> =
    crate::base::sync::SpinLock::new(alloc::vec::Vec::new());

/// The code of the user kind `name` (printable ASCII kept, 64 bytes at
/// most), given one on first use.
pub fn user_kind(name: &[u8]) -> u8 {
    let clean = crate::base::printable(name, 64, "user");
    let mut kinds = USER_KINDS.lock();
    if let Some(i) = kinds.iter().position(|k| *k == clean) {
        return USER_KIND + i as u8;
    }
    if kinds.len() < MAX_USER_KINDS {
        kinds.push(clean);
    }
    USER_KIND + (kinds.len() - 1) as u8
}

/// The name of kind `code`: a built-in kind's (as the profile's readers
/// name them), or the name the program gave.
pub fn kind_name(code: u8) -> alloc::string::String {
    let builtin = [
        "mutex",
        "rwlock read",
        "rwlock write",
        "condition",
        "join",
        "semaphore",
    ];
    match code {
        c if (c as usize) < builtin.len() => builtin[c as usize].into(),
        c if c >= USER_KIND => USER_KINDS
            .lock()
            .get((c - USER_KIND) as usize)
            .cloned()
            .unwrap_or_else(|| "user".into()),
        _ => "other".into(),
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub key: Key,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Order of arrival in the log (ties keep the earlier).
    arrival: u64,
}

/// The most entries a log keeps (`--waits-top`).
pub const MAX_TOP: usize = 64;

#[derive(Clone)]
pub struct TimeLog {
    top: [Entry; MAX_TOP],
    n: usize,
    cap: usize,
    /// The last event's entry, not yet in `top`.
    pending: Option<Entry>,
    arrivals: u64,
}

impl TimeLog {
    /// A log of at most `cap` entries (1 to `MAX_TOP`).
    pub fn new(cap: usize) -> TimeLog {
        TimeLog {
            top: [Entry::default(); MAX_TOP],
            n: 0,
            cap: cap.clamp(1, MAX_TOP),
            pending: None,
            arrivals: 0,
        }
    }

    /// Its most entries.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Records a wait of `ns` (a negative difference of clocks is given as
    /// 0 by the caller). Returns the key of the event the log no longer
    /// holds, if one: merged into an entry of the same key, evicted, or
    /// not kept (a log of the program's own, whose keys are references to
    /// tracebacks, gives that reference back).
    pub fn record(&mut self, key: Key, ns: u64) -> Option<Key> {
        if let Some(p) = self.pending.as_mut() {
            if p.key == key {
                p.count += 1;
                p.total_ns = p.total_ns.saturating_add(ns);
                p.max_ns = p.max_ns.max(ns);
                return Some(key);
            }
        }
        let arrival = self.arrivals;
        self.arrivals += 1;
        let p = self.pending.replace(Entry {
            key,
            count: 1,
            total_ns: ns,
            max_ns: ns,
            arrival,
        })?;
        self.insert(p)
    }

    /// Puts `e` in the log; the key no longer held, if one (as `record`).
    fn insert(&mut self, e: Entry) -> Option<Key> {
        if let Some(t) = self.top[..self.n].iter_mut().find(|t| t.key == e.key) {
            t.count += e.count;
            t.total_ns = t.total_ns.saturating_add(e.total_ns);
            t.max_ns = t.max_ns.max(e.max_ns);
            return Some(e.key);
        }
        if self.n < self.cap {
            self.top[self.n] = e;
            self.n += 1;
            return None;
        }
        // The least total goes; of equal totals, the latest arrival.
        let (i, least) = self.top[..self.n]
            .iter()
            .enumerate()
            .min_by(|a, b| {
                a.1.total_ns
                    .cmp(&b.1.total_ns)
                    .then(b.1.arrival.cmp(&a.1.arrival))
            })
            .map(|(i, t)| (i, *t))
            .unwrap_or_default();
        if e.total_ns > least.total_ns {
            self.top[i] = e;
            Some(least.key)
        } else {
            Some(e.key)
        }
    }

    /// Moves the pending entry into the log (before it is read); the key
    /// no longer held, if one (as `record`).
    pub fn flush(&mut self) -> Option<Key> {
        let p = self.pending.take()?;
        self.insert(p)
    }

    /// Empties the log: the keys it held (its entries' and the pending
    /// one's).
    pub fn clear(&mut self) -> alloc::vec::Vec<Key> {
        let mut keys: alloc::vec::Vec<Key> = self.top[..self.n].iter().map(|e| e.key).collect();
        keys.extend(self.pending.take().map(|p| p.key));
        self.n = 0;
        keys
    }

    /// The entries, highest total first (of equal totals, the earlier).
    pub fn entries(&mut self) -> alloc::vec::Vec<Entry> {
        let _ = self.flush();
        let mut v = self.top[..self.n].to_vec();
        v.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.arrival.cmp(&b.arrival)));
        v
    }

    /// The entries, as `entries` gives them, leaving the log as it is.
    pub fn all(&self) -> alloc::vec::Vec<Entry> {
        self.clone().entries()
    }

    /// Adds another log's entries (an ended thread's, folded).
    pub fn absorb(&mut self, other: &mut TimeLog) {
        let _ = self.flush();
        for e in other.entries() {
            let mut e = e;
            e.arrival = self.arrivals;
            self.arrivals += 1;
            let _ = self.insert(e);
        }
    }
}

// ---- Holders: the stack that last took a lock after waiting for it ----

const HOLDERS: usize = 4096;
const PROBES: usize = 8;
static HOLDER_LOCK: [AtomicU64; HOLDERS] = [const { AtomicU64::new(0) }; HOLDERS];
static HOLDER_STACK: [AtomicU32; HOLDERS] = [const { AtomicU32::new(NONE) }; HOLDERS];

fn slot_of(lock: u64) -> usize {
    ((lock >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (HOLDERS - 1)
}

/// Whether `lock` has been waited for (its holders' stacks are then
/// noted at each acquisition); its slot.
#[inline(always)]
pub fn contended(lock: u64) -> Option<usize> {
    let s = slot_of(lock);
    for k in 0..PROBES {
        let i = (s + k) & (HOLDERS - 1);
        match HOLDER_LOCK[i].load(Ordering::Relaxed) {
            0 => return None,
            l if l == lock => return Some(i),
            _ => {}
        }
    }
    None
}

/// Marks `lock` as waited for; its slot, or None where the table has no
/// room near it.
pub fn mark_contended(lock: u64) -> Option<usize> {
    let s = slot_of(lock);
    for k in 0..PROBES {
        let i = (s + k) & (HOLDERS - 1);
        match HOLDER_LOCK[i].compare_exchange(0, lock, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(i),
            Err(l) if l == lock => return Some(i),
            Err(_) => {}
        }
    }
    None
}

/// The stack that took the lock of `slot` last.
pub fn holder(slot: usize) -> u32 {
    HOLDER_STACK[slot].load(Ordering::Relaxed)
}

pub fn set_holder(slot: usize, stack: u32) {
    HOLDER_STACK[slot].store(stack, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(stack: u32) -> Key {
        Key {
            kind: Kind::Mutex as u8,
            stack,
            other: NONE,
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_storm_of_short_waits_beats_one_long_wait() {
        // 1 000 waits of 1 ms at K, then one of 500 ms at J, N = 1.
        let mut log = TimeLog::new(1);
        for _ in 0..1000 {
            log.record(k(1), MS);
        }
        log.record(k(2), 500 * MS);
        let e = log.entries();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].key, e[0].count, e[0].total_ns),
            (k(1), 1000, 1000 * MS)
        );
    }

    #[test]
    fn eviction_keeps_the_highest() {
        // N = 3, losses 5 1 4 2 3 (each a new key): 5 4 3.
        let mut log = TimeLog::new(3);
        for (i, ms) in [5, 1, 4, 2, 3].into_iter().enumerate() {
            log.record(k(i as u32), ms * MS);
        }
        let totals: Vec<u64> = log.entries().iter().map(|e| e.total_ns / MS).collect();
        assert_eq!(totals, [5, 4, 3]);
    }

    #[test]
    fn ties_keep_the_earlier() {
        let mut log = TimeLog::new(2);
        for s in 0..4 {
            log.record(k(s), MS);
        }
        let stacks: Vec<u32> = log.entries().iter().map(|e| e.key.stack).collect();
        assert_eq!(stacks, [0, 1]);
    }

    #[test]
    fn same_keys_merge_consecutive_or_not() {
        // K K K J K at 1 ms: K 4 ms in 4 waits, J 1 ms.
        let mut log = TimeLog::new(8);
        for s in [1, 1, 1, 2, 1] {
            log.record(k(s), MS);
        }
        let e = log.entries();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].key.stack, e[0].count, e[0].total_ns), (1, 4, 4 * MS));
        assert_eq!((e[1].key.stack, e[1].count, e[1].total_ns), (2, 1, MS));
        // The holder's stack is part of the key.
        let mut log = TimeLog::new(8);
        log.record(Key { other: 7, ..k(1) }, MS);
        log.record(k(1), MS);
        assert_eq!(log.entries().len(), 2);
    }

    #[test]
    fn absorbing_an_ended_threads_log_keeps_the_top() {
        let mut a = TimeLog::new(2);
        a.record(k(1), 3 * MS);
        a.record(k(2), MS);
        let mut b = TimeLog::new(2);
        b.record(k(2), 5 * MS);
        b.record(k(3), 2 * MS);
        a.absorb(&mut b);
        let e: Vec<(u32, u64)> = a
            .entries()
            .iter()
            .map(|e| (e.key.stack, e.total_ns / MS))
            .collect();
        assert_eq!(e, [(2, 6), (1, 3)]);
    }

    #[test]
    fn user_kinds_are_numbered_by_name() {
        let a = user_kind(b"io wait");
        let b = user_kind(b"retry");
        assert_eq!(user_kind(b"io wait"), a);
        assert_ne!(a, b);
        assert!(a >= USER_KIND && b >= USER_KIND);
    }

    #[test]
    fn holders_are_found_by_lock() {
        let lock = 0x7f00_1234_5678u64;
        assert_eq!(contended(lock), None);
        let s = mark_contended(lock).unwrap();
        assert_eq!(contended(lock), Some(s));
        assert_eq!(holder(s), NONE);
        set_holder(s, 42);
        assert_eq!(holder(contended(lock).unwrap()), 42);
    }
}
