//! Tracebacks the program keeps itself (`shared/reference/timelog.md`,
//! seed 004's stmgc design): frames it pushes and pops (a code address, or
//! a label such as "file.py:12 in f"), held as read-only nodes, one per
//! frame, each linked to its caller and reference counted.
//!
//! A thread's stack is its top node, on which it holds one reference.
//! Pushing makes a node whose parent link takes over that reference; so a
//! snapshot of the current stack is one more reference on the top node,
//! and stacks share every common prefix (push a, push b, snapshot, pop,
//! push c, snapshot: both snapshots hang from the one node of `a`).
//! Releasing the last reference frees a node and releases its parent, and
//! freed nodes are reused first (a free list), so the short-lived nodes of
//! a push-pop loop cost no new memory.
//!
//! Nodes are process-wide (in the recorder's own mappings, never given
//! back): a traceback taken on one thread and handed to another is a
//! reference, not a copy, and outlives the thread that made it.
//!
//! Costs: a push takes the free list's lock once; a pop or a release is an
//! atomic decrement (and the lock when a node is freed).

use crate::base::sync::SpinLock;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// No node (an empty stack).
pub const NONE: u32 = u32::MAX;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;
/// At most 16 M nodes (256 MiB).
const MAX_CHUNKS: usize = 256;

/// Frames at or above this are labels: `LABEL + id` (above any user-space
/// code address, and below `u64::MAX`, which stacks use as no frame).
pub const LABEL: u64 = heapledger_wire::LABEL_FRAMES;
/// The most labels (further ones share the last).
pub const MAX_LABELS: usize = 1 << 20;
/// A label's most bytes.
pub const LABEL_BYTES: usize = 256;

#[repr(C)]
struct Node {
    /// A code address, or `LABEL + id`.
    frame: AtomicU64,
    /// The caller's node, or [`NONE`]; the next free node while free.
    parent: AtomicU32,
    refs: AtomicU32,
}

static CHUNKS: [AtomicPtr<Node>; MAX_CHUNKS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CHUNKS];

pub(crate) struct Pool {
    /// First free node, or [`NONE`].
    free: u32,
    /// Nodes ever made.
    made: u32,
}

pub(crate) static POOL: SpinLock<Pool> = SpinLock::new(Pool {
    free: NONE,
    made: 0,
});

/// Nodes alive (referenced) now.
static ALIVE: AtomicU64 = AtomicU64::new(0);

fn node(i: u32) -> &'static Node {
    let chunk = CHUNKS[(i >> CHUNK_BITS) as usize].load(Ordering::Acquire);
    // SAFETY: `i` was handed out by `push`, so its chunk is mapped (never
    // unmapped) and holds CHUNK nodes.
    unsafe { &*chunk.add(i as usize & (CHUNK - 1)) }
}

/// Whether `i` names a node ever made (a handle from the program may not).
pub fn valid(i: u32) -> bool {
    i != NONE && i < POOL.lock().made
}

/// A new node for `frame` under `parent` (whose reference it takes over),
/// with one reference; None without memory for it.
pub fn push(parent: u32, frame: u64) -> Option<u32> {
    let i = {
        let mut p = POOL.lock();
        if p.free != NONE {
            let i = p.free;
            p.free = node(i).parent.load(Ordering::Relaxed);
            i
        } else {
            let i = p.made;
            let c = (i >> CHUNK_BITS) as usize;
            if c >= MAX_CHUNKS {
                return None;
            }
            if CHUNKS[c].load(Ordering::Relaxed).is_null() {
                let m = crate::base::arena::map(CHUNK * core::mem::size_of::<Node>());
                if m.is_null() {
                    return None;
                }
                CHUNKS[c].store(m as *mut Node, Ordering::Release);
            }
            p.made += 1;
            i
        }
    };
    let n = node(i);
    n.frame.store(frame, Ordering::Relaxed);
    n.parent.store(parent, Ordering::Relaxed);
    n.refs.store(1, Ordering::Release);
    ALIVE.fetch_add(1, Ordering::Relaxed);
    Some(i)
}

/// One more reference on `i` (none on [`NONE`], nor on a node already
/// freed: a handle the program released too often).
pub fn retain(i: u32) {
    if i != NONE {
        let _ = node(i)
            .refs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                (r > 0).then_some(r + 1)
            });
    }
}

/// Gives a reference on `i` back: the node is freed with its last one,
/// and its parent's reference is given back in turn.
pub fn release(mut i: u32) {
    while i != NONE {
        let n = node(i);
        // A node already freed (released once too often) stays as it is.
        let was = n
            .refs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
        if was != Ok(1) {
            return;
        }
        let parent = n.parent.load(Ordering::Relaxed);
        {
            let mut p = POOL.lock();
            n.parent.store(p.free, Ordering::Relaxed);
            p.free = i;
        }
        ALIVE.fetch_sub(1, Ordering::Relaxed);
        i = parent;
    }
}

