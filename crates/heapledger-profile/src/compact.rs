//! A profile's stacks held compactly: one prefix tree of frames, and each
//! stack's node, recorder id and counters (packed).
//!
//! `heapledger run` writes the profile store from this, never building
//! [`Stacks`]: half a million stacks 21 frames deep took 650 bytes each
//! there (their frames one by one, an id as text, 27 counters), and 50
//! here (a node, an id, counters as varints; the tree's 1.5 million nodes
//! 13 bytes each).

use crate::addr::Addr;
use crate::stacks::{MinMaxSum, StackInfos, StackStat, Stacks};

/// The root node: above every stack's outermost frame; it has no frame.
pub const ROOT: u32 = 0;

/// Stacks as a prefix tree of frames (see the module's documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactStacks {
    /// Each node's parent (node 0 is the root; a parent's number is below
    /// its children's).
    pub parent: Vec<u32>,
    /// Each node's frame (a return address minus one; the root's unused).
    pub frame: Vec<Addr>,
    /// Each stack's innermost node ([`ROOT`] for a stack without frames).
    pub node: Vec<u32>,
    /// Each stack's id as the recorder gave it (the JSON's `stackId`).
    pub id: Vec<u64>,
    /// The node of each of the profile's leaks (`Profile::leaks`, whose
    /// frames are also held there), in their order.
    pub leaks: Vec<u32>,
    packed: Vec<u8>,
    at: Vec<usize>,
    /// What `Profile::fill_malt_totals` adds up over the stacks, added up
    /// as they are pushed (a pass unpacking every stack's counters took 290
    /// M instructions at half a million stacks).
    pub totals: CompactTotals,
}

/// Sums over a [`CompactStacks`]' stacks (saturating).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactTotals {
    /// Allocations.
    pub alloc_count: u64,
    /// Bytes allocated.
    pub alloc_sum: u64,
    /// `mmap` calls.
    pub mmap_count: u64,
    /// Bytes mapped.
    pub mmap_sum: u64,
    /// Bytes at the global peak (of the stacks above 0).
    pub global_peak: u64,
}

impl CompactTotals {
    /// Adds a stack's counters.
    pub fn add(&mut self, i: &StackInfos) {
        self.alloc_count = self.alloc_count.saturating_add(i.alloc.count);
        self.alloc_sum = self.alloc_sum.saturating_add(i.alloc.sum);
        self.mmap_count = self.mmap_count.saturating_add(i.mmap.count);
        self.mmap_sum = self.mmap_sum.saturating_add(i.mmap.sum);
        self.global_peak = self
            .global_peak
            .saturating_add(u64::try_from(i.global_peak).unwrap_or(0));
    }
}

/// Numbers in a stack's counters.
const FIELDS: usize = 27;

