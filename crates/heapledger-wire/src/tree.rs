//! A dump's stacks as the reader holds them: one prefix tree of frames,
//! and each stack's counters packed.
//!
//! The recorder writes each stack against the one before it (the outer
//! frames they share once), but consecutive stacks of a real program share
//! few: half a million stacks 21 frames deep came to 10 million frames,
//! 430 bytes a stack decoded. Their prefix tree has 1.5 million nodes (12
//! bytes each), and their counters, 27 numbers mostly small, take 40 bytes
//! as varints instead of 216.

use crate::{MinMaxSum, StackCounters, Totals};

/// The stacks' frames: node 0 is the root (no frame); every other node is
/// a frame (a return address) called from its parent's, outermost first.
/// Each (parent, frame) pair is one node, so two stacks with the same
/// frames end at the same node. A parent's number is below its children's.
/// A node's frame is an index in `addrs`, the dump's distinct addresses
/// (4 bytes a node, not 8: 6 MB of `run`'s peak at half a million stacks).
#[derive(Clone, Debug)]
pub struct FrameTree {
    pub parent: Vec<u32>,
    pub frame: Vec<u32>,
    pub addrs: Vec<u64>,
}

impl Default for FrameTree {
    fn default() -> Self {
        FrameTree {
            parent: vec![ROOT],
            frame: vec![NO_FRAME],
            addrs: Vec::new(),
        }
    }
}

pub use crate::prefix::ROOT;

/// The root's frame, which is no address (read as 0).
const NO_FRAME: u32 = u32::MAX;

impl FrameTree {
    /// The tree of stacks given as frame ids, outermost first (stack `i`
    /// is `ids[ends[i - 1]..ends[i]]`), each id an index in `addrs`;
    /// and each stack's node. Built by sorting the stacks
    /// ([`crate::prefix::build`]), not by looking each frame up: ten
    /// million frames looked up in a hash table of their nodes took 2.5 s
    /// on this machine (a cache miss each), sorted 0.3 s.
    pub fn build<F: crate::prefix::FrameId>(
        ids: &[F],
        ends: &[usize],
        addrs: Vec<u64>,
    ) -> (FrameTree, Vec<u32>) {
        let mut t = FrameTree {
            addrs,
            ..FrameTree::default()
        };
        let nodes = crate::prefix::build_each(ids, ends, |_, parent, f| {
            t.parent.push(parent);
            t.frame.push(f);
        });
        t.parent.shrink_to_fit();
        t.frame.shrink_to_fit();
        (t, nodes)
    }

    /// The frame (return address) of `node`; 0 for the root.
    #[inline]
    pub fn frame(&self, node: u32) -> u64 {
        let id = self.frame[node as usize];
        self.addrs.get(id as usize).copied().unwrap_or(0)
    }

    /// Nodes, the root included.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parent.len() <= 1
    }

    /// The frames from `node` up, leaf first, into `out` (cleared).
    pub fn frames(&self, mut node: u32, out: &mut Vec<u64>) {
        out.clear();
        while node != ROOT {
            out.push(self.frame(node));
            node = self.parent[node as usize];
        }
    }

    /// How many frames a stack ending at `node` has.
    pub fn depth(&self, mut node: u32) -> usize {
        let mut n = 0;
        while node != ROOT {
            n += 1;
            node = self.parent[node as usize];
        }
        n
    }
}

/// Numbers per stack's counters.
pub(crate) const COUNTER_FIELDS: usize = 5 * 4 + 4 + 3;