/// The node under `i` (its caller), or [`NONE`].
pub fn parent(i: u32) -> u32 {
    match i {
        NONE => NONE,
        _ => node(i).parent.load(Ordering::Relaxed),
    }
}

/// The frame of node `i`.
pub fn frame(i: u32) -> u64 {
    node(i).frame.load(Ordering::Relaxed)
}

/// Nodes alive now.
pub fn alive() -> u64 {
    ALIVE.load(Ordering::Relaxed)
}

// ---- Labels ----

pub(crate) struct Labels {
    text: alloc::vec::Vec<alloc::string::String>,
    ids: alloc::collections::BTreeMap<alloc::string::String, u32>,
}

pub(crate) static LABELS: SpinLock<Labels> = SpinLock::new(Labels {
    text: alloc::vec::Vec::new(),
    ids: alloc::collections::BTreeMap::new(),
});

/// The frame of the label `name` (printable ASCII kept, [`LABEL_BYTES`]
/// at most), given an id on first use.
pub fn label(name: &[u8]) -> u64 {
    let clean = crate::base::printable(name, LABEL_BYTES, "?");
    let mut l = LABELS.lock();
    if let Some(&id) = l.ids.get(&clean) {
        return LABEL + id as u64;
    }
    if l.text.len() >= MAX_LABELS {
        return LABEL + (MAX_LABELS - 1) as u64;
    }
    let id = l.text.len() as u32;
    l.text.push(clean.clone());
    l.ids.insert(clean, id);
    LABEL + id as u64
}

/// Runs `f` on every label (id, text).
pub fn each_label(mut f: impl FnMut(u64, &str)) {
    if let Some(l) = LABELS.try_lock_for(1000) {
        for (id, t) in l.text.iter().enumerate() {
            f(id as u64, t);
        }
    }
}

/// The text of the label frame `frame`, given to `f` (None: not a label).
pub fn with_label<R>(frame: u64, f: impl FnOnce(&str) -> R) -> Option<R> {
    if frame < LABEL {
        return None;
    }
    let l = LABELS.lock();
    l.text.get((frame - LABEL) as usize).map(|t| f(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of the stack `top`, innermost first.
    fn frames(mut top: u32) -> alloc::vec::Vec<u64> {
        let mut v = alloc::vec::Vec::new();
        while top != NONE {
            v.push(frame(top));
            top = parent(top);
        }
        v
    }

    /// The tests that count nodes alive, one at a time (the pool is the
    /// process's).
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    // The edge cases of timelog.md, on the nodes themselves (the program's
    // calls are tested end to end in tests/timelogs.rs).
    #[test]
    fn snapshots_share_prefixes_and_release_to_the_baseline() {
        let _one = SERIAL.lock();
        let base = alive();
        // push a, push b, snapshot; pop; push c, snapshot.
        let a = push(NONE, 0xa).unwrap();
        let b = push(a, 0xb).unwrap();
        retain(b);
        let s1 = b;
        // pop: the thread's reference moves to a.
        retain(parent(b));
        release(b);
        let top = a;
        let c = push(top, 0xc).unwrap();
        retain(c);
        let s2 = c;
        assert_eq!(frames(s1), [0xb, 0xa]);
        assert_eq!(frames(s2), [0xc, 0xa]);
        assert_eq!(parent(s1), parent(s2));
        assert_eq!(alive(), base + 3);
        // The thread pops c and a; the snapshots go.
        retain(parent(c));
        release(c);
        release(a);
        assert_eq!(alive(), base + 3);
        release(s1);
        assert_eq!(alive(), base + 2);
        release(s2);
        assert_eq!(alive(), base);
        // Freed nodes are reused.
        let made = POOL.lock().made;
        let d = push(NONE, 0xd).unwrap();
        assert_eq!(POOL.lock().made, made);
        release(d);
    }

    #[test]
    fn a_handle_released_too_often_frees_nothing_more() {
        let _one = SERIAL.lock();
        let base = alive();
        let a = push(NONE, 0x1).unwrap();
        let b = push(a, 0x2).unwrap();
        release(b);
        assert_eq!(alive(), base);
        // b and a are free now: a second release of b, or a retain, leave
        // the pool as it is.
        release(b);
        retain(b);
        assert_eq!(alive(), base);
        let c = push(NONE, 0x3).unwrap();
        assert_eq!(frame(c), 0x3);
        release(c);
    }

    #[test]
    fn labels_are_interned() {
        let f = label(b"file.py:12 in f");
        assert_eq!(label(b"file.py:12 in f"), f);
        assert_ne!(label(b"file.py:13 in f"), f);
        assert_eq!(with_label(f, |t| t.to_owned()).unwrap(), "file.py:12 in f");
        assert_eq!(with_label(0x1234, |_| ()), None);
    }
}