fn zig(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzig(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn to_fields(i: &StackInfos) -> [u64; FIELDS] {
    let mut v = [0u64; FIELDS];
    v[0] = zig(i.count_zeros);
    v[1] = zig(i.max_alive_req);
    v[2] = zig(i.alive_req);
    for (k, m) in [&i.alloc, &i.free, &i.mmap, &i.munmap, &i.lifetime]
        .into_iter()
        .enumerate()
    {
        v[3 + 4 * k..7 + 4 * k].copy_from_slice(&[m.count, m.min, m.max, m.sum]);
    }
    v[23] = zig(i.global_peak);
    v[24] = i.realloc_count;
    v[25] = zig(i.realloc_sum_delta);
    v[26] = i.temporary;
    v
}

fn from_fields(v: &[u64; FIELDS]) -> StackInfos {
    let m = |k: usize| MinMaxSum {
        count: v[3 + 4 * k],
        min: v[4 + 4 * k],
        max: v[5 + 4 * k],
        sum: v[6 + 4 * k],
    };
    StackInfos {
        count_zeros: unzig(v[0]),
        max_alive_req: unzig(v[1]),
        alive_req: unzig(v[2]),
        alloc: m(0),
        free: m(1),
        mmap: m(2),
        munmap: m(3),
        lifetime: m(4),
        global_peak: unzig(v[23]),
        realloc_count: v[24],
        realloc_sum_delta: unzig(v[25]),
        temporary: v[26],
    }
}

impl CompactStacks {
    /// No stacks yet, over the tree given (`parent[0]` the root's).
    pub fn new(parent: Vec<u32>, frame: Vec<Addr>) -> CompactStacks {
        CompactStacks {
            parent,
            frame,
            ..Default::default()
        }
    }

    /// Room for `stacks` more stacks whose counters take about `bytes`
    /// packed (growing by doubling took a third more).
    pub fn reserve(&mut self, stacks: usize, bytes: usize) {
        self.node.reserve_exact(stacks);
        self.id.reserve_exact(stacks);
        self.at.reserve_exact(stacks);
        self.packed.reserve_exact(bytes + bytes / 16);
    }

    /// Adds a stack ending at `node`.
    pub fn push(&mut self, node: u32, id: u64, infos: &StackInfos) {
        self.totals.add(infos);
        self.node.push(node);
        self.id.push(id);
        self.at.push(self.packed.len());
        for mut v in to_fields(infos) {
            while v >= 0x80 {
                self.packed.push((v as u8) | 0x80);
                v >>= 7;
            }
            self.packed.push(v as u8);
        }
    }

    /// How many stacks.
    pub fn len(&self) -> usize {
        self.node.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.node.is_empty()
    }

    /// Stack `i`'s first numbers, in `to_fields`' order, into `v`.
    fn fields(&self, i: usize, v: &mut [u64]) {
        let p = &self.packed;
        let mut at = self.at[i];
        for x in v.iter_mut() {
            // Most numbers take a byte.
            if let Some(&b) = p.get(at) {
                if b < 0x80 {
                    *x = u64::from(b);
                    at += 1;
                    continue;
                }
            }
            let mut shift = 0;
            while let Some(&b) = p.get(at) {
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
    }

    /// Where stack `i`'s packed counters start: for a reader that goes
    /// through the stacks in another order than theirs, to fetch them
    /// ahead into the cache.
    pub fn counters_addr(&self, i: usize) -> Option<*const u8> {
        let at = *self.at.get(i)?;
        self.packed.get(at).map(|b| b as *const u8)
    }

    /// Fetches where stack `i`'s counters start into the cache, ahead of
    /// a [`counters_addr`](Self::counters_addr) (see [`crate::prefetch`]).
    pub fn fetch_counters_index(&self, i: usize) {
        crate::prefetch(self.at.as_ptr().wrapping_add(i));
    }

    /// Stack `i`'s counters.
    pub fn infos(&self, i: usize) -> StackInfos {
        let mut v = [0u64; FIELDS];
        self.fields(i, &mut v);
        from_fields(&v)
    }

    /// Stack `i`'s allocations, bytes allocated, frees and bytes freed (a
    /// series point's counters), its other numbers left unread.
    pub fn alloc_free(&self, i: usize) -> [u64; 4] {
        let mut v = [0u64; 11];
        self.fields(i, &mut v);
        [v[3], v[6], v[7], v[10]]
    }

    /// The frames from `node` up, innermost first, into `out` (cleared).
    pub fn frames_of(&self, mut node: u32, out: &mut Vec<Addr>) {
        out.clear();
        while node != ROOT {
            out.push(self.frame[node as usize]);
            node = self.parent[node as usize];
        }
    }

    /// Stack `i`'s innermost frame; None for a stack without frames.
    pub fn leaf(&self, i: usize) -> Option<Addr> {
        let node = *self.node.get(i)?;
        (node != ROOT).then(|| self.frame[node as usize])
    }

    /// Fetches stack `i`'s innermost frame into the cache ahead of a
    /// [`leaf`](Self::leaf) (see [`crate::prefetch`]); nothing past the end.
    pub fn fetch_leaf(&self, i: usize) {
        if let Some(&node) = self.node.get(i) {
            crate::prefetch(self.frame.as_ptr().wrapping_add(node as usize));
        }
    }

    /// Stack `i`'s frames, innermost first, into `out` (cleared).
    pub fn stack(&self, i: usize, out: &mut Vec<Addr>) {
        self.frames_of(self.node[i], out)
    }

    /// The stacks one by one, as [`Stacks`] holds them.
    pub fn into_stacks(self) -> Stacks {
        let mut s = Stacks::default();
        s.stats.reserve(self.len());
        let mut text = [0u8; 24];
        for i in 0..self.len() {
            let mut stack = Vec::new();
            self.stack(i, &mut stack);
            s.stats.push(StackStat::new(
                // "0x..." as format! writes it, without its machinery.
                Addr::native(self.id[i]).format_into(&mut text),
                stack,
                self.infos(i),
            ));
        }
        s.count = s.stats.len() as u64;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_come_back_as_given() {
        // root; 1 = a; 2 = a>b; 3 = a>c.
        let frame = [0, 0xa, 0xb, 0xc].map(Addr::native).to_vec();
        let mut c = CompactStacks::new(vec![0, 0, 1, 1], frame);
        let i = StackInfos {
            alloc: MinMaxSum {
                count: 2,
                min: 1,
                max: u64::MAX,
                sum: 1 << 50,
            },
            alive_req: -3,
            realloc_sum_delta: i64::MIN,
            temporary: 9,
            ..Default::default()
        };
        c.push(3, 0x10, &i);
        c.push(ROOT, 0x11, &StackInfos::default());
        c.push(2, 0x12, &i);
        assert_eq!(c.infos(0), i);
        assert_eq!(
            c.alloc_free(0),
            [i.alloc.count, i.alloc.sum, i.free.count, i.free.sum]
        );
        assert_eq!(c.infos(1), StackInfos::default());
        let s = c.into_stacks();
        assert_eq!(s.count, 3);
        assert_eq!(s.stats[0].stack, [0xc, 0xa].map(Addr::native));
        assert!(s.stats[1].stack.is_empty());
        assert_eq!(s.stats[2].stack_id, "0x12");
        assert_eq!(s.stats[2].infos, i);
    }
}