#[cfg(test)]
fn zig(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzig(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `c` to `out`, packed: the numbers of a [`Tag::StackStats`]
/// record after its id, which the decoder keeps as they are (the test
/// below holds the two alike).
#[cfg(test)]
pub(crate) fn pack_counters(c: &StackCounters, out: &mut Vec<u8>) {
    let t = &c.totals;
    let mut b = [0u8; COUNTER_FIELDS * 10];
    let mut n = 0;
    let mut put = |mut v: u64| {
        while v >= 0x80 {
            b[n] = (v as u8) | 0x80;
            n += 1;
            v >>= 7;
        }
        b[n] = v as u8;
        n += 1;
    };
    for m in [&t.alloc, &t.free, &t.lifetime, &t.mmap, &t.munmap] {
        for v in [m.count, m.min, m.max, m.sum] {
            put(v);
        }
    }
    put(t.zeros);
    put(t.realloc_count);
    put(zig(t.realloc_delta));
    put(t.temporary);
    put(zig(c.alive));
    put(c.max_alive);
    put(zig(c.at_peak));
    out.extend_from_slice(&b[..n]);
}

/// The counters packed at `at` in `buf` (as [`pack_counters`] writes them; the arena
/// is the decoder's own, so a short read cannot happen: it reads zeros).
pub(crate) fn unpack_counters(buf: &[u8], mut at: usize) -> StackCounters {
    let mut v = [0u64; COUNTER_FIELDS];
    for x in &mut v {
        // Most numbers are one byte (most counters are small or 0).
        if let Some(&b) = buf.get(at) {
            if b < 0x80 {
                *x = u64::from(b);
                at += 1;
                continue;
            }
        }
        let mut shift = 0;
        while let Some(&b) = buf.get(at) {
            at += 1;
            if shift < 64 {
                *x |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
    }
    let m = |k: usize| MinMaxSum {
        count: v[k],
        min: v[k + 1],
        max: v[k + 2],
        sum: v[k + 3],
    };
    StackCounters {
        totals: Totals {
            alloc: m(0),
            free: m(4),
            lifetime: m(8),
            mmap: m(12),
            munmap: m(16),
            zeros: v[20],
            realloc_count: v[21],
            realloc_delta: unzig(v[22]),
            temporary: v[23],
        },
        alive: unzig(v[24]),
        max_alive: v[25],
        at_peak: unzig(v[26]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_paths_share_their_nodes() {
        // Stacks (outermost first): [10, 20], [10, 30], [10, 20], [40].
        let frames = [10, 20, 30, 40];
        let ids: [u32; 7] = [0, 1, 0, 2, 0, 1, 3];
        let (t, nodes) = FrameTree::build(&ids, &[2, 4, 6, 7], frames.to_vec());
        assert_eq!(nodes[0], nodes[2]);
        assert_eq!(t.len(), 5);
        assert_eq!((t.frame(ROOT), t.frame(nodes[3])), (0, 40));
        let mut out = Vec::new();
        t.frames(nodes[1], &mut out);
        assert_eq!(out, [30, 10]);
        assert_eq!(t.depth(nodes[0]), 2);
        t.frames(nodes[3], &mut out);
        assert_eq!(out, [40]);
    }

    #[test]
    fn counters_pack_and_unpack_alike() {
        let mut c = StackCounters::default();
        c.totals.alloc = MinMaxSum {
            count: 3,
            min: 1,
            max: u64::MAX,
            sum: 1 << 40,
        };
        c.totals.realloc_delta = i64::MIN;
        c.alive = -7;
        c.at_peak = i64::MAX;
        c.max_alive = 99;
        c.totals.temporary = 5;
        let mut buf = vec![1, 2];
        pack_counters(&c, &mut buf);
        let back = unpack_counters(&buf, 2);
        assert_eq!(format!("{back:?}"), format!("{c:?}"));
        // A `StackStats` record's numbers after its tag and id are these
        // bytes: the decoder keeps them as they are.
        struct Bytes(Vec<u8>);
        impl crate::Sink for Bytes {
            fn put(&mut self, b: &[u8]) {
                self.0.extend_from_slice(b);
            }
        }
        let mut e = crate::Encoder {
            sink: Bytes(Vec::new()),
        };
        e.stack_counters(300, &c);
        let record = &e.sink.0;
        assert_eq!(record[0], crate::Tag::StackStats as u8);
        assert_eq!(&record[3..], &buf[2..]);
    }
}
